"""LOCUS training: TrainConfig (its defaults), train_locus (one config) and train_branches (configs that share the
stages up to the kept epoch), returning a TrainResult.

The modules: config (TrainConfig, Stage: the fields a stage reads), train (the order of the stages), and one module
per stage or pair of stages: inputs, predictor (the latent warm-up and the predictor fine-tuning), epochs, refit,
calibration. Importing TrainConfig loads no torch (the pipeline builds its launchpad config from it when it loads):
the training functions load with their first use.
"""

from __future__ import annotations

from typing import Any

from locus_model.training.config import TrainConfig

_TRAIN = ("TrainResult", "train_branches", "train_locus")  # in locus_model.training.train, which imports torch


def __getattr__(name: str) -> Any:  # PEP 562: the torch-backed names on first use
    if name in _TRAIN:
        from locus_model.training import train  # why: torch loads on first use of a training name (PEP 562)

        return getattr(train, name)
    raise AttributeError(f"module 'locus_model.training' has no attribute {name!r}")


__all__ = ["TrainConfig", *_TRAIN]
