"""What the intake tests share: a CSV of evaluations, and a file dropped into incoming/ with an old modification
time."""

from __future__ import annotations

import os
import time
from pathlib import Path

from locus_pipeline.intake import DropFolder

HEADER = "model,query_id,query,benchmark,score\n"
OLD = time.time() - 3600


def csv_text(rows: list[tuple[str, str, float | str]], text: str = "question {q}") -> str:  # a score, or bad text
    return HEADER + "".join(f'"{m}",{q},"{text.format(q=q)}",bench,{s}\n' for m, q, s in rows)


def drop(folder: DropFolder, name: str, content: str | bytes, *, mtime: float = OLD) -> Path:
    folder.ensure()
    path = folder.incoming / name
    path.write_bytes(content.encode() if isinstance(content, str) else content)
    os.utime(path, (mtime, mtime))
    return path
