"""The drop folder: how a file dropped into LOCUS_HOME/incoming/ is taken in (see docs/onboarding.md).

1. *Complete files only.* Names starting with '.' or ending in '.part', '.tmp', '.partial', '.crdownload' are
   never read: write under such a name, then rename (atomic on one filesystem). As a safety net for writers
   that do not rename, a file is read only once its modification time is ``settle_seconds`` old, and it is
   set aside for a later tick if its size or modification time changed while it was read.
2. *Intake* (:func:`intake_file`; a tick of the folder: :func:`intake_tick`): sha256, then one streamed pass that
validates every row with the evaluation
   data contract and splits the rows by model into ``accepted/<stem>.parts/<model_key>.parquet``
   (:func:`locus_model.onboarding.split_by_model`). ``<stem>`` is ``<UTC time>-<sha8>-<original name>``.
   A valid file moves to ``accepted/<stem>`` and gets ``accepted/<stem>.manifest.json`` (written last: the
   commit). An invalid one moves to ``rejected/<stem>`` beside ``rejected/<stem>.reason.txt`` naming the row,
   column, problem and fix. A model name whose safe key already names another model (in the training source,
   the pool, a store or an accepted file) is a rejection too, whatever the order of the files. A file whose
   bytes were already accepted moves to ``accepted/`` with a manifest marked ``duplicate_of`` and onboards
   nothing. Nothing is ever deleted.
3. *Onboarding* is one Dagster run per file, over its models' partitions: see locus_pipeline/defs/assets/onboarding.py.
4. *Harness outputs.* A folder, an archive (.zip, .tar.gz, .tgz) or an Inspect log dropped into incoming/ is read
   by the harness readers (:mod:`locus_model.data.harnesses`: lm-eval, Inspect AI, lighteval, HELM), recognised
   by its content; its long table is then split by model as a file's rows are. A folder is taken whole: write it
   elsewhere and move it into incoming/ when complete (one rename), or drop an archive (as ``<name>.part``,
   then renamed). As the safety net for files, a folder is read only once nothing in it has changed for
   ``settle_seconds``, and set aside if anything in it changed while it was read. A folder that holds no harness
   output is rejected with the reason.

The modules, each one concept: ``folder`` (the drop folder, its entries, what is ready, what is never read),
``manifests`` (what intake recorded about an accepted file, and what is read back), ``accept`` (one entry taken
in: validated, split by model, accepted or rejected), ``tick`` (one pass over the folder, its outcome),
``messages`` (names shown on one line), ``recovery`` (what a killed process or a writer that kept
writing left, taken in again). Callers import from the package.
"""

from locus_pipeline.intake.accept import HARNESS_TABLE, Intake, IntakeLimits, Rejection, check_identities, intake_file
from locus_pipeline.intake.folder import (
    HELD_PREFIXES,
    IN_PROGRESS_SUFFIXES,
    REASON_SUFFIX,
    SETTLE_SECONDS,
    DropFolder,
    EntryStat,
    entry_stat,
    in_progress_entries,
    is_in_progress,
    reject_unusable,
    scan_incoming,
    sha256_entry,
    unusable_entries,
)
from locus_pipeline.intake.manifests import (
    MANIFEST_SUFFIX,
    PARTS_SUFFIX,
    Manifest,
    ManifestError,
    accepted_rows,
    claimed_keys,
    intake_order,
    manifest_stems,
    read_manifest,
    read_manifests,
)
from locus_pipeline.intake.messages import printable
from locus_pipeline.intake.recovery import (
    CHANGED_SUFFIX,
    changed_accepted_files,
    changed_since_intake,
    recover_orphans,
    retake,
)
from locus_pipeline.intake.tick import HandedIn, TickOutcome, hand_in, intake_tick

__all__ = [
    "CHANGED_SUFFIX",
    "HARNESS_TABLE",
    "HELD_PREFIXES",
    "IN_PROGRESS_SUFFIXES",
    "MANIFEST_SUFFIX",
    "PARTS_SUFFIX",
    "REASON_SUFFIX",
    "SETTLE_SECONDS",
    "DropFolder",
    "EntryStat",
    "HandedIn",
    "Intake",
    "IntakeLimits",
    "Manifest",
    "ManifestError",
    "Rejection",
    "TickOutcome",
    "accepted_rows",
    "changed_accepted_files",
    "changed_since_intake",
    "check_identities",
    "claimed_keys",
    "entry_stat",
    "hand_in",
    "in_progress_entries",
    "intake_file",
    "intake_order",
    "intake_tick",
    "is_in_progress",
    "manifest_stems",
    "printable",
    "read_manifest",
    "read_manifests",
    "recover_orphans",
    "reject_unusable",
    "retake",
    "scan_incoming",
    "sha256_entry",
    "unusable_entries",
]
