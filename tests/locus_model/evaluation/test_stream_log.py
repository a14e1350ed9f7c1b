"""The replay of a log of graded answers: the reader's errors name the file, row and column; the cut at the start
trains on what came before; the events are replayed in the log's order with the answers as then graded."""

import numpy as np
import pandas as pd
import pytest

from locus_model.data.stream_log import read_stream_log
from locus_model.evaluation.stream_log import replay_log, split_log
from locus_model.evaluation.stream_routing import METHODS, StreamConfig
from locus_model.model import LocusConfig
from locus_model.training import TrainConfig
from tests.locus_model.evaluation.stream_logs import graded_log

D = 16


def test_the_cut_trains_on_what_came_before_and_replays_the_rest_in_order(tmp_path) -> None:
    log = graded_log(6)
    log.to_csv(tmp_path / "log.csv", index=False)
    split = split_log(read_stream_log(tmp_path / "log.csv"), start=1000)
    assert split.answers_before == 18 and split.event_labels.shape == (3, 6) and split.left_out == 0
    q = [split.query_ids[i] for i in split.event_query]
    assert q == [f"q{i}" for i in range(6)]  # the log's order
    m0 = split.models.index("m0")
    assert (split.event_labels[m0] == 0).all()  # as graded after the cut, not before
    assert not np.isnan(split.train_scores).any()
    # an event missing one model's answer is left out and counted
    partial = log.drop(index=log[(log["time"] == 1003) & (log["model"] == "m1")].index)
    assert split_log(partial, start=1000).left_out == 1
    with pytest.raises(ValueError, match="--stream-log-start"):
        split_log(log, start=5000)


def test_a_log_is_replayed_with_the_replays_methods_and_figures() -> None:
    log = graded_log(60)
    after = log[(log["model"] == "m1") & (log["time"] >= 1000)]
    log = pd.concat([log, after.assign(model="m3")])  # first graded after the cut: a newcomer
    log = log.sort_values(["time"], kind="stable").reset_index(drop=True)
    log["_row"] = np.arange(1, len(log) + 1)
    split = split_log(log, start=1000)
    rng = np.random.default_rng(0)
    centres = rng.normal(size=(2, D))
    enc = np.stack([centres[int(t.endswith("a"))] + 0.3 * rng.normal(size=D) for t in split.texts]).astype(np.float32)
    result = replay_log(
        split,
        enc,
        seeds=1,
        config=StreamConfig(window=20, n_boot=50),
        train_config=TrainConfig(epochs=2, latent_steps=0, finetune_steps=0, select_from_epoch=0, device="cpu"),
        model_config=LocusConfig(query_dim=D, d=16, n_blocks=1, n_latents=4, n_heads=2, predictor_hidden=8),
        progress=False,
    )
    r = result["stream"]["log"]
    assert set(r["methods"]) == set(METHODS) and result["settings"]["events"] == 60
    for m in METHODS:
        assert r["methods"][m]["routing_acc"] <= r["methods"]["oracle"]["routing_acc"] + 1e-12
    assert "m0 answers" in r["story"] and "worse" in r["story"]  # the name that changed behaviour
    assert "newcomers): m3" in r["story"] and result["settings"]["models"] == ["m0", "m1", "m2", "m3"]
    assert result["verdict"]["line"].startswith("learning ") and result["warnings"]  # 1 seed: warned
