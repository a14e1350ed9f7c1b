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
    assert first.manifest is not None and fix.manifest is not None
    store = None
    for result in (fix, first):  # whatever order the runs finish in
        assert result.manifest is not None
        rows = ob.accepted_rows(folder, result.manifest.stem, "m")
        store = merge_into_store(store, as_store(rows, ob.intake_order(result.manifest), result.manifest.stem))
    assert store is not None
    assert store["score"].tolist() == [0.0] and store["source_file"].tolist() == [fix.manifest.stem]


def test_received_at_is_when_intake_took_the_file_in_not_its_modification_time(folder: DropFolder) -> None:
    import json
    from datetime import datetime, timezone

    result = intake_file(drop(folder, "old.csv", csv_text([("m", "q1", 1)]), mtime=OLD - 86_400), folder, now=OLD + 100)
    manifest = result.manifest
    assert manifest is not None
    assert manifest.received_at == datetime.fromtimestamp(OLD + 100, tz=timezone.utc).isoformat()
    assert abs(manifest.received_at_ns - (OLD + 100) * 1e9) < 1e3
    assert abs(manifest.mtime_ns - (OLD - 86_400) * 1e9) < 1e3  # what a later change is told apart by
    assert ob.changed_accepted_files(folder) == []
    # a manifest written before modified_at_ns existed: its received_at_ns was the modification time
    path = folder.accepted / f"{manifest.stem}{ob.MANIFEST_SUFFIX}"
    old = {k: v for k, v in json.loads(path.read_text()).items() if k != "modified_at_ns"}
    old["received_at_ns"] = manifest.modified_at_ns
    path.write_text(json.dumps(old))
    assert ob.read_manifest(folder, manifest.stem).mtime_ns == manifest.modified_at_ns
    assert ob.changed_accepted_files(folder) == []


def test_a_junk_manifest_is_set_aside_with_its_name_and_the_tick_goes_on(folder: DropFolder) -> None:
    """`[]`, corrupt JSON or a corrupted real manifest in accepted/: moved to rejected/ beside a reason naming it; a
    good drop in the same tick is taken in; the file a damaged real manifest described is taken in again."""
    from locus_pipeline.intake import intake_tick

    real = intake_file(drop(folder, "real.csv", csv_text([("m", "q1", 1)])), folder, now=OLD)
    assert real.manifest is not None
    (folder.accepted / f"{real.manifest.stem}.manifest.json").write_text('{"stem": ', encoding="utf-8")
    (folder.accepted / "zz.manifest.json").write_text("[]", encoding="utf-8")
    drop(folder, "good.csv", csv_text([("g", "q1", 1)]))
    outcome = intake_tick(folder)
    assert sorted(r.file for r in outcome.rejections) == sorted(
        [f"accepted/{real.manifest.stem}.manifest.json", "accepted/zz.manifest.json"]
    )
    for item in outcome.rejections:
        reason = (folder.incoming / item.reason_file).read_text(encoding="utf-8")
        assert item.file in reason and "is not a manifest intake wrote" in reason
    assert [m.original_name for m in outcome.accepted] == ["real.csv", "good.csv"]  # recovered, then the new drop
    assert not (folder.accepted / "zz.manifest.json").exists()
    assert [m.original_name for m in intake_tick(folder).manifests] == [
        "real.csv",
        "good.csv",
    ]  # the next tick reads clean
