"""What intake recorded, read back (locus_pipeline.intake.manifests): the newest file is the one taken in last."""

from __future__ import annotations

from locus_pipeline import intake as ob
from locus_pipeline.intake import DropFolder, intake_file
from tests.locus_pipeline.intake.helpers import OLD, csv_text, drop


def test_newest_is_the_file_taken_in_last_whatever_its_modification_time(folder: DropFolder) -> None:
    """A correction copied with its old mtime (cp -p, rsync -t) still replaces what it corrects."""
    from locus_model.onboarding import as_store, merge_into_store

    first = intake_file(drop(folder, "first.csv", csv_text([("m", "q1", 1)]), mtime=OLD), folder, now=OLD + 100)
    fix = intake_file(drop(folder, "fix.csv", csv_text([("m", "q1", 0)]), mtime=OLD - 86_400), folder, now=OLD + 200)
    store = None
    for result in (fix, first):  # whatever order the runs finish in
        rows = ob.accepted_rows(folder, result.manifest.stem, "m")
        store = merge_into_store(store, as_store(rows, ob.intake_order(result.manifest), result.manifest.stem))
    assert store["score"].tolist() == [0.0] and store["source_file"].tolist() == [fix.manifest.stem]
