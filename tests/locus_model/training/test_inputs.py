"""The training inputs: checked before anything runs; the validation cells (a seeded subset of models)."""

import numpy as np
import pytest
import torch

from locus_model.training import TrainConfig, train_locus
from tests.locus_model.training.tiny_train import FAST, MODEL_CFG

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def test_rejects_models_without_train_cells(tiny_pool):
    enc, train, val = tiny_pool
    train = train.copy()
    train[3] = np.nan
    with pytest.raises(ValueError, match=r"rows \[3\] have no train cells"):
        train_locus(enc, train, val, model_config=MODEL_CFG, train_config=TrainConfig(**FAST), progress=False)


def test_validation_scores_at_most_val_models_models_of_a_larger_pool(tiny_pool):
    from locus_model.training.inputs import build_validation

    enc, train, val = tiny_pool
    avail = [np.flatnonzero(~np.isnan(row)) for row in train]
    for cap, expected in ((5, 5), (None, 12), (50, 12)):
        v = build_validation(
            train, val, avail, TrainConfig(val_models=cap), np.random.default_rng(0), torch.device("cpu")
        )
        assert len(v.sets) == len(v.rows) == v.labels.shape[0] == expected
        np.testing.assert_array_equal(v.labels, val[v.rows.numpy()][:, v.cols.numpy()])
    cfg = TrainConfig(**{**FAST, "epochs": 3, "finetune_steps": 20}, val_models=5, seed=0)
    res = train_locus(enc, train, val, model_config=MODEL_CFG, train_config=cfg, progress=False)
    assert len(res.history) == 3 and res.finetune["steps_run"] >= 10
