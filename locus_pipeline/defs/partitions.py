"""Partitions: one dynamic partition per onboarded model, keyed by the safe form of its name; the model keys a
run covers (one partition, or a range of them: a dropped file's models onboarded in one run)."""

from collections.abc import Mapping, Sequence

import dagster as dg

from locus_pipeline.runs import RANGE_END_TAG, RANGE_START_TAG

# Keys are locus_model.data.contract.safe_model_key(model name): ASCII, no "/", ".." or spaces; the sensor adds them.
ONBOARDED_MODELS = "onboarded_models"  # the definition's name (its `name` attribute is typed Optional)
onboarded_models = dg.DynamicPartitionsDefinition(name=ONBOARDED_MODELS)
# One per pool model with graded traffic (locus serve's outcomes), keyed the same way; the traffic sensor adds them.
TRAFFIC_MODELS = "traffic_models"
traffic_models = dg.DynamicPartitionsDefinition(name=TRAFFIC_MODELS)

PARTITION_TAG = "dagster/partition"


def key_ranges(keys: Sequence[str], order: Sequence[str]) -> list[tuple[str, str]]:
    """The fewest (first, last) ranges of ``order`` (the partitions in insertion order, Dagster's order of a
    dynamic partitions definition) that cover exactly ``keys``: one when the keys were added together, more
    when some of them were onboarded before (they sit earlier, among other models)."""
    wanted = set(keys)
    ranges: list[tuple[str, str]] = []
    start: str | None = None
    last = ""  # the range's last key so far, set with start
    for key in order:
        if key in wanted:
            start, last = start or key, key
        elif start is not None:
            ranges.append((start, last))
            start = None
    return ranges + ([(start, last)] if start is not None else [])


def range_tags(first: str, last: str) -> dict[str, str]:
    return {RANGE_START_TAG: first, RANGE_END_TAG: last}


def run_model_keys(instance: dg.DagsterInstance, tags: Mapping[str, str]) -> list[str] | None:
    """The onboarded model keys of a run, from its tags (one partition, or a range resolved against the instance's
    partitions); None for a run of no partition (a rebuild)."""
    if tags.get(PARTITION_TAG):
        return [tags[PARTITION_TAG]]
    if RANGE_START_TAG not in tags:
        return None
    keys = list(instance.get_dynamic_partitions(ONBOARDED_MODELS))
    ends = [tags[RANGE_START_TAG], tags[RANGE_END_TAG]]
    missing = [key for key in ends if key not in keys]
    if missing:
        raise dg.Failure(
            description=f"the run's partition range {ends[0]}...{ends[1]} names {', '.join(missing)}, "
            f"no longer a partition of {ONBOARDED_MODELS} (a model removed since)",
            metadata={
                "how_to_fix": "launch the run again for the models still to onboard (drop their "
                "file again, or pick their partitions in the UI)"
            },
        )
    return keys[keys.index(ends[0]) : keys.index(ends[1]) + 1]
