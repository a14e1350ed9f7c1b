"""What evaluation harnesses write, read as the long evaluation table: one reader per harness, one entry point.

- lm-evaluation-harness ``--log_samples`` folders (:mod:`.lm_eval`),
- Inspect AI logs, ``.eval`` or ``.json`` (:mod:`.inspect_logs`),
- lighteval details, Parquet per task (:mod:`.lighteval`),
- HELM run folders, ``scenario_state.json`` + ``per_instance_stats.json`` (:mod:`.helm`).

:func:`detect_harness` recognises a folder, a log file, or an archive (.zip, .tar.gz, .tgz) of any of them by its
content, never by its name alone; :func:`read_harness_output` reads it (an archive is unpacked into a temporary
folder, safely: no absolute paths, no '..', no links, bounded size and time, :mod:`locus_model.data.limits`) and names
the member in its errors as ``<archive> > <member>``. The rules (metric -> score, stable query ids, query text, model
name) are stated in each module and in data/README.md ("Evaluation harness outputs").
"""

from __future__ import annotations

import stat
import tarfile
import tempfile
import zipfile
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator, Protocol

import pandas as pd

from locus_model.data.errors import EvaluationDataError
from locus_model.data.harnesses.common import HarnessSummary
from locus_model.data.harnesses.helm import is_helm_output, read_helm_runs
from locus_model.data.harnesses.inspect_logs import is_inspect_log, log_files, read_inspect_logs
from locus_model.data.harnesses.lighteval import _DETAILS as _DETAILS_NAME
from locus_model.data.harnesses.lighteval import is_lighteval_output, read_lighteval_details
from locus_model.data.harnesses.lm_eval import _SAMPLES as _SAMPLES_NAME
from locus_model.data.harnesses.lm_eval import is_lm_eval_output, read_lm_eval_output
from locus_model.data.limits import CORRUPT, DropLimits, bounded, budget, zip_member_problem

HARNESSES = ("lm_eval", "inspect", "lighteval", "helm")
ARCHIVE_SUFFIXES = (".zip", ".tar.gz", ".tgz")


def archive_suffix(path: Path) -> str:
    name = path.name.lower()
    return next((s for s in ARCHIVE_SUFFIXES if name.endswith(s)), "")


def _detect_folder(path: Path) -> str | None:

    if is_lm_eval_output(path):
        return "lm_eval"
    if is_helm_output(path):
        return "helm"
    if is_lighteval_output(path):
        return "lighteval"
    if log_files(path):
        return "inspect"
    return None


def detect_harness(path: str | Path) -> str | None:
    """Which harness wrote ``path`` (a folder, an Inspect log, or an archive of one): a name of HARNESSES, or None.
    Looks at file names and first bytes only; never raises (an unreadable archive is None: reading it says why)."""

    path = Path(path)
    try:
        if path.is_symlink():
            return None
        if path.is_dir():
            return _detect_folder(path)
        if not path.is_file():
            return None
        if is_inspect_log(path):
            return "inspect"
        if _SAMPLES_NAME.match(path.name):  # one samples file without its folder: the reader says what is missing
            return "lm_eval"
        if _DETAILS_NAME.match(path.name):
            return "lighteval"
        if archive_suffix(path):
            names = _member_names(path)
            return _detect_names(names) if names else None
    except OSError:
        return None
    return None


def is_harness_drop(path: str | Path) -> bool:
    """Whether a dropped entry goes to the harness readers: any folder (a folder holds a harness's output or is
    refused with the reason), any archive, any file named .eval (an Inspect log, or the reader says why not) and
    any file a harness wrote (Inspect log, lm-eval samples file, lighteval details file). Never raises."""
    path = Path(path)
    try:
        return not path.is_symlink() and (
            path.is_dir() or bool(archive_suffix(path)) or path.suffix == ".eval" or detect_harness(path) is not None
        )
    except OSError:
        return False


def _member_names(path: Path) -> list[str] | None:
    try:
        if archive_suffix(path) == ".zip":
            with zipfile.ZipFile(path) as archive:
                return archive.namelist()
        with tarfile.open(path, "r:gz") as archive:
            return archive.getnames()
    except (zipfile.BadZipFile, tarfile.TarError, OSError, EOFError):
        return None


def _detect_names(names: list[str]) -> str | None:
    """The harness an archive holds, from its member names (the same marks as the folder readers look for)."""
    base = [n.rstrip("/").rsplit("/", 1)[-1] for n in names]
    if any(_SAMPLES_NAME.match(b) for b in base):
        return "lm_eval"
    if "per_instance_stats.json" in base and "scenario_state.json" in base:
        return "helm"
    if any(_DETAILS_NAME.match(b) for b in base):
        return "lighteval"
    if any(b.endswith(".eval") for b in base) or (
        "header.json" in base and any(n.startswith("samples/") for n in names)
    ):
        return "inspect"
    return None


@contextmanager
def unpacked(path: Path) -> Iterator[Path]:
    """An archive's content in a temporary folder (removed afterwards). Refuses absolute paths, '..', links and
    devices, encrypted members and unknown compression methods, more members or unpacked bytes (counted as they are
    written) than the read's limits (:mod:`locus_model.data.limits`), with an EvaluationDataError."""
    fix = "pack the harness's output folder as it is (zip -r out.zip OUT, or tar czf out.tar.gz OUT) and drop it again"
    with tempfile.TemporaryDirectory(prefix="locus-harness-") as tmp:
        root = Path(tmp)
        try:
            if archive_suffix(path) == ".zip":
                _unzip(path, root, fix)
            else:
                _untar(path, root, fix)
        except CORRUPT as err:
            raise EvaluationDataError(
                f"the archive cannot be unpacked ({type(err).__name__}: {err})",
                file=path,
                fix="the archive is cut off or damaged: " + fix,
            ) from None
        yield root


def _target(root: Path, name: str, path: Path, fix: str) -> Path:
    parts = Path(name.replace("\\", "/")).parts
    if name.startswith(("/", "\\")) or ".." in parts or (parts and ":" in parts[0]):
        raise EvaluationDataError(f"the archive member {name!r} points outside the archive", file=path, fix=fix)
    return root.joinpath(*parts)


def _count(n: int, path: Path, fix: str) -> None:
    limit = budget().limits.max_members
    if n > limit:
        raise EvaluationDataError(f"the archive has more than {limit:,} members", file=path, fix=fix)


def _write(source, target: Path, where: str) -> None:
    """A member's bytes copied in blocks, each counted against the unpacked budget before it is written."""
    current = budget()
    target.parent.mkdir(parents=True, exist_ok=True)
    with open(target, "wb") as out:
        current.unpack(0, where)  # the time budget, also for empty members
        while block := source.read(1 << 20):
            current.unpack(len(block), where)
            out.write(block)


def _unzip(path: Path, root: Path, fix: str) -> None:
    with zipfile.ZipFile(path) as archive:
        members = archive.infolist()
        _count(len(members), path, fix)
        for info in members:  # every member checked before any is written
            _target(root, info.filename, path, fix)
            mode = (info.external_attr >> 16) & 0o170000
            if mode and mode not in (0o100000, 0o040000):
                raise EvaluationDataError(
                    f"the archive member {info.filename!r} is a link or a device, not a file", file=path, fix=fix
                )
            problem = zip_member_problem(info)
            if problem:
                raise EvaluationDataError(
                    f"the archive member {info.filename!r} {problem}",
                    file=path,
                    fix="pack it again without a password, with zip's default compression",
                )
        for info in members:
            target = _target(root, info.filename, path, fix)
            if info.is_dir():
                target.mkdir(parents=True, exist_ok=True)
                continue
            with archive.open(info) as source:
                _write(source, target, f"{path} > {info.filename}")


def _untar(path: Path, root: Path, fix: str) -> None:
    with tarfile.open(path, "r|gz") as archive:  # one streamed pass: each member checked, then written
        for n, member in enumerate(archive, start=1):
            _count(n, path, fix)
            target = _target(root, member.name, path, fix)
            if member.isdir():
                target.mkdir(parents=True, exist_ok=True)
            elif member.isfile():
                _write(archive.extractfile(member), target, f"{path} > {member.name}")
            else:
                raise EvaluationDataError(
                    f"the archive member {member.name!r} is a link or a device, not a file", file=path, fix=fix
                )


def check_entry(path: Path) -> None:
    """What the file system says about a harness drop, checked without opening anything: it exists, and it is a
    regular file, or a folder of regular files and folders only (check_regular_files). The one check of the rule:
    read_harness_output runs it; intake runs it before it hashes the entry, then reads with read_checked_entry."""
    if not path.exists():
        raise EvaluationDataError("no such file or folder", file=path, fix="check the path")
    if path.is_dir():
        check_regular_files(path)
    elif not path.is_file():
        raise EvaluationDataError(
            "not a regular file (a pipe, socket or device)", file=path, fix="drop regular files only"
        )


def check_regular_files(folder: Path) -> None:
    """Refuse a folder holding anything but regular files and folders (a pipe, socket, device or link), found
    without opening anything (a pipe would block its reader; a link could point anywhere, and change later)."""
    special = next(
        (
            p
            for p in sorted(folder.rglob("*"))
            if not (stat.S_ISREG(p.lstat().st_mode) or stat.S_ISDIR(p.lstat().st_mode))
        ),
        None,
    )
    if special is not None:
        raise EvaluationDataError(
            f"the folder holds {special.relative_to(folder).as_posix()!r}, which is not a regular "
            "file (a pipe, socket, device or link): nothing in the folder was read",
            file=folder,
            fix="copy the harness's files themselves into the folder (cp -rL), then drop it again",
        )


class _Reader(Protocol):
    """What every harness reader takes (each has its own optional metric/scorer keyword besides)."""

    def __call__(self, path: str | Path, *, model: str | None = None) -> tuple[pd.DataFrame, HarnessSummary]: ...


def _read_folder(kind: str, folder: Path, model: str | None) -> tuple[pd.DataFrame, HarnessSummary]:
    readers: dict[str, _Reader] = {
        "lm_eval": read_lm_eval_output,
        "inspect": read_inspect_logs,
        "lighteval": read_lighteval_details,
        "helm": read_helm_runs,
    }
    if kind not in readers:
        raise ValueError(f"unknown harness {kind!r}: one of {HARNESSES}")
    read = readers[kind]
    return read(folder, model=model)


def _renamed(err: EvaluationDataError, root: Path, archive: Path) -> EvaluationDataError:
    """The same error with a file inside the unpacked archive named as ``<archive> > <member>``."""
    file = err.file
    try:
        member = Path(str(file)).relative_to(root).as_posix() if file is not None else None
    except ValueError:
        member = None
    if member is None:
        return (
            err
            if file is not None and str(file) != str(root)
            else EvaluationDataError(
                err.problem, file=archive, row=err.row, column=err.column, fix=err.fix, line=err.line
            )
        )
    shown = f"{archive} > {member}" if member != "." else str(archive)
    return EvaluationDataError(err.problem, file=shown, row=err.row, column=err.column, fix=err.fix, line=err.line)


def read_harness_output(
    path: str | Path, *, model: str | None = None, harness: str | None = None, limits: DropLimits | None = None
) -> tuple[pd.DataFrame, HarnessSummary]:
    """Read what a harness wrote (see :func:`detect_harness`) into the long table; returns (table, report).
    ``model``: the model name for every record (else each harness's own record names it); ``harness``: skip
    the detection; ``limits``: the bounds of this read (:class:`DropLimits`: rows, models, unpacked bytes, JSON size and
    depth, time), the defaults when None."""
    path = Path(path)
    check_entry(path)
    return read_checked_entry(path, model=model, harness=harness, limits=limits)


def read_checked_entry(
    path: Path, *, model: str | None = None, harness: str | None = None, limits: DropLimits | None = None
) -> tuple[pd.DataFrame, HarnessSummary]:
    """read_harness_output of an entry that check_entry has passed (intake checks once, before hashing it)."""
    with bounded(limits):
        return _read(path, model, harness)


def _read(path: Path, model: str | None, harness: str | None) -> tuple[pd.DataFrame, HarnessSummary]:
    if path.is_file() and archive_suffix(path):
        with unpacked(path) as root:
            kind = harness or _detect_folder(root)
            if kind is None:
                raise EvaluationDataError(
                    "the archive holds no evaluation harness output (lm-eval samples_*.jsonl, Inspect logs, lighteval "
                    "details_*.parquet, HELM scenario_state.json + per_instance_stats.json)",
                    file=path,
                    fix="pack the harness's output folder as it wrote it (see data/README.md)",
                )
            try:
                return _read_folder(kind, root, model)
            except EvaluationDataError as err:
                raise _renamed(err, root, path) from None
    kind = harness or detect_harness(path) or ("inspect" if path.is_file() and path.suffix == ".eval" else None)
    if kind is None:
        raise EvaluationDataError(
            "not an evaluation harness output: no lm-eval samples_*.jsonl, Inspect log, lighteval details_*.parquet "
            "or HELM scenario_state.json + per_instance_stats.json",
            file=path,
            fix="drop the folder the harness wrote as it is, an archive of it, or a long-format file (data/README.md)",
        )
    return _read_folder(kind, path, model)
