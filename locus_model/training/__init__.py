"""LOCUS training: TrainConfig (config.py), train_locus and train_branches (train.py), returning a TrainResult;
the stages in inputs.py, epochs.py, predictor.py and refit.py. Importing TrainConfig loads no torch (the pipeline
builds its launchpad config from it when it loads): the training functions load with their first use.
"""

from __future__ import annotations

from typing import Any

from locus_model.training.config import TrainConfig

_TRAIN = ("TrainResult", "train_branches", "train_locus")  # in locus_model.training.train, which imports torch


def __getattr__(name: str) -> Any:  # PEP 562: the torch-backed names on first use
    if name in _TRAIN:
        from locus_model.training import train

        return getattr(train, name)
    raise AttributeError(f"module 'locus_model.training' has no attribute {name!r}")


__all__ = ["TrainConfig", *_TRAIN]
