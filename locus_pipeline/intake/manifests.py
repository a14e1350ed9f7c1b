"""What intake recorded about each accepted file (``accepted/<stem>.manifest.json``, written last: the commit), and
what is read back from it: the manifests in acceptance order, a model's accepted rows, the model names already
claimed."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field

import pandas as pd

from locus_model.data.contract import safe_model_key
from locus_model.data.errors import EvaluationDataError
from locus_model.onboarding import ModelRows
from locus_pipeline.intake.folder import DropFolder
from locus_pipeline.storage import LocusHome
from locus_pipeline.storage.drops import MANIFEST_SUFFIX

PARTS_SUFFIX = ".parts"


@dataclass(frozen=True)
class Manifest:
    """What intake recorded about one accepted file (``accepted/<stem>.manifest.json``)."""

    stem: str
    original_name: str
    sha256: str
    bytes: int
    received_at: str  # ISO time intake saw the file (took it in), in UTC
    received_at_ns: int
    accepted_at: str  # ISO time of the intake: the "newest file wins" order (intake_order)
    rows: int
    models: list[ModelRows] = field(default_factory=list)
    duplicate_of: str | None = None  # stem of the earlier file with the same bytes: nothing to onboard
    modified_at_ns: int | None = None  # its modification time when taken in (tells a later change apart); None in
    # manifests written before this field, whose received_at_ns was that modification time

    @property
    def mtime_ns(self) -> int:
        """The file's modification time when it was taken in (what a later change is told apart by)."""
        return self.received_at_ns if self.modified_at_ns is None else self.modified_at_ns

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=1, ensure_ascii=False)

    @classmethod
    def from_json(cls, text: str, where: object = "a manifest") -> "Manifest":
        """The manifest a JSON text holds, or a ManifestError naming ``where`` (not JSON, not a manifest's fields)."""
        try:
            data = json.loads(text)
            data["models"] = [ModelRows(**m) for m in data["models"]]
            manifest = cls(**data)
        except (ValueError, TypeError, KeyError, AttributeError) as err:
            raise ManifestError(
                f"{where} is not a manifest intake wrote ({type(err).__name__}: {str(err)[:200]})"
            ) from None
        if not (
            isinstance(manifest.stem, str) and isinstance(manifest.sha256, str) and isinstance(manifest.models, list)
        ):
            raise ManifestError(
                f"{where} is not a manifest intake wrote (its stem, sha256 or models have the wrong type)"
            )
        return manifest


class ManifestError(ValueError):
    """A file named like a manifest in accepted/ that is not one intake wrote (corrupt, or written by someone else)."""


def intake_order(manifest: Manifest) -> pd.Timestamp:
    """When a file counts as received for "the newest file wins": the time it was taken in, not its modification
    time. A writer sets the modification time (``cp -p``, ``rsync -t``, an unpacked archive keep old ones), so a
    correction dropped after the file it corrects must win whatever its mtime says."""
    return pd.Timestamp(manifest.accepted_at).tz_convert("UTC")


def read_manifest(folder: DropFolder, stem: str) -> Manifest:
    path = folder.fetch(folder.accepted / f"{stem}{MANIFEST_SUFFIX}")
    if not path.exists():
        raise FileNotFoundError(f"no manifest {path}: the file {stem!r} was not accepted (look in {folder.rejected})")
    return Manifest.from_json(path.read_text(encoding="utf-8", errors="replace"), path)


def manifest_stems(folder: DropFolder) -> list[str]:
    """Stems of all accepted files, in acceptance order (the stem starts with the UTC acceptance time)."""
    if not folder.accepted.exists():
        return []
    return sorted(
        p.name[: -len(MANIFEST_SUFFIX)]
        for p in folder.accepted.glob(f"*{MANIFEST_SUFFIX}")
        if not p.name.startswith(".")
    )


def read_manifests(folder: DropFolder, unreadable: list[tuple[str, str]] | None = None) -> list[Manifest]:
    """Every accepted file's manifest, in acceptance order. A file named like one that is not a manifest intake wrote
    raises a ManifestError naming it; with ``unreadable`` (the tick's) it is left out and ``(stem, why)`` appended,
    for the tick to move it aside."""
    out = []
    for stem in manifest_stems(folder):
        try:
            out.append(read_manifest(folder, stem))
        except ManifestError as err:
            if unreadable is None:
                raise
            unreadable.append((stem, str(err)))
    return out


def find_duplicate(folder: DropFolder, sha: str, known: list[Manifest] | None = None) -> str | None:
    """The stem of the accepted file with these bytes (the first one, for a duplicate of a duplicate), or None.
    ``known``: the manifests already read (default: those whose stem carries these bytes' sha8, read now)."""
    if known is None:
        stems = [p.name[: -len(MANIFEST_SUFFIX)] for p in folder.accepted.glob(f"*-{sha[:8]}-*{MANIFEST_SUFFIX}")]
        known = [read_manifest(folder, stem) for stem in sorted(stems) if not stem.startswith(".")]
    for manifest in known:
        if manifest.sha256 == sha:
            return manifest.duplicate_of or manifest.stem
    return None


def accepted_rows(folder: DropFolder, stem: str, model: str) -> pd.DataFrame:
    """One model's validated rows from an accepted file (model, query_id, query, benchmark, score, _row)."""
    path = folder.fetch(folder.accepted / f"{stem}{PARTS_SUFFIX}" / f"{safe_model_key(model)}.parquet")
    if not path.exists():
        raise EvaluationDataError(
            f"model {model!r} has no rows in this accepted file",
            file=folder.accepted / stem,
            column="model",
            fix="check the model name in the run config (the sensor sets it from the file)",
        )
    return pd.read_parquet(path)


def claimed_keys(home: LocusHome, folder: DropFolder, manifests: list[Manifest] | None = None) -> dict[str, str]:
    """model_key -> model name of every model the home knows, and of every model of an accepted file.
    ``manifests``: those already read this tick (default: every manifest)."""
    claimed = home.model_identities()
    for manifest in read_manifests(folder) if manifests is None else manifests:
        for entry in manifest.models:
            claimed.setdefault(entry.model_key, entry.model)
    return claimed
