"""Hostile harness outputs (issue 47), read directly: every one is an EvaluationDataError naming what is wrong, never
another exception, a hang, or unbounded memory or time (DropLimits)."""

from __future__ import annotations

import json
import random
import tarfile
import threading
import time
import zipfile
from pathlib import Path

import pytest

from locus_model.data.errors import EvaluationDataError
from locus_model.data.harnesses import is_harness_drop, read_harness_output
from locus_model.data.limits import DropLimits, json_depth
from tests.locus_model.data import hostile


def refused(path: Path, match: str, **kwargs) -> EvaluationDataError:
    with pytest.raises(EvaluationDataError, match=match) as err:
        read_harness_output(path, **kwargs)
    return err.value


@pytest.mark.parametrize(
    "value, match",
    [
        ("1" + "0" * 400, r"acc is an integer of about 400 digits, not a score"),  # was OverflowError
        ("1" + "0" * 5000, r"record 1: not valid JSON \(Exceeds the limit"),  # was ValueError
        ("true", None),
    ],
)
def test_lm_eval_huge_integers_are_data_errors(tmp_path: Path, value: str, match: str | None) -> None:
    folder = hostile.with_sample(tmp_path, acc=value)
    if match is None:
        assert len(read_harness_output(folder)[0])
        return
    err = refused(folder, match)
    assert err.row == 1 and err.file is not None and Path(err.file).name.startswith("samples_locus_capitals_")


def test_lm_eval_metrics_not_a_list_is_a_data_error(tmp_path: Path) -> None:
    err = refused(hostile.with_sample(tmp_path, metrics="5"), "'metrics' is a JSON int, not a list")  # was TypeError
    assert err.column == "metrics" and err.row == 1


def test_inspect_eval_header_not_an_object(tmp_path: Path) -> None:
    log = hostile.inspect_eval(tmp_path, {"header.json": "[]", "samples/1_epoch_1.json": "{}"})
    refused(log, "header.json is a JSON list, not an object")  # was AttributeError


@pytest.mark.parametrize(
    "changes, match",
    [
        ({"samples": 5}, "samples are a JSON int, not a list"),  # was TypeError
        ({"results": [1, 2]}, None),  # was AttributeError: a results field that is no object names no scorer
    ],
)
def test_inspect_json_fields_of_the_wrong_type(tmp_path: Path, changes: dict, match: str | None) -> None:
    log = hostile.inspect_json(tmp_path, **changes)
    if match is None:
        assert len(read_harness_output(log)[0]) == 5  # each sample's only scorer is used
    else:
        refused(log, match)


def test_helm_count_and_input_of_the_wrong_type(tmp_path: Path) -> None:
    folder = Path(hostile.shutil.copytree(hostile.FIXTURES / "helm", tmp_path / "helm"))
    stats_file = next(folder.rglob("per_instance_stats.json"))
    stats = json.loads(stats_file.read_text())
    for stat in stats[0]["stats"]:
        stat.pop("mean", None)
        stat["count"] = "x"
    stats_file.write_text(json.dumps(stats))
    err = refused(folder, r"count \('x'\) and sum .* are not numbers")  # was TypeError
    assert err.file == stats_file and err.row == 1
    stats_file.write_text(
        json.dumps(json.loads((hostile.FIXTURES / "helm" / stats_file.parent.name / stats_file.name).read_text()))
    )
    state_file = stats_file.parent / "scenario_state.json"
    state = json.loads(state_file.read_text())
    state["request_states"][0]["instance"]["input"] = "a string"
    state_file.write_text(json.dumps(state))
    refused(folder, "has no input text")  # was AttributeError


def test_zip_members_encrypted_or_of_an_unknown_method_are_refused(tmp_path: Path) -> None:
    encrypted = hostile.patch_zip(hostile.zip_folder(hostile.lm_eval_folder(tmp_path), tmp_path / "e.zip"), flags=1)
    refused(encrypted, "is encrypted")  # was RuntimeError
    ppmd = hostile.patch_zip(
        hostile.zip_folder(hostile.lm_eval_folder(tmp_path, name="b"), tmp_path / "p.zip"), method=98
    )
    refused(ppmd, "uses compression method 98")  # was NotImplementedError
    log = hostile.patch_zip(hostile.inspect_eval(tmp_path, {"header.json": "{}"}), flags=1)
    refused(log, "'header.json' is encrypted")


def test_json_nested_without_bound_is_refused_before_parsing(tmp_path: Path) -> None:
    log = tmp_path / "deep.json"
    log.write_text(hostile.deep_json(100_000))
    err = refused(log, "^[^(]*the JSON nests deeper than 200 levels", harness="inspect")  # was RecursionError
    assert err.file == log
    line = (
        json.dumps(hostile.first_sample(hostile.FIXTURES / "lm_eval"))[:-1]
        + ', "x": '
        + "[" * 100_000
        + "]" * 100_000
        + "}"
    )
    refused(hostile.lm_eval_folder(tmp_path, line), "nests deeper")
    assert json_depth(b'{"a": "[[[[", "b": [[{}]]}') == 4  # brackets inside strings do not count
    assert json_depth(b'["\\"[", 1]') == 1


def test_a_pipe_in_a_folder_is_refused_without_opening_it(tmp_path: Path) -> None:
    folder = hostile.helm_with_fifo(tmp_path)
    outcome: list[BaseException | None] = []

    def read() -> None:
        try:
            read_harness_output(folder)
        except BaseException as err:  # noqa: BLE001 (handed to the test's thread)
            outcome.append(err)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    reader.join(20)
    if reader.is_alive():  # unblock the reader (a writer end opened) so the thread ends, then fail
        with open(next(folder.rglob("per_instance_stats.json")), "w"):
            pass
        pytest.fail("the reader opened the named pipe and blocked")
    (err,) = outcome
    assert (
        isinstance(err, EvaluationDataError)
        and "not a regular file" in err.problem
        and "per_instance_stats.json" in err.problem
    )


def test_unpacked_bytes_are_counted_as_read_for_archives_and_eval_members(tmp_path: Path) -> None:
    folder = hostile.lm_eval_folder(tmp_path)
    samples = next(folder.rglob("samples_locus_capitals_*.jsonl"))
    samples.write_text(samples.read_text() * 2000)  # ~ MBs of repeated lines: compresses to little
    size = sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())
    for name in ("big.zip", "big.tar.gz"):
        archive = tmp_path / name
        if name.endswith(".zip"):
            hostile.zip_folder(folder, archive)
        else:
            with tarfile.open(archive, "w:gz") as tar:
                tar.add(folder, arcname="lm")
        assert archive.stat().st_size < size / 20
        refused(archive, "unpacks to more than 1,000,000 bytes", limits=DropLimits(max_unpacked_bytes=1_000_000))
        assert len(read_harness_output(archive, limits=DropLimits(max_unpacked_bytes=size + 1))[0])
    spaces = hostile.inspect_eval(tmp_path, {"header.json": b" " * 3_000_000 + b"{}"}, name="spaces.eval")
    refused(spaces, "larger than 1,000,000 bytes", limits=DropLimits(max_document_bytes=1_000_000))
    refused(spaces, "unpacks to more than 2,000,000 bytes", limits=DropLimits(max_unpacked_bytes=2_000_000))


def test_a_jsonl_line_over_the_document_limit_is_refused(tmp_path: Path) -> None:
    limit = max(p.stat().st_size for p in hostile.FIXTURES.joinpath("lm_eval").rglob("*.json")) + 1  # results files fit
    line = json.dumps(hostile.first_sample(hostile.FIXTURES / "lm_eval"))[:-1] + ', "pad": "' + "x" * limit + '"}'
    err = refused(
        hostile.lm_eval_folder(tmp_path, line),
        f"longer than {limit:,} bytes",
        limits=DropLimits(max_document_bytes=limit),
    )
    assert err.row == 1


def test_many_members_and_slow_reads_stop_at_the_limits(tmp_path: Path) -> None:
    archive = hostile.many_members(tmp_path / "many.zip", 3000)
    refused(archive, "more than 1,000 members", limits=DropLimits(max_members=1000))
    refused(archive, "took longer than 0 s", limits=DropLimits(seconds=0))
    refused(hostile.lm_eval_folder(tmp_path), "took longer than 0 s", limits=DropLimits(seconds=0))


def test_an_eval_file_that_is_not_a_zip_says_so(tmp_path: Path) -> None:
    log = tmp_path / "run.eval"
    log.write_text('{"not": "a zip"}')
    assert is_harness_drop(log)  # not "unsupported file type": the Inspect reader says what it is not
    refused(log, r"not a readable \.eval log \(BadZipFile.*an \.eval log is a zip archive")


def test_a_zip_member_of_the_wrong_type_is_refused_with_the_other_checks(tmp_path: Path) -> None:
    archive = tmp_path / "link.zip"
    with zipfile.ZipFile(archive, "w") as z:
        info = zipfile.ZipInfo("out/samples_x_2026-01-01T00-00-00.000001.jsonl")
        info.external_attr = 0o120777 << 16  # a symbolic link
        z.writestr(info, "/etc/passwd")
    refused(archive, "is a link or a device")


def _cpu_seconds(read, path: Path) -> float:
    """The least CPU time of three reads of ``path`` (each refused: both inputs nest too deep)."""
    times = []
    for _ in range(3):
        start = time.process_time()
        with pytest.raises(EvaluationDataError, match="nests deeper than 200 levels"):
            read(path)
        times.append(time.process_time() - start)
    return min(times)


def _dropped(tmp_path: Path, kind: str, document: bytes, name: str) -> Path:
    if kind == "json":
        target = tmp_path / f"{name}.json"
        target.write_bytes(document)
        return target
    if kind == "eval":
        return hostile.inspect_eval(tmp_path, {"header.json": document}, name=f"{name}.eval")
    return hostile.lm_eval_folder(tmp_path, document.decode(), name=name)


@pytest.mark.parametrize("kind", ["json", "eval", "lm_eval"])
def test_the_depth_check_is_linear_in_the_document(tmp_path: Path, kind: str) -> None:
    """An unclosed string of escaped quotes behind 300 brackets (1 MB) costs about what plain letters in its place
    cost (a string-skipping regex took an hour at 1 MB: it was quadratic)."""
    head = b'{"version": 2, "status": "success", "eval": {"task": "t", "model": "m"}, "samples": ' + b"[" * 300 + b'"'
    size = 1 << 20
    hostile_doc, plain_doc = head + b'\\"' * (size // 2), head + b"ab" * (size // 2)
    read = (lambda p: read_harness_output(p, harness="inspect")) if kind != "lm_eval" else read_harness_output
    hostile_cpu = _cpu_seconds(read, _dropped(tmp_path, kind, hostile_doc, "hostile"))
    plain_cpu = _cpu_seconds(read, _dropped(tmp_path, kind, plain_doc, "plain"))
    assert hostile_cpu <= 5 * max(plain_cpu, 0.01), (hostile_cpu, plain_cpu)


def test_json_depth_matches_a_byte_by_byte_scan() -> None:
    def scan(data: bytes) -> int:  # the state machine, one byte at a time
        depth = deepest = 0
        inside = escaped = False
        for byte in data:
            if escaped:
                escaped = False
                if byte in b'"\\':
                    continue
            if byte == ord("\\"):
                escaped = True
            elif byte == ord('"'):
                inside = not inside
            elif not inside and byte in b"[{":
                depth += 1
                deepest = max(deepest, depth)
            elif not inside and byte in b"]}":
                depth -= 1
        return deepest

    rng = random.Random(0)
    cases = [bytes(rng.choice(b'[]{}"\\ax') for _ in range(rng.randint(1, 80))) for _ in range(500)]
    cases += [b'{"a": "\\\\", "b": [[{}]]}', b'["\\\\\\"[", [1]]', b"[" * 50 + b'"' + b"\\" * 7 + b'"]"']
    for data in cases:
        assert json_depth(data) == scan(data), data
    assert json_depth(b"[" * 3_000_000) == 3_000_000  # several blocks: the state carries over
    assert json_depth(b'"' + b"\\" * (3 << 20) + b'"[') == 1  # an even run across blocks: the quote closes
    assert json_depth(b'"' + b"\\" * ((3 << 20) - 1) + b'"[') == 0  # an odd one: it is escaped
