"""Partitions: one dynamic partition per onboarded model, keyed by the safe form of its name."""

import dagster as dg

# Keys are locus_model.data.contract.safe_model_key(model name): ASCII, no "/", ".." or spaces; the sensor adds them.
onboarded_models = dg.DynamicPartitionsDefinition(name="onboarded_models")
