"""One intake tick (:func:`intake_tick`): the drop folder's new entries taken in, under the intake lock, and what
happened as one :class:`TickOutcome` (the files accepted, the rejections as fields, notes for the tick's message, and
every accepted manifest in order). The drop-folder sensor publishes it (locus_pipeline/defs/sensors.py: run requests
per accepted file). :func:`hand_in` is the front door for a process that makes a drop itself (``locus onboard``):
its file goes through incoming/ and the ticks like any other drop, and it is told that file's outcome."""

from __future__ import annotations

import glob
import hashlib
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, Callable

from locus_pipeline.intake.accept import Intake, IntakeLimits, Rejection, intake_file
from locus_pipeline.intake.folder import (
    REASON_SUFFIX,
    SETTLE_SECONDS,
    DropFolder,
    entry_stem,
    in_progress_entries,
    move_to_rejected,
    reject_unusable,
    scan_incoming,
    unusable_entries,
    write_text_atomic,
)
from locus_pipeline.intake.manifests import Manifest, claimed_keys, read_manifests
from locus_pipeline.intake.messages import printable
from locus_pipeline.intake.recovery import changed_accepted_files, recover_orphans, retake
from locus_pipeline.storage.drops import MANIFEST_SUFFIX

MAX_FILES_PER_TICK = 20  # the rest waits for the next tick, so one tick stays well inside the sensor timeout
MAX_SECONDS_PER_TICK = 30.0


@dataclass
class TickOutcome:
    """What one tick did. ``manifests``: every accepted file's manifest after the tick, in acceptance order (read
    once at its start, those it wrote added: nothing is read back); ``took_in``: False when another process held
    the intake lock (then nothing was taken in, and nothing is to be published: the holder publishes its own)."""

    accepted: list[Manifest] = field(default_factory=list)  # files accepted this tick (duplicates not among them)
    rejections: list[Rejection] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    manifests: list[Manifest] = field(default_factory=list)
    took_in: bool = True

    def pending(self, cursor: str) -> list[Manifest]:
        """The accepted files after ``cursor`` (the stem of the last one published), oldest first."""
        return [m for m in self.manifests if m.stem > cursor]

    def message(self) -> str:
        """The notes and rejections on one line each, joined: what a tick shows."""
        return "; ".join(
            self.notes
            + [f"rejected {printable(r.file)}: {r.summary()} (see {printable(r.reason_file)})" for r in self.rejections]
        )


def intake_tick(
    folder: DropFolder,
    *,
    limits: IntakeLimits | None = None,
    now: float | None = None,
    wait: bool = False,
    publish: Callable[[TickOutcome], None] | None = None,
) -> TickOutcome:
    """Take the drop folder's new entries in (oldest first, at most MAX_FILES_PER_TICK and MAX_SECONDS_PER_TICK):
    links and special files refused, foreign manifests moved aside, what a killed process left recovered, files a
    writer kept writing after intake taken in again, then each settled entry accepted or rejected.

    ``wait``: wait for the intake lock instead of returning at once (``took_in`` False) when another process holds
    it. Under the lock, ``publish`` runs last, with the outcome (:func:`hand_in`'s caller starts its run): no other
    tick takes in or publishes in between."""
    folder.ensure()
    outcome = TickOutcome()
    while True:
        with folder.intake_lock() as mine:
            if mine:
                _take_in(folder, outcome, limits or IntakeLimits(), now)
                if publish is not None:
                    publish(outcome)
                return outcome
        if not wait:
            outcome.took_in = False
            outcome.notes.append("an earlier tick (or locus onboard) is still taking files in; waiting for it")
            return outcome
        time.sleep(0.2)


def _take_in(folder: DropFolder, outcome: TickOutcome, limits: IntakeLimits, now: float | None) -> None:
    notes, rejections = outcome.notes, outcome.rejections
    for path, why in unusable_entries(folder):
        target = reject_unusable(folder, path, why)
        rejections.append(Rejection(path.name, why, reason_file=f"rejected/{target.name}{REASON_SUFFIX}"))
    unreadable: list[tuple[str, str]] = []
    manifests = read_manifests(folder, unreadable)  # once per tick
    for stem, why in unreadable:
        rejections.append(set_aside_manifest(folder, stem, why))
    claimed = claimed_keys(folder.home, folder, manifests)

    def taken(result: Intake) -> None:
        if result.manifest is not None:
            manifests.append(result.manifest)
            claimed.update({m.model_key: m.model for m in result.manifest.models})
            if result.status == "accepted":  # an accepted intake always has its manifest
                outcome.accepted.append(result.manifest)
        if result.rejection is not None:
            rejections.append(result.rejection)

    for item in recover_orphans(folder, claimed=claimed):
        notes.append(f"recovered {printable(item.stored.name if item.stored else item.source.name)}: {item.status}")
        taken(item)
    for manifest in changed_accepted_files(folder, list(manifests)):  # a writer kept writing in place after intake
        result = retake(folder, manifest, claimed=claimed)
        if result is None:
            notes.append(
                f"accepted/{printable(manifest.stem)} is still being written after intake; it is taken in "
                "again once it settles"
            )
            continue
        notes.append(
            f"{printable(manifest.original_name)} changed after intake: taken in again, {result.status} "
            f"(see accepted/{printable(manifest.stem)}.changed.txt)"
        )
        taken(result)
    waiting = in_progress_entries(folder)
    if waiting:
        notes.append(
            f"{len(waiting)} file(s) with in-progress names are read once renamed (names starting with '.' or "
            f"ending in .part, .tmp, ...): {', '.join(printable(p.name) for p in waiting[:5])}"
        )
    ready, settling = scan_incoming(folder, now=now)
    if settling:
        notes.append(
            f"waiting for {len(settling)} file(s) to settle: {', '.join(printable(p.name) for p in settling[:5])}"
        )
    start = time.monotonic()
    for n, path in enumerate(ready):
        if n >= MAX_FILES_PER_TICK or time.monotonic() - start > MAX_SECONDS_PER_TICK:
            notes.append(f"{len(ready) - n} file(s) left for the next tick")
            break
        try:
            result = intake_file(path, folder, claimed=claimed, limits=limits, known=manifests)
        except OSError as err:  # unreadable (permissions), vanished, disk full: say so, keep going, retry next tick
            notes.append(
                f"cannot read {printable(path.name)} ({err.strerror or err}); check its permissions; retrying next tick"
            )
            continue
        name = printable(path.name)
        if result.status == "duplicate":
            assert result.manifest is not None  # a duplicate's manifest names the earlier file
            notes.append(
                f"{name} was already onboarded (accepted/{printable(result.manifest.duplicate_of)}); nothing to do"
            )
        elif result.status == "changed":
            notes.append(
                f"{name}: {result.reason}" if result.reason else f"{name} changed while being read; retrying next tick"
            )
        elif result.status == "accepted":
            assert result.manifest is not None  # written with the accepted file
            models = ", ".join(f"{printable(m.model)} ({m.evaluations})" for m in result.manifest.models[:10])
            notes.append(
                f"accepted {name}: {result.manifest.rows} rows; "
                f"{models or 'graded outcomes, for locus serve to learn from (traffic/outcomes/)'}"
            )
        taken(result)
    outcome.manifests = sorted(manifests, key=lambda m: m.stem)


@dataclass(frozen=True)
class HandedIn:
    """What became of a file given to :func:`hand_in`: its manifest (accepted, or ``duplicate_of`` an earlier file
    with the same bytes) or its rejection; ``published``: what the caller's ``publish`` returned, None when another
    process's tick took the file in (the drop-folder sensor then publishes it) or there was nothing to publish."""

    manifest: Manifest | None = None
    rejection: Rejection | None = None
    published: Any = None


def hand_in(
    folder: DropFolder,
    name: str,
    text: str,
    *,
    limits: IntakeLimits | None = None,
    publish: Callable[[Manifest], Any] | None = None,
    timeout_s: float = 300.0,
    poll_s: float = 0.5,
) -> HandedIn:
    """Drop ``text`` as ``incoming/<name>`` the way any writer should (beside, then renamed) and wait for the intake
    to take it in, as any drop: once it has settled, by this process's tick or a running drop-folder sensor's,
    whichever holds the intake lock first. Returns that file's outcome. ``publish(manifest)`` runs under the intake
    lock in this process's tick when that tick accepted the file (not for a duplicate), so no sensor tick publishes
    it in between; a sensor skips a run key that already has a run. A TimeoutError after ``timeout_s``."""
    folder.ensure()
    sha = hashlib.sha256(text.encode("utf-8")).hexdigest()
    dropped = time.time_ns()
    write_text_atomic(folder.incoming / name, text)
    deadline = time.monotonic() + timeout_s
    found: dict[str, Any] = {}

    def publish_ours(outcome: TickOutcome) -> None:  # under the intake lock
        handed = _outcome_of(folder, name, sha, dropped, outcome)
        if handed is None:
            return
        if publish is not None and handed.manifest is not None and handed.manifest.duplicate_of is None:
            handed = HandedIn(handed.manifest, None, publish(handed.manifest))
        found["handed"] = handed

    while True:
        intake_tick(folder, limits=limits, wait=True, publish=publish_ours)
        if "handed" in found:
            return found["handed"]
        if not (folder.incoming / name).exists():  # another process's tick took it in
            handed = _outcome_of(folder, name, sha, dropped)
            if handed is not None:
                return handed
        if time.monotonic() > deadline:
            raise TimeoutError(
                f"incoming/{printable(name)} was not taken in within {timeout_s:g} s (it waits "
                f"{SETTLE_SECONDS:g} s to settle, then for the intake lock); see the drop-folder "
                "sensor's ticks"
            )
        time.sleep(poll_s)


def _outcome_of(
    folder: DropFolder, name: str, sha: str, since_ns: int, outcome: TickOutcome | None = None
) -> HandedIn | None:
    """The outcome of the file ``name`` with these bytes dropped at ``since_ns``, from a tick's outcome or (taken in
    by another process) from the folder: the newest manifest of it, else its reason file in rejected/."""
    if outcome is not None:
        rejection = next((r for r in outcome.rejections if r.file == name), None)
        if rejection is not None:
            return HandedIn(rejection=rejection)
    manifests = outcome.manifests if outcome is not None else read_manifests(folder)
    ours = [m for m in manifests if m.sha256 == sha and m.original_name == name and m.received_at_ns >= since_ns]
    if ours:
        return HandedIn(manifest=max(ours, key=lambda m: m.stem))
    if outcome is not None:
        return None
    for reason in sorted(folder.rejected.glob(f"*-{glob.escape(name)}{REASON_SUFFIX}")):
        if reason.stat().st_mtime_ns >= since_ns and (f"-{sha[:8]}-" in reason.name or "-notread-" in reason.name):
            problem = next(
                (
                    line[len("problem: ") :]
                    for line in reason.read_text(encoding="utf-8").splitlines()
                    if line.startswith("problem: ")
                ),
                "see the reason file",
            )
            return HandedIn(rejection=Rejection(name, problem, reason_file=f"rejected/{reason.name}"))
    return None


def set_aside_manifest(folder: DropFolder, stem: str, why: str, *, now: float | None = None) -> Rejection:
    """Move a file in accepted/ named like a manifest that is not one intake wrote into rejected/, beside a reason
    naming it, so the next ticks read the folder again. An accepted file it was the manifest of (a corrupted real
    one) has no manifest any more: the tick's recovery takes it in again as a new file."""
    now = time.time() if now is None else now
    name = f"{stem}{MANIFEST_SUFFIX}"
    fix = (
        "nothing to do if you did not put it there: intake wrote it and it was damaged, so the file it described "
        "is taken in again; files in accepted/ are intake's own (drop files into incoming/ itself)"
    )
    reason_file = move_to_rejected(
        folder,
        folder.accepted / name,
        entry_stem(now, "manifest", name),
        f"SET ASIDE: accepted/{name}\nset aside at: "
        f"{datetime.fromtimestamp(now, tz=timezone.utc).isoformat()}\n"
        f"problem: {why}\nhow to fix: {fix}\n",
    )
    return Rejection(f"accepted/{name}", why, fix, reason_file=reason_file)
