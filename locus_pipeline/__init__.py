"""Dagster definitions for the LOCUS pipeline."""
