"""The drop folder (locus_pipeline.intake.folder): complete files only, settled before they are read."""

from __future__ import annotations

import os
import time

from locus_pipeline.intake import DropFolder, scan_incoming
from tests.locus_pipeline.intake.helpers import csv_text, drop


def test_in_progress_names_and_unsettled_files_are_not_read(folder: DropFolder) -> None:
    drop(folder, "a.csv.part", csv_text([("m", "q1", 1)]))
    drop(folder, ".b.csv", csv_text([("m", "q1", 1)]))
    drop(folder, "c.csv.tmp", csv_text([("m", "q1", 1)]))
    fresh = drop(folder, "d.csv", csv_text([("m", "q1", 1)]), mtime=time.time())
    old = drop(folder, "e.csv", csv_text([("m", "q1", 1)]))
    ready, settling = scan_incoming(folder, settle_seconds=3)
    assert ready == [old] and settling == [fresh]
    # write-then-rename: the finished file appears under its final name and is read once settled
    os.replace(folder.incoming / "a.csv.part", folder.incoming / "a.csv")
    ready, _ = scan_incoming(folder, now=time.time() + 10, settle_seconds=3)
    assert {p.name for p in ready} == {"a.csv", "d.csv", "e.csv"}
