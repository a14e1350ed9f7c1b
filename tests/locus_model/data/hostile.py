"""Hostile harness drops (issue 47), built small: each once made a reader raise something other than an
EvaluationDataError, hang, or take unbounded memory or time. Shared by the reader tests and the drop-folder tests."""

from __future__ import annotations

import json
import os
import shutil
import struct
import zipfile
from pathlib import Path

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "harnesses"
STAMP = "2026-01-01T00-00-00.000001"


def lm_eval_folder(root: Path, line: str | None = None, *, name: str = "lm") -> Path:
    """A copy of the lm-eval fixture; ``line`` replaces the first line of the first samples file."""
    folder = Path(shutil.copytree(FIXTURES / "lm_eval", root / name))
    if line is not None:
        samples = next(folder.rglob("samples_locus_capitals_*.jsonl"))
        lines = samples.read_text().splitlines()
        samples.write_text("\n".join([line] + lines[1:]) + "\n")
    return folder


def first_sample(folder: Path) -> dict:
    return json.loads(next(folder.rglob("samples_locus_capitals_*.jsonl")).read_text().splitlines()[0])


def with_sample(root: Path, **changes) -> Path:
    """An lm-eval folder whose first sample has ``changes`` (raw JSON text values, e.g. acc="1" + "0" * 400)."""
    sample = first_sample(FIXTURES / "lm_eval")
    text = json.dumps({k: v for k, v in sample.items() if k not in changes})[:-1]
    text += "".join(f', "{k}": {v}' for k, v in changes.items()) + "}"
    return lm_eval_folder(root, text)


def inspect_json(root: Path, **changes) -> Path:
    """A copy of an Inspect .json log with top-level fields replaced."""
    source = next((FIXTURES / "inspect").glob("*_capitals_*.json"))
    log = json.loads(source.read_text())
    log.update(changes)
    target = root / source.name
    target.write_text(json.dumps(log))
    return target


def inspect_eval(
    root: Path, members: dict[str, bytes | str], *, name: str = "x.eval", compression: int = zipfile.ZIP_DEFLATED
) -> Path:
    """An .eval zip holding ``members`` (header.json, samples/...)."""
    target = root / name
    with zipfile.ZipFile(target, "w", compression) as archive:
        for member, data in members.items():
            archive.writestr(member, data)
    return target


def deep_json(depth: int) -> str:
    return '{"eval": {"task": "t"}, "status": "success", "version": 2, "x": ' + "[" * depth + "]" * depth + "}"


def zip_folder(folder: Path, target: Path) -> Path:
    with zipfile.ZipFile(target, "w", zipfile.ZIP_DEFLATED) as archive:
        for path in sorted(p for p in folder.rglob("*") if p.is_file()):
            archive.write(path, Path(folder.name) / path.relative_to(folder))
    return target


def patch_zip(path: Path, *, flags: int = 0, method: int | None = None) -> Path:
    """Set bits in every member's general-purpose flags (1: encrypted) and/or its compression method, in the local
    headers and the central directory alike, as a zip tool that wrote them would."""
    data = bytearray(path.read_bytes())
    for signature, flag_at, method_at in ((b"PK\x03\x04", 6, 8), (b"PK\x01\x02", 8, 10)):
        at = data.find(signature)
        while at != -1:
            (old,) = struct.unpack_from("<H", data, at + flag_at)
            struct.pack_into("<H", data, at + flag_at, old | flags)
            if method is not None:
                struct.pack_into("<H", data, at + method_at, method)
            at = data.find(signature, at + 4)
    path.write_bytes(bytes(data))
    return path


def helm_with_fifo(root: Path) -> Path:
    """A HELM run folder whose per_instance_stats.json is a named pipe (opening it for reading blocks)."""
    folder = Path(shutil.copytree(FIXTURES / "helm", root / "helm"))
    stats = next(folder.rglob("per_instance_stats.json"))
    stats.unlink()
    os.mkfifo(stats)
    return folder


def many_members(target: Path, n: int) -> Path:
    """A zip of an lm-eval samples file and ``n`` empty members."""
    with zipfile.ZipFile(target, "w") as archive:
        for i in range(n):
            archive.writestr(f"out/empty/{i}.txt", b"")
    return target
