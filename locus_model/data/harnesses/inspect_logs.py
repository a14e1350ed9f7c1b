"""Inspect AI eval logs (``inspect eval ... --log-dir LOGS``) as the long evaluation table.

Inspect (UK AISI, github.com/UKGovernmentBEIS/inspect_ai; read here as 0.3.x writes it) writes one log per
(task, model) run: ``<time>_<task>_<id>.eval``, a zip holding ``header.json`` (``status``, ``eval``: task,
task_version, model, dataset; ``results``: the scorers) and ``samples/<id>_epoch_<n>.json``, or the same content as
one ``.json`` (``--log-format json``) with the samples in ``samples``. A sample has ``id``, ``epoch``, ``input`` (a
text, or chat messages), ``choices`` (multiple choice), ``target`` and ``scores`` (scorer -> {value, answer, ...}).

Rules (data/README.md, "Inspect AI"):
    model      ``model=`` when given, else ``eval.model`` (e.g. "openai/gpt-4o", "mockllm/model")
    query_id   ``inspect:<task>:v<task_version>:<sample id>:<12 hex of sha256 of the query text>``
    query      the sample's input (a text; for chat messages the last user message's text), with
               "A. <choice>" lines when the sample has choices (what Inspect's multiple_choice solver shows)
    benchmark  ``eval.task``
    score      the scorer named first in ``results.scores`` (or the only one a sample has; ``scorer=`` picks
               another); its value mapped as Inspect's value_to_float does: "C" (correct) 1, "I" (incorrect) 0,
               "P" (partial) 0.5, "N" (no answer) 0, booleans 0/1, numbers in [0, 1]; anything else is refused;
               several epochs of a sample: their mean (Inspect's default reducer)
    status     only a log with status "success" is read: "started" (still running), "error" and "cancelled"
               are refused (their samples are incomplete)
"""

from __future__ import annotations

import io
import struct
import zipfile
import zlib
from pathlib import Path

import pandas as pd

from locus_model.data.errors import EvaluationDataError
from locus_model.data.harnesses.common import (
    HarnessSummary,
    bad,
    check_model_name,
    finish,
    load_json,
    make_query_id,
    unit_score,
    with_options,
)
from locus_model.data.limits import CORRUPT, parse_json, read_bounded, zip_member_problem

VALUE_TO_FLOAT = {"C": 1.0, "I": 0.0, "P": 0.5, "N": 0.0}
LOG_SUFFIXES = (".eval", ".json")
FIX_LAYOUT = "give Inspect's log files as it writes them (<time>_<task>_<id>.eval, or .json with --log-format json)"


def is_inspect_log(path: str | Path) -> bool:
    """An .eval zip holding header.json or samples/, or a .json whose first bytes hold Inspect's top-level keys."""
    path = Path(path)
    try:
        if not path.is_file():
            return False
        if path.suffix == ".eval":
            with zipfile.ZipFile(path) as archive:
                return any(n == "header.json" or n.startswith(("samples/", "_journal/")) for n in archive.namelist())
        if path.suffix == ".json":
            with open(path, "rb") as handle:
                head = handle.read(4096).decode("utf-8", errors="ignore")
            return head.lstrip().startswith("{") and '"eval"' in head and '"status"' in head and '"version"' in head
    except (OSError, zipfile.BadZipFile):
        return False
    return False


def log_files(path: Path) -> list[Path]:
    """The Inspect logs in a folder (any depth), or the log itself: a file named .eval is read as one whatever its
    content (reading it says why it is not one)."""
    if path.is_file() and path.suffix == ".eval":
        return [path]
    files = (
        [path]
        if path.is_file()
        else [
            p
            for p in path.rglob("*")
            if p.suffix in LOG_SUFFIXES
            and p.is_file()
            and not any(s.startswith(".") for s in p.relative_to(path).parts)
        ]
    )
    return sorted((p for p in files if is_inspect_log(p)), key=lambda p: p.as_posix())


KEPT = ("id", "epoch", "input", "choices", "scores")  # what is read of a sample (the rest, e.g. its events, is dropped)


def _kept(sample: object) -> object:
    return {k: sample[k] for k in KEPT if k in sample} if isinstance(sample, dict) else sample


def _load_log(file: Path) -> tuple[dict, list[tuple[int | None, object]]]:
    """(header, [(record, sample)]) of one log; record = position in the JSON list, None for .eval members."""
    if file.suffix == ".json":
        log = load_json(file, fix="the log is cut off: the eval may still be running, or copy it again")
        if not isinstance(log, dict):
            raise EvaluationDataError("the log is not a JSON object", file=file, fix=FIX_LAYOUT)
        samples = log.get("samples") or []
        if not isinstance(samples, list):
            raise EvaluationDataError(
                f"the log's samples are a JSON {type(samples).__name__}, not a list",
                file=file,
                column="samples",
                fix=FIX_LAYOUT,
            )
        return log, [(i, _kept(s)) for i, s in enumerate(samples, start=1)]
    try:
        with zipfile.ZipFile(file) as archive:
            names = archive.namelist()
            if "header.json" not in names:
                raise EvaluationDataError(
                    "the .eval log has no header.json: the eval did not finish (or was killed)",
                    file=file,
                    fix="let the eval finish, or retry it (inspect eval-retry), then drop the log",
                )
            header = parse_json(_member(archive, file, "header.json"), f"{file} > header.json")
            samples = []
            for n in sorted(names):
                if n.startswith("samples/") and n.endswith(".json"):
                    samples.append((None, _kept(parse_json(_member(archive, file, n), f"{file} > {n}"))))
    except (*CORRUPT, zipfile.LargeZipFile) as err:
        raise EvaluationDataError(
            f"not a readable .eval log ({type(err).__name__}: {err}); an .eval log is a zip archive",
            file=file,
            fix="the log is cut off or damaged: copy it again",
        ) from None
    except EvaluationDataError:
        raise
    except ValueError as err:  # not UTF-8, not JSON
        raise EvaluationDataError(
            f"a member of the .eval log is not valid JSON ({err})", file=file, fix="the log is damaged: copy it again"
        ) from None
    if not isinstance(header, dict):
        raise EvaluationDataError(
            f"the .eval log's header.json is a JSON {type(header).__name__}, not an object",
            file=file,
            fix="the log is damaged: copy it again",
        )
    return header, samples


ZIP_ZSTANDARD = 93  # the compression Inspect writes .eval members with (Python's zipfile reads it from 3.14 on)


def _member(archive: zipfile.ZipFile, file: Path, name: str) -> bytes:
    """One member's bytes, within the document limit and counted against the unpacked budget (data.limits);
    zstd members are decompressed here with zstandard, and their CRC checked."""
    info = archive.getinfo(name)
    where = f"{file} > {name}"
    problem = zip_member_problem(info, extra=(ZIP_ZSTANDARD,))
    if problem:
        raise EvaluationDataError(
            f"the member {name!r} {problem}", file=file, fix="write the log with Inspect itself, unencrypted"
        )
    if info.compress_type != ZIP_ZSTANDARD:
        with archive.open(info) as handle:
            return read_bounded(handle, where, unpacking=True)
    import zstandard  # why: zstd only for .eval logs' compressed members

    with open(file, "rb") as handle:
        handle.seek(info.header_offset)
        local = handle.read(30)
        if local[:4] != b"PK\x03\x04":
            raise zipfile.BadZipFile(f"no local header for {name}")
        name_length, extra_length = struct.unpack("<HH", local[26:30])
        handle.seek(info.header_offset + 30 + name_length + extra_length)
        packed = handle.read(info.compress_size)
    try:
        data = read_bounded(zstandard.ZstdDecompressor().stream_reader(io.BytesIO(packed)), where, unpacking=True)
    except zstandard.ZstdError as err:
        raise zipfile.BadZipFile(f"{name}: {err}") from None
    if zlib.crc32(data) != info.CRC:
        raise zipfile.BadZipFile(f"{name}: CRC mismatch")
    return data


def input_text(value: object) -> str | None:
    """A sample's input as text: the text itself, or the last user message of a chat (its text parts joined)."""
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        for message in reversed(value):
            if isinstance(message, dict) and message.get("role") == "user":
                content = message.get("content")
                if isinstance(content, str):
                    return content
                if isinstance(content, list):
                    return "\n".join(
                        p.get("text", "") for p in content if isinstance(p, dict) and p.get("type") == "text"
                    )
    return None


def _score(value: object, file: Path, record: int | None, scorer: str) -> float:
    if isinstance(value, str) and value in VALUE_TO_FLOAT:
        return VALUE_TO_FLOAT[value]
    return unit_score(
        value,
        file,
        record,
        f"scores.{scorer}.value",
        "a score must be C/I/P/N, a boolean or a number in [0, 1]; pass scorer= naming such a scorer",
    )


def read_inspect_logs(
    path: str | Path, *, model: str | None = None, scorer: str | None = None
) -> tuple[pd.DataFrame, HarnessSummary]:
    """Read one Inspect log, or every log in a folder (any depth), into the long table."""
    path = Path(path)
    files = log_files(path) if path.exists() else []
    if not files:
        raise EvaluationDataError("no Inspect logs (.eval or .json) found", file=path, fix=FIX_LAYOUT)
    scores: dict[tuple[str, str], list[float]] = {}
    texts: dict[str, tuple[str, str]] = {}  # query_id -> (query, task)
    tasks: dict[str, str] = {}
    records = 0
    for file in files:
        header, samples = _load_log(file)
        status = header.get("status")
        if status != "success":
            raise EvaluationDataError(
                f"the log's status is {status!r}, not 'success': its samples are incomplete",
                file=file,
                column="status",
                fix="let the eval finish, or retry it (inspect eval-retry), then drop the new log",
            )
        found = header.get("eval")
        spec = found if isinstance(found, dict) else {}
        task = spec.get("task")
        if not isinstance(task, str) or not task:
            raise EvaluationDataError(
                "the log names no task (eval.task)", file=file, column="eval.task", fix=FIX_LAYOUT
            )
        name = model if model is not None else check_model_name(spec.get("model"), file, "eval.model")
        check_model_name(name, file, "model=")
        found = header.get("results")
        results = found if isinstance(found, dict) else {}
        listed = (
            [s.get("name") for s in results.get("scores", []) if isinstance(s, dict)]
            if isinstance(results.get("scores"), list)
            else []
        )
        if not samples:
            raise EvaluationDataError(
                "the log holds no samples",
                file=file,
                fix="run the eval with samples logged (the default; not --no-log-samples)",
            )
        for record, sample in samples:
            records += 1
            if not isinstance(sample, dict):
                raise bad(file, record, "samples", "a sample is not a JSON object", FIX_LAYOUT)
            given = sample.get("scores") or {}
            if not isinstance(given, dict):
                raise bad(
                    file,
                    record,
                    "scores",
                    f"the sample's scores are a JSON {type(given).__name__}, not an object",
                    FIX_LAYOUT,
                )
            use = (
                scorer
                or next((s for s in listed if s in given), None)
                or (next(iter(given)) if len(given) == 1 else None)
            )
            where = f"sample {sample.get('id')!r} (epoch {sample.get('epoch')})"
            if use is None or use not in given:
                raise bad(
                    file,
                    record,
                    "scores",
                    f"{where} has no score{'' if use is None else f' from {use!r}'} (it has {sorted(given)})",
                    "every sample needs a score from the scorer; pass scorer= to pick one of several",
                )
            value = given[use].get("value") if isinstance(given[use], dict) else given[use]
            score = _score(value, file, record, use)
            text = input_text(sample.get("input"))
            if text is None or not text.strip():
                raise bad(
                    file,
                    record,
                    "input",
                    f"{where} has no input text",
                    "the sample's input must be a text or chat messages",
                )
            choices = sample.get("choices") if isinstance(sample.get("choices"), list) else None
            text = with_options(text, choices)
            query_id = make_query_id("inspect", task, spec.get("task_version", 0), sample.get("id"), text)
            scores.setdefault((name, query_id), []).append(score)
            texts[query_id] = (text, task)
            tasks[task] = use
    rows = [(m, q, texts[q][0], texts[q][1], sum(v) / len(v)) for (m, q), v in scores.items()]
    table = finish(rows, path, fix=FIX_LAYOUT)
    report = HarnessSummary(
        "inspect",
        tuple(map(str, files)),
        tuple(sorted(table["model"].unique())),
        tasks,
        len(table),
        records,
        records - len(rows),
    )
    return table, report
