"""The accuracy protocol: splits, bootstrap, hand-checked best-single / oracle, result schema, no leakage."""

from __future__ import annotations

import json
import re

import numpy as np
import pandas as pd
import pytest

from locus_model.data.matrix import EvaluationMatrix
from locus_model.evaluation import methods, protocol, results
from locus_model.evaluation.baselines import KNNConfig
from locus_model.evaluation.latent import LatentConfig
from locus_model.evaluation.splits import choose_held_out, kfold_splits
from locus_model.stats import bootstrap, metrics
from tests.locus_model.tables import make_table, unit_encodings

FAST_LATENT = LatentConfig(dim=8, hidden=16, noise=(0.05,), max_steps=200, eval_every=20, patience=60, onboard_iters=30)
FAST_BASELINES = {
    "embedllm_mf": FAST_LATENT,
    "irt": LatentConfig(dim=4, hidden=16, noise=(0.05,), max_steps=200, eval_every=20, patience=60, onboard_iters=30),
    "knn": KNNConfig(ks=(3, 5)),
}
BASELINE_METHODS = ("embedllm_mf", "irt", "knn", "best_single", "oracle")


pytestmark = pytest.mark.usefixtures("one_torch_thread")


# ---------------------------------------------------------------------------------------------- pieces


def test_routing_outcomes_agree_with_metrics():
    rng = np.random.default_rng(1)
    probs = rng.random((6, 40))
    labels = (rng.random((6, 40)) < 0.5).astype(float)
    labels[rng.random((6, 40)) < 0.3] = np.nan
    labels[:, 0] = np.nan  # a query no model is labelled on: skipped by both
    out = bootstrap.routing_outcomes(probs, labels)
    assert np.isnan(out[0])
    assert np.nanmean(out) == pytest.approx(metrics.routing_accuracy(probs, labels))


def test_paired_bootstrap_hand_checked():
    same = bootstrap.paired_bootstrap(np.array([1.0, 0, 1]), np.array([1.0, 0, 1]), n_boot=200)
    assert same == {"diff": 0.0, "ci_low": 0.0, "ci_high": 0.0}
    always = bootstrap.paired_bootstrap(np.ones(5), np.zeros(5), n_boot=200)
    assert always == {"diff": 1.0, "ci_low": 1.0, "ci_high": 1.0}
    # d = [1, 0, 0, 1]: a resample's mean is 0 (or 1) with probability 1/16 > 2.5%, so the 95% interval is [0, 1]
    a, b = np.array([1.0, 0, 1, 1, np.nan]), np.array([0.0, 0, 1, 0, 1])  # the NaN pair is dropped
    tie = bootstrap.paired_bootstrap(a, b, n_boot=4000, seed=3)
    assert tie == {"diff": 0.5, "ci_low": 0.0, "ci_high": 1.0}
    with pytest.raises(ValueError, match="equal length"):
        bootstrap.paired_bootstrap(np.ones(3), np.ones(4))


def _labelled(seed: int, m: int = 5, q: int = 30) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    probs = np.round(rng.random((m, q)), 1)  # rounded: many tied scores, as with best_single
    labels = (rng.random((m, q)) < 0.5).astype(float)
    labels[rng.random((m, q)) < 0.2] = np.nan
    labels[:, 3] = np.nan  # a query no model is labelled on
    return probs, labels


def test_resampled_metrics_equal_the_metrics_on_repeated_columns():
    probs, labels = _labelled(2)
    weights = np.random.default_rng(0).integers(0, 4, size=(3, probs.shape[1]))
    weights[:, 0] = 1  # keep a labelled query in every resample
    draws = bootstrap.stats_draws(bootstrap.query_stats(probs, labels), np.vstack([np.ones(probs.shape[1]), weights]))
    for b, w in enumerate([np.ones(probs.shape[1], int), *weights]):
        cols = np.repeat(np.arange(probs.shape[1]), w)  # the resample written out column by column
        expected = metrics.score_predictions(probs[:, cols], labels[:, cols])
        for metric in ("routing_acc", "correctness_acc", "auc", "brier"):
            assert draws[metric][b] == pytest.approx(expected[metric], abs=1e-12), (metric, b)


def paired(probs_a, probs_b, labels, **kw) -> dict:
    """A minus b on the same labels, one stratum: bootstrap_comparisons for one pair."""
    return bootstrap.bootstrap_comparisons({"a": [probs_a], "b": [probs_b]}, [labels], against="a", **kw)["b"]


def test_paired_comparison_ties_and_wins():
    probs, labels = _labelled(4, m=6, q=200)
    same = paired(probs, probs, labels, n_boot=100)
    assert set(same) == {"routing_acc", "correctness_acc", "auc", "brier"}
    assert all(v == {"diff": 0.0, "ci_low": 0.0, "ci_high": 0.0} for v in same.values())
    perfect = np.nan_to_num(labels) * 0.8 + 0.1  # knows every answer
    win = paired(perfect, probs, labels, n_boot=300, seed=1)
    direct = metrics.score_predictions(perfect, labels)["auc"] - metrics.score_predictions(probs, labels)["auc"]
    assert win["auc"]["diff"] == pytest.approx(direct)
    for metric in ("routing_acc", "correctness_acc", "auc"):
        assert win[metric]["ci_low"] > 0, metric  # a clear win is not a tie
    assert win["brier"]["ci_high"] < 0  # lower Brier is better
    with pytest.raises(ValueError, match="same \\(M, Q\\)"):
        paired(probs, probs[:, :-1], labels)


def test_bootstrap_comparisons_average_over_strata():
    (pa, ya), (pb, yb) = _labelled(5, q=40), _labelled(6, q=25)  # two folds of different sizes
    qa, qb = np.clip(pa + 0.3 * np.nan_to_num(ya), 0, 1), np.clip(pb + 0.3 * np.nan_to_num(yb), 0, 1)
    out = bootstrap.bootstrap_comparisons({"x": [qa, qb], "y": [pa, pb]}, [ya, yb], against="x", n_boot=200)
    for metric, stat in out["y"].items():
        per_fold = [
            metrics.score_predictions(q, y)[metric] - metrics.score_predictions(p, y)[metric]
            for q, p, y in ((qa, pa, ya), (qb, pb, yb))
        ]
        assert stat["diff"] == pytest.approx(np.mean(per_fold)), metric
        assert stat["ci_low"] <= stat["diff"] <= stat["ci_high"]
    with pytest.raises(ValueError, match="one array per stratum"):
        bootstrap.bootstrap_comparisons({"x": [qa], "y": [pa, pb]}, [ya, yb], against="x")


def test_kfold_splits_partition_queries():
    splits = kfold_splits(100, folds=5, budget=30, seed=0, val_fraction=0.1)
    tests = np.concatenate([f.test for f in splits])
    assert sorted(tests.tolist()) == list(range(100))
    for f in splits:
        assert len(f.anchors) == 30 and set(f.anchors) <= set(f.train)
        assert not set(f.val) & set(f.train) and not set(f.test) & (set(f.train) | set(f.val))
        assert len(f.val) == 8 and len(f.train) + len(f.val) + len(f.test) == 100
    again = kfold_splits(100, folds=5, budget=30, seed=0, val_fraction=0.1)
    assert all(np.array_equal(a.anchors, b.anchors) for a, b in zip(splits, again))
    with pytest.raises(ValueError, match="lower --budget"):
        kfold_splits(100, folds=5, budget=90, seed=0)


def test_choose_held_out():
    held = choose_held_out(10, 0.2, seed=0)
    assert len(held) == 2 and np.array_equal(held, choose_held_out(10, 0.2, seed=0))
    assert len(choose_held_out(10, 0.0, seed=0)) == 0
    assert len(choose_held_out(3, 0.1, seed=0)) == 1
    with pytest.raises(ValueError, match="fewer than 2"):
        choose_held_out(2, 0.5, seed=0)


# ---------------------------------------------------------------------------------------------- end to end


def test_best_single_and_oracle_hand_checked():
    # A is right on 3 of every 4 queries, B exactly on the others, C never: any-model-correct everywhere
    q = np.arange(40)
    rows = []
    for name, right in (("A", q % 4 != 0), ("B", q % 4 == 0), ("C", np.zeros(40, bool))):
        rows += [
            {"model": name, "query_id": f"q{i:02d}", "query": f"x {i}", "benchmark": "b", "score": float(r)}
            for i, r in zip(q, right)
        ]
    table = pd.DataFrame(rows)
    res = protocol.evaluate(
        table,
        unit_encodings(40),
        budget=12,
        folds=2,
        holdout_models=0.0,
        methods=("best_single", "oracle"),
        progress=False,
        n_boot=500,
    )
    best, oracle = res["methods"]["best_single"], res["methods"]["oracle"]
    assert set(best) == {"all", "in_training"}  # nothing held out: no held_out group
    # routing always picks A (best budget mean); equal fold sizes, so the fold mean is the pooled 30/40
    assert best["all"]["routing_acc"]["mean"] == pytest.approx(0.75)
    # P>0.5 for A only: right on A's 30 correct cells, B's 30 wrong cells and all 40 of C's -> 100/120
    assert best["all"]["correctness_acc"]["mean"] == pytest.approx(100 / 120)
    assert oracle["all"]["routing_acc"]["mean"] == 1.0 and oracle["all"]["correctness_acc"]["mean"] == 1.0
    assert oracle["all"]["brier"]["mean"] == 0.0
    assert oracle["all"]["vs_best_single"]["diff"] == pytest.approx(0.25)
    assert "vs_best_single" not in best["all"]


def check_stat(stat):
    assert set(stat) == {"mean", "std"}
    assert stat["mean"] is None or isinstance(stat["mean"], float)


def test_result_schema_key_by_key():
    table = make_table()
    res = protocol.evaluate(
        table,
        unit_encodings(60),
        budget=20,
        folds=3,
        methods=BASELINE_METHODS,
        baseline_configs=FAST_BASELINES,
        progress=False,
        n_boot=200,
    )
    json.dumps(res, allow_nan=False)  # strict JSON
    assert set(res) == {"settings", "sizes", "wall_s", "verdict", "warnings", "methods"}
    assert res["settings"]["budget"] == 20 and res["settings"]["folds"] == 3 and res["settings"]["protocol"] == "kfold"
    assert len(res["settings"]["held_out_model_names"]) == 2
    assert res["sizes"]["models"] == 10 and res["sizes"]["held_out_models"] == 2 and res["sizes"]["anchors"] == [20] * 3
    assert sum(res["sizes"]["test_queries"]) == 60
    assert set(res["methods"]) == set(BASELINE_METHODS)
    for name, groups in res["methods"].items():
        assert set(groups) == {"all", "in_training", "held_out"}
        for entry in groups.values():
            expected = (
                set(metrics.METRICS) | {"per_benchmark"} | ({"vs_best_single"} if name != "best_single" else set())
            )
            assert set(entry) == expected
            for metric in metrics.METRICS:
                check_stat(entry[metric])
            assert set(entry["per_benchmark"]) == {"mmlu_a", "mmlu_b", "gsm8k"}  # k-fold keeps names as given
            for bench in entry["per_benchmark"].values():
                assert set(bench) == set(metrics.METRICS)
                for stat in bench.values():
                    check_stat(stat)
            if name != "best_single":
                vs = entry["vs_best_single"]
                assert set(vs) == {"diff", "ci_low", "ci_high"} and vs["ci_low"] <= vs["diff"] <= vs["ci_high"]
    text = results.format_results(res)
    for word in ("[all]", "[in_training]", "[held_out]", "embedllm_mf", "oracle"):
        assert word in text


def test_held_out_models_are_never_trained_on(monkeypatch):
    table = make_table()
    seen = []
    real_make = methods.make_method

    class Spy:
        def __init__(self, inner):
            self.inner, self.calls = inner, {}

        def fit(self, encodings, train_scores, val_scores=None):
            self.calls["fit"] = (train_scores.copy(), None if val_scores is None else val_scores.copy())
            self.inner.fit(encodings, train_scores, val_scores)

        def onboard(self, scores):
            self.calls["onboard"] = scores.copy()
            return self.inner.onboard(scores)

        def predict_proba(self, rows, query_idx):
            return self.inner.predict_proba(rows, query_idx)

    def spy_make(name, **kwargs):
        spy = Spy(real_make(name, **kwargs))
        seen.append((name, spy))
        return spy

    monkeypatch.setattr(methods, "make_method", spy_make)
    res = protocol.evaluate(
        table,
        unit_encodings(60),
        budget=20,
        folds=3,
        methods=("embedllm_mf", "irt", "knn", "best_single"),
        baseline_configs=FAST_BASELINES,
        progress=False,
        n_boot=50,
    )
    matrix = EvaluationMatrix.from_table(table)
    held = [matrix.models.index(n) for n in res["settings"]["held_out_model_names"]]
    trained = [i for i in range(len(matrix.models)) if i not in held]
    splits = kfold_splits(60, folds=3, budget=20, seed=0)
    assert len(seen) == 4 * 3
    for k, (name, spy) in enumerate(seen):
        fold = splits[k // 4]
        train_scores, val_scores = spy.calls["fit"]
        assert train_scores.shape == (len(trained), 60)  # only in-training models reach fit()
        assert spy.inner.n_fitted_models == len(trained)
        budget_only = np.full((len(trained), 60), np.nan, np.float32)
        budget_only[:, fold.anchors] = matrix.scores[trained][:, fold.anchors]
        np.testing.assert_array_equal(train_scores, budget_only)  # anchors only: no test or val cells
        assert np.isnan(val_scores[:, fold.test]).all() and np.isnan(val_scores[:, fold.anchors]).all()
        onboard = spy.calls["onboard"]
        expected = np.full((len(held), 60), np.nan, np.float32)
        expected[:, fold.anchors] = matrix.scores[held][:, fold.anchors]
        np.testing.assert_array_equal(onboard, expected)  # held-out models: their budget evaluations only
        if name in ("embedllm_mf", "irt"):
            assert spy.inner.net.models.shape[0] == len(trained)


def test_locus_in_the_protocol(monkeypatch):
    import locus_model.evaluation.methods as methods
    from locus_model.model import LocusConfig
    from locus_model.training import TrainConfig

    shapes = []
    real_train = methods.train_locus

    def spy_train(encodings, train_scores, val_scores, **kwargs):
        shapes.append(train_scores.shape)
        return real_train(encodings, train_scores, val_scores, **kwargs)

    monkeypatch.setattr(methods, "train_locus", spy_train)
    table = make_table()
    res = protocol.evaluate(
        table,
        unit_encodings(60),
        budget=20,
        folds=2,
        methods=("locus",),
        progress=False,
        n_boot=50,
        model_config=LocusConfig(query_dim=16, d=16, n_blocks=1, n_latents=4, n_heads=2, predictor_hidden=8),
        train_config=TrainConfig(
            epochs=2, batch_models=4, enc_min=4, enc_max=16, dec_batch=16, patience=5, device="cpu"
        ),
    )
    assert shapes == [(8, 60), (8, 60)]  # 2 of 10 models held out, never trained on
    assert set(res["methods"]) == {"locus", "best_single"}
    assert set(res["methods"]["locus"]) == {"all", "in_training", "held_out"}
    assert res["settings"]["model_config"]["d"] == 16 and res["settings"]["train_config"]["epochs"] == 2
    for group in ("all", "in_training", "held_out"):  # LOCUS against the other methods run, on every metric
        vs = res["methods"]["locus"][group]["vs_methods"]
        assert set(vs) == {"best_single"}
        assert set(vs["best_single"]) == {"routing_acc", "correctness_acc", "auc", "brier"}
        for metric, stat in vs["best_single"].items():  # the difference of the reported fold means
            means = [res["methods"][m][group][metric]["mean"] for m in ("locus", "best_single")]
            if None in means:
                continue
            assert stat["diff"] == pytest.approx(means[0] - means[1]), (group, metric)
            assert stat["ci_low"] <= stat["diff"] <= stat["ci_high"]
    assert "LOCUS minus each method [all]" in results.format_results(res)
    json.dumps(res, allow_nan=False)


def test_table_split_protocol_and_benchmark_merge():
    table = make_table(split=True)
    res = protocol.evaluate(
        table,
        unit_encodings(60),
        budget=20,
        folds=None,
        holdout_models=0.0,
        methods=("knn", "best_single"),
        baseline_configs=FAST_BASELINES,
        progress=False,
        n_boot=50,
    )
    assert res["settings"]["protocol"] == "table_split" and res["settings"]["folds"] is None
    assert (
        res["sizes"]["test_queries"] == [12]
        and res["sizes"]["val_queries"] == [12]
        and res["sizes"]["train_queries"] == [36]
    )
    assert set(res["methods"]["knn"]["all"]["per_benchmark"]) == {"mmlu", "gsm8k"}  # mmlu_* merged
    assert res["methods"]["knn"]["all"]["routing_acc"]["std"] == 0.0  # one fold
    with pytest.raises(ValueError, match="no 'split' column"):
        protocol.evaluate(make_table(), unit_encodings(60), folds=None, methods=("best_single",), progress=False)


def test_bad_inputs_are_explained():
    table = make_table()
    with pytest.raises(ValueError, match="one row per query"):
        protocol.evaluate(table, unit_encodings(59), budget=10, methods=("best_single",), progress=False)
    with pytest.raises(ValueError, match="unknown method"):
        protocol.evaluate(table, unit_encodings(60), budget=10, methods=("magic",), progress=False)
    mapping = dict(zip(EvaluationMatrix.from_table(table).query_ids, unit_encodings(60)))
    res = protocol.evaluate(table, mapping, budget=10, folds=2, methods=("best_single",), progress=False, n_boot=10)
    assert res["sizes"]["queries"] == 60


def test_extra_groups_report_chosen_models():
    table = make_table()
    res = protocol.evaluate(
        table,
        unit_encodings(60),
        budget=20,
        folds=2,
        holdout_models=0.0,
        methods=("best_single", "oracle"),
        extra_groups={"probe": ["m01", "m05"]},
        progress=False,
        n_boot=20,
    )
    assert set(res["methods"]["oracle"]) == {"all", "in_training", "probe"}
    assert res["settings"]["extra_groups"] == {"probe": ["m01", "m05"]}
    assert "[probe]" in results.format_results(res)
    with pytest.raises(ValueError, match="unknown"):
        protocol.evaluate(
            table,
            unit_encodings(60),
            budget=20,
            folds=2,
            methods=("best_single",),
            extra_groups={"probe": ["nope"]},
            progress=False,
        )


def test_worker_processes_give_the_same_results():
    import torch

    from locus_model.model import LocusConfig
    from locus_model.training import TrainConfig

    table = make_table()
    kwargs = dict(
        budget=20,
        folds=2,
        methods=("locus", "irt", "knn", "best_single"),
        baseline_configs=FAST_BASELINES,
        progress=False,
        n_boot=50,
        model_config=LocusConfig(query_dim=16, d=16, n_blocks=1, n_latents=4, n_heads=2, predictor_hidden=8),
        train_config=TrainConfig(
            epochs=2, batch_models=4, enc_min=4, enc_max=16, dec_batch=16, patience=5, finetune_steps=20, device="cpu"
        ),
    )
    threads = torch.get_num_threads()
    torch.set_num_threads(2)  # the process's count: the fits are pinned to evaluate's threads (1) whatever it is
    try:
        serial = protocol.evaluate(table, unit_encodings(60), jobs=1, **kwargs)
    finally:
        torch.set_num_threads(threads)
    assert torch.get_num_threads() == threads  # the pin is undone
    parallel = protocol.evaluate(table, unit_encodings(60), jobs=2, **kwargs)
    assert (serial["settings"]["jobs"], parallel["settings"]["jobs"]) == (1, 2)
    assert serial["settings"]["threads"] == parallel["settings"]["threads"] == 1
    for name in ("locus", "irt", "knn", "best_single"):
        for group in ("all", "in_training", "held_out"):
            for metric in ("routing_acc", "correctness_acc", "auc", "brier"):
                a, b = serial["methods"][name][group][metric], parallel["methods"][name][group][metric]
                assert b["mean"] == a["mean"], (name, group, metric)  # same threads, same seeds: the same figures
    with pytest.raises(ValueError, match="jobs=0"):
        protocol.evaluate(table, unit_encodings(60), jobs=0, **kwargs)


# ---------------------------------------------------------------------------------------------- degenerate labels


@pytest.mark.parametrize("value", [0.0, 0.5, 1.0])
def test_constant_labels_are_warned_about_and_no_interval_is_claimed(value: float) -> None:
    table = make_table(8, 60).assign(score=value)
    result = protocol.evaluate(
        table,
        unit_encodings(60),
        budget=16,
        folds=2,
        holdout_models=0.25,
        seed=0,
        methods=("knn", "best_single"),
        baseline_configs=FAST_BASELINES,
        progress=False,
        n_boot=50,
    )
    assert any(f"every score is {value:g}" in w for w in result["warnings"])
    knn = result["methods"]["knn"]["all"]["vs_best_single"]
    assert knn == {"diff": None, "ci_low": None, "ci_high": None}
    text = results.format_results(result)
    assert text.splitlines()[1].startswith("WARNING: every score is")
    assert not re.search(r"\[ *[+-]\d|\d\] tie", text)  # no interval printed, so no "tie" or difference claimed
    for name in ("knn", "best_single"):  # 'correct' compares predictions with label >= 0.5: not reported here
        assert result["methods"][name]["all"]["correctness_acc"] == {"mean": None, "std": None}
    assert "nor 'correct' and AUC" in text


def test_one_model_is_a_clear_error_not_a_nan_failure() -> None:
    table = make_table(8, 60)
    one = table[table["model"] == table["model"].iloc[0]]
    with pytest.raises(ValueError, match=r"1 model\(s\).*needs at least 2 models"):
        protocol.evaluate(
            one,
            unit_encodings(60),
            budget=16,
            folds=2,
            holdout_models=0.0,
            seed=0,
            methods=("knn", "best_single"),
            baseline_configs=FAST_BASELINES,
            progress=False,
        )


def test_a_held_out_group_of_one_model_is_warned_about_and_its_routing_is_not_shown() -> None:
    result = protocol.evaluate(
        make_table(8, 60),
        unit_encodings(60),
        budget=16,
        folds=2,
        holdout_models=0.125,
        seed=0,
        methods=("knn", "best_single", "oracle"),
        baseline_configs=FAST_BASELINES,
        progress=False,
        n_boot=50,
    )
    assert result["sizes"]["held_out_models"] == 1
    text = results.format_results(result)
    assert "WARNING: the held_out group has one model" in text
    held_out = text.split("[held_out]", 1)[1].split("\n\n", 1)[0].splitlines()[2:]  # its method rows
    assert len(held_out) == 3 and all("n/a (one model)" in line and " tie" not in line for line in held_out)
    assert "units: percent" in text and "Brier x100" in text
    rows = text.split("[all]", 1)[1].split("\n\n", 1)[0].splitlines()[1:]  # header and method rows
    starts = {line.index("[") if "[" in line else None for line in rows[2:]} - {None}
    assert len(starts) <= 1  # the vs best_single intervals start in one column, tie or not


def test_every_fit_runs_on_the_pinned_thread_count(monkeypatch):
    import torch

    seen = []
    real = protocol.fit_and_predict

    def spy(**args):
        seen.append((args["name"], torch.get_num_threads()))
        return real(**args)

    monkeypatch.setattr(protocol, "fit_and_predict", spy)
    before = torch.get_num_threads()
    res = protocol.evaluate(
        make_table(),
        unit_encodings(60),
        budget=20,
        folds=2,
        methods=("knn", "best_single"),
        progress=False,
        n_boot=20,
        threads=3,
    )
    assert seen and {n for _, n in seen} == {3}, seen
    assert res["settings"]["threads"] == 3
    assert torch.get_num_threads() == before
    with pytest.raises(ValueError, match="threads=0"):
        protocol.evaluate(
            make_table(), unit_encodings(60), budget=20, folds=2, methods=("best_single",), progress=False, threads=0
        )
