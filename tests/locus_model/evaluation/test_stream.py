"""The replay: each scenario's JSON keys, and invariants a hand can check (the oracle bounds every method, learning
that never hears an outcome is frozen LOCUS, the full-label rule picks each benchmark's best)."""

from typing import Any

import numpy as np
import pytest

from locus_model.evaluation.stream import METHODS, SCENARIOS, Stream, StreamConfig, plot_stream, replay, route_stream
from locus_model.evaluation.stream_report import paired_over_events, verdict, warnings_of
from locus_model.learning import LearningConfig
from locus_model.model import LocusConfig
from locus_model.training import TrainConfig

D = 16
BENCHES = np.array(["a", "b", "c", "d"])


def _matrix(seed: int = 0, q: int = 240):
    """4 models x q queries of 4 benchmarks whose encodings cluster by benchmark; each model best somewhere."""
    rng = np.random.default_rng(seed)
    b = rng.integers(0, 4, q)
    enc = (rng.normal(size=(4, D))[b] + 0.5 * rng.normal(size=(q, D))).astype(np.float32)
    rate = np.array([[0.8, 0.3, 0.5, 0.5], [0.3, 0.8, 0.5, 0.5], [0.5, 0.5, 0.6, 0.6], [0.4, 0.4, 0.9, 0.4]])
    scores = (rng.random((4, q)) < rate[:, b]).astype(np.float32)
    return scores, enc, BENCHES[b]


def _hand_stream(p, labels, bench, group=None, **kw) -> Stream:
    m, n = labels.shape
    fields: dict[str, Any] = dict(
        p=np.asarray(p, float),
        group=np.zeros(n, int) if group is None else np.asarray(group),
        bench=np.asarray(bench),
        labels=np.asarray(labels, float),
        reported=np.asarray(labels, float),
        client=np.full(n, "judge", dtype=object),
        available=np.ones((m, n), bool),
        revealed=np.ones(n, bool),
        arrives=np.arange(n) + 1,
        standing=np.full(m, 0.5),
        profiles=np.full((m, 1), 0.5),
        shares=np.ones(1),
        margin=0.02,
        best_single=0,
    )
    fields.update(kw)
    return Stream(**fields)


@pytest.fixture(scope="module")
def result():
    scores, enc, bench = _matrix()
    train = TrainConfig(epochs=2, latent_steps=0, finetune_steps=0, select_from_epoch=0, device="cpu")
    model = LocusConfig(query_dim=D, d=16, n_blocks=1, n_latents=4, n_heads=2, predictor_hidden=8)
    return replay(
        scores,
        enc,
        bench,
        ["m0", "m1", "m2", "m3"],
        SCENARIOS,
        seeds=2,
        progress=False,
        config=StreamConfig(events=600, window=200, n_boot=200),
        train_config=train,
        model_config=model,
    )


def test_every_scenario_reports_the_keys_of_the_issue(result) -> None:
    for scenario in SCENARIOS:
        r = result["stream"][scenario]
        assert set(r["methods"]) == set(METHODS)
        for m in METHODS:
            assert 0.0 <= r["methods"][m]["routing_acc"] <= 1.0 and len(r["methods"][m]["curve"]) == 3  # 600 / 200
            if m != "learning":
                d = r["paired"][f"learning_minus_{m}"]
                assert set(d) == {"mean", "ci_low", "ci_high", "events", "blocks"}
                assert d["events"] == 2 * 600 and d["blocks"] == 2 * 6  # every event of both seeds, blocks of 100
                assert d["ci_low"] <= d["mean"] <= d["ci_high"]
        assert r["story"]
    newcomer = result["stream"]["newcomer"]
    for key in ("newcomer_share_at_500", "informed_share_at_500"):
        assert 0.0 <= newcomer[key] <= 1.0 and all(0.0 <= x <= 1.0 for x in newcomer[f"{key}_per_seed"])
    drift = result["stream"]["drift"]
    assert len(drift["events_to_shift_per_seed"]) == 2 and drift["degraded"] in drift["story"]
    assert drift["change_at"] == 300 and newcomer["change_at"] == 150  # drift_at 0.5, join_at 0.25 of 600
    assert set(result["stream"]["poisoned"]["poison_effect"]) == {"mean", "ci_low", "ci_high", "events", "blocks"}
    assert result["settings"]["trainings"] == 2 * 3  # per seed: stationary/drift/poisoned alike, unlike, newcomer
    assert result["warnings"] and "2 seed(s)" in result["warnings"][0]  # under 5 seeds
    assert result["verdict"]["line"].startswith("learning ")


def test_the_oracle_bounds_every_method_on_every_seed(result) -> None:
    for r in result["stream"].values():
        oracle = np.asarray(r["methods"]["oracle"]["per_seed"])
        for m in METHODS:
            assert (np.asarray(r["methods"][m]["per_seed"]) <= oracle + 1e-12).all(), m


def test_learning_without_outcomes_is_frozen_locus_and_explores_nothing() -> None:
    """Feedback 0: no outcome, so no exploration at the default budget and the learned P is the router's exactly."""
    rng = np.random.default_rng(1)
    p, labels = rng.random((5, 300)), (rng.random((5, 300)) < 0.5).astype(float)
    stream = _hand_stream(
        p,
        labels,
        np.zeros(300, int),
        group=rng.integers(0, 3, 300),
        revealed=np.zeros(300, bool),
        standing=rng.random(5),
        profiles=rng.uniform(0.2, 0.8, (5, 3)),
        shares=np.full(3, 1 / 3),
    )
    config = StreamConfig(learning=LearningConfig())
    assert config.learning.explore > 0
    np.testing.assert_array_equal(
        route_stream(stream, "learning", config=config, seed=0), route_stream(stream, "frozen", config=config, seed=0)
    )


def test_the_full_label_rule_picks_each_benchmarks_best_on_the_streams_labels() -> None:
    # benchmark 0: model 1 right 3 of 4, model 0 1 of 4; benchmark 1: model 0 right 2 of 2, model 1 0 of 2
    labels = np.array([[1, 0, 0, 0, 1, 1], [1, 1, 1, 0, 0, 0]], float)
    bench = np.array([0, 0, 0, 0, 1, 1])
    stream = _hand_stream(np.full((2, 6), 0.5), labels, bench)
    np.testing.assert_array_equal(
        route_stream(stream, "rule_full_labels", config=StreamConfig(), seed=0), [1, 1, 1, 1, 0, 0]
    )
    # a model not yet available (a newcomer before it joins) is not chosen there; the next best is
    stream.available[1, :2] = False
    np.testing.assert_array_equal(route_stream(stream, "rule_full_labels", config=StreamConfig(), seed=0)[:2], [0, 0])


def test_learning_moves_off_a_model_that_got_worse() -> None:
    """The router believes model 0 (P 0.7 vs 0.6) but it is right 20% of the time: outcomes move the traffic."""
    n = 600
    rng = np.random.default_rng(2)
    labels = np.stack([rng.random(n) < 0.2, rng.random(n) < 0.6]).astype(float)
    p = np.stack([np.full(n, 0.7), np.full(n, 0.6)])
    stream = _hand_stream(p, labels, np.zeros(n, int), standing=np.array([0.7, 0.6]), profiles=np.array([[0.7], [0.6]]))
    choice = route_stream(stream, "learning", config=StreamConfig(), seed=0)
    assert np.mean(route_stream(stream, "frozen", config=StreamConfig(), seed=0) == 0) == 1.0
    assert np.mean(choice[-200:] == 1) > 0.9


def test_unknown_scenario_and_incomplete_matrix_are_refused() -> None:
    scores, enc, bench = _matrix()
    with pytest.raises(ValueError, match="unknown stream scenario"):
        replay(scores, enc, bench, ["a", "b", "c", "d"], ["sunny"], progress=False)
    scores[0, 0] = np.nan
    with pytest.raises(ValueError, match="cells are missing"):
        replay(scores, enc, bench, ["a", "b", "c", "d"], ["stationary"], progress=False)


def test_the_learning_router_embeds_a_newcomer_again_from_its_graded_answers_every_50() -> None:
    """As the pipeline's relearning: every EMBED_EVERY graded answers, one forward pass (embed_graded) gives the
    newcomer a new row; its P on later events follows it and the learner starts it from its new profile."""
    from locus_model.evaluation.stream_routing import Reembedding, replay_decisions, replay_strategy
    from locus_model.learning import EMBED_EVERY, Learning, embed_graded
    from tests.locus_model.tiny_locus import one_group_router, tiny_model, tiny_pool

    router = one_group_router(tiny_model())
    enc, _ = tiny_pool()
    n = 2 * EMBED_EVERY + 20
    enc = enc[:n]
    labels = np.stack([np.ones(n), (np.arange(n) % 3 == 0).astype(float)])
    stream = _hand_stream(np.full((2, n), 0.5), labels, np.zeros(n, int), profiles=np.full((2, 1), 0.5))
    stream.available[0] = False  # only the newcomer answers: every outcome is its
    stream.reembed = Reembedding(row=1, router=router, encodings=enc)
    strategy = replay_strategy(stream, "learning", config=StreamConfig(), seed=0)
    assert isinstance(strategy, Learning)
    decisions = replay_decisions(stream, strategy)
    assert all(d.chosen == 1 for d in decisions)
    _, profile = embed_graded(router, enc[: 2 * EMBED_EVERY], labels[1, : 2 * EMBED_EVERY])
    np.testing.assert_allclose(strategy.learner.start[1], np.clip(profile, 0.005, 0.995))  # the second re-embedding
    emb, first = embed_graded(router, enc[:EMBED_EVERY], labels[1, :EMBED_EVERY])
    fresh = router.proba(emb[None], first[None], enc[EMBED_EVERY : EMBED_EVERY + 1])[0, 0]
    assert decisions[EMBED_EVERY].p[0] == pytest.approx(fresh)  # 50 graded by event 50: its new row, no evidence yet
    assert decisions[EMBED_EVERY - 1].p[0] != pytest.approx(0.5)  # before: the old row, moved by its outcomes
    np.testing.assert_array_equal(stream.p, 0.5)  # the stream itself is not changed (other methods read it)


# ---------------------------------------------------------------------------------------------- the figures


def test_paired_differences_are_per_event_and_pool_the_seeds_blocks() -> None:
    # seed 0: learning right on 150 of 200 events, frozen on 100; seed 1: both right on all 100
    a = [np.r_[np.ones(150), np.zeros(50)], np.ones(100)]
    b = [np.r_[np.ones(100), np.zeros(100)], np.ones(100)]
    d = paired_over_events(a, b, n_boot=500)
    assert d["mean"] == pytest.approx(50 / 300)  # over the 300 events, not the mean of the seeds' means (0.125)
    assert d["events"] == 300 and d["blocks"] == 3  # blocks of EVENT_BLOCK = 100 events
    # the three blocks differ by 0.5, 0 and 0: a resample of three blocks lies in [0, 0.5]
    assert 0.0 <= d["ci_low"] <= d["mean"] <= d["ci_high"] <= 0.5
    same = paired_over_events([np.ones(100)], [np.ones(100)], n_boot=100)
    assert (same["mean"], same["ci_low"], same["ci_high"]) == (0.0, 0.0, 0.0)


def _drift_run(choices: np.ndarray, at: int = 0) -> dict:
    return {"info": {"at": at, "model": 0, "like": 1, "informed_share": 0.0}, "choices": {"learning": choices}}


def test_a_seed_that_never_shifts_counts_as_never_in_the_median() -> None:
    never = np.zeros(400, int)  # always the degraded model
    # off it after 50 events: within 5 points of full knowledge's 0 (5 of the last 100) at event 145
    quick = np.r_[np.zeros(50, int), np.ones(350, int)]
    from locus_model.evaluation.stream_report import _drift

    two_never = _drift([_drift_run(never), _drift_run(never), _drift_run(quick)], ["a", "b"])
    assert two_never["events_to_shift_per_seed"] == [None, None, 145]
    assert two_never["events_to_shift"] is None and two_never["seeds_shifted"] == 1  # the median seed never did
    one_never = _drift([_drift_run(never), _drift_run(quick), _drift_run(quick)], ["a", "b"])
    assert one_never["events_to_shift"] == 145.0


def test_the_verdict_reads_learning_against_frozen_on_every_scenario() -> None:
    def result(*intervals):
        return {
            "settings": {"seeds": 5},
            "stream": {
                f"s{i}": {"paired": {"learning_minus_frozen": {"mean": m, "ci_low": lo, "ci_high": hi}}}
                for i, (m, lo, hi) in enumerate(intervals)
            },
        }

    pays = verdict(result((0.05, 0.03, 0.07), (0.0, -0.01, 0.01)))
    assert pays["pays"] and pays["line"].startswith("learning pays on this data: s0 +5.0 [+3.0, +7.0]")
    flat = verdict(result((0.0, -0.01, 0.01)))
    assert not flat["pays"] and flat["line"].startswith("learning does not pay") and "keep --learn off" in flat["line"]
    costs = verdict(result((0.05, 0.03, 0.07), (-0.02, -0.03, -0.01)))
    assert costs["costs"] and not costs["pays"] and "keep --learn off" in costs["line"]
    assert warnings_of(result((0.0, 0.0, 0.0))) == []  # 5 seeds: no warning


def test_feedback_zero_shows_exactly_frozens_accuracy() -> None:
    scores, enc, bench = _matrix()
    train = TrainConfig(epochs=2, latent_steps=0, finetune_steps=0, select_from_epoch=0, device="cpu")
    model = LocusConfig(query_dim=D, d=16, n_blocks=1, n_latents=4, n_heads=2, predictor_hidden=8)
    silent = replay(
        scores,
        enc,
        bench,
        ["m0", "m1", "m2", "m3"],
        ["stationary"],
        seeds=1,
        progress=False,
        config=StreamConfig(events=600, window=200, n_boot=50, feedback=0.0),
        train_config=train,
        model_config=model,
    )["stream"]["stationary"]
    assert silent["methods"]["learning"]["per_seed"] == silent["methods"]["frozen"]["per_seed"]


def test_the_plot_marks_the_change_and_draws_every_method(result, tmp_path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    drawn = {}
    real = plt.subplots

    def spy(*args, **kwargs):
        fig, axes = real(*args, **kwargs)
        drawn["axes"] = axes
        return fig, axes

    plt.subplots = spy
    try:
        path = plot_stream(result, tmp_path / "curve.png")
    finally:
        plt.subplots = real
    assert (tmp_path / "curve.png").stat().st_size > 0 and path.endswith("curve.png")
    panels = dict(zip(SCENARIOS, drawn["axes"][0]))
    drift = panels["drift"]
    styles = {(line.get_linestyle(), line.get_marker()) for line in drift.get_lines() if line.get_label() in METHODS}
    assert len(styles) == len(METHODS)  # every method its own dash and marker: none hidden under another
    marks = [line for line in drift.get_lines() if line.get_label() not in METHODS]
    assert [m.get_xdata()[0] for m in marks] == [300]  # the drift's event
    assert drift.get_xlabel().startswith("event")


def test_the_replays_guard_is_validated_and_defaulted_by_the_routing_policy() -> None:
    from locus_model.routing.errors import RoutingError
    from locus_model.routing.policy import DEFAULT_GUARD

    assert StreamConfig().guard_margin == DEFAULT_GUARD  # None: the policy's one default
    assert StreamConfig(guard_margin="measured").guard_margin == "measured"
    with pytest.raises(RoutingError, match="guard margin"):
        StreamConfig(guard_margin=1.5)
