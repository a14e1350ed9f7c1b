"""Dagster definitions by concept: assets by stage, resources, checks, sensors, partitions."""
