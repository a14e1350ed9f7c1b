"""What a killed intake left, taken in again (locus_pipeline.intake.recovery)."""

from __future__ import annotations

from locus_pipeline import intake as ob
from locus_pipeline.intake import DropFolder, intake_file
from tests.locus_pipeline.intake.helpers import csv_text, drop


def test_a_killed_intake_is_recovered(folder: DropFolder) -> None:
    result = intake_file(drop(folder, "a.csv", csv_text([("m", "q1", 1)])), folder)
    assert result.manifest is not None
    manifest = folder.accepted / f"{result.manifest.stem}.manifest.json"
    manifest.unlink()  # as if the process died between moving the file and the commit
    recovered = ob.recover_orphans(folder)
    assert [r.status for r in recovered] == ["accepted"]
    stored = recovered[0].stored
    assert (
        len(ob.manifest_stems(folder)) == 1 and stored is not None and stored.read_text() == csv_text([("m", "q1", 1)])
    )


def test_a_killed_intakes_staging_folder_is_removed_and_its_file_taken_in(folder: DropFolder) -> None:
    path = drop(folder, "evals.csv", csv_text([("m", "q1", 1)]))
    staging = folder.accepted / f".20250101T000000.000000Z-abcdef12-evals.csv{ob.PARTS_SUFFIX}.{'0' * 32}.tmp"
    (staging / "m").mkdir(parents=True)  # what split_by_model had written when the process was killed
    (staging / "m" / "000000.parquet").write_bytes(b"partial")
    ob.recover_orphans(folder)
    assert not staging.exists() and path.exists()  # the original is untouched, and read by the scan as usual
    assert intake_file(path, folder).status == "accepted"
    assert [p.name for p in folder.accepted.iterdir() if p.name.startswith(".")] == []
