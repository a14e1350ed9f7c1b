"""bench/bench_frontier.py, a thin caller of locus_model.routing.frontier: its run on a stand-in suite, its costs
(sizes, or dollars from --prices, unpriced models unknown), and the frontier's decisions equal to locus serve's and
the cost_frontier asset's (the library's own tests: tests/locus_model/test_routing_frontier.py)."""

from __future__ import annotations

import json
from types import SimpleNamespace

import numpy as np
import pytest

import bench.bench_frontier as bench_frontier
from bench.bench_frontier import model_costs, targets
from locus_model.evaluation.splits import Fold
from locus_model.routing.curves import rule_curve


def choices(probs: np.ndarray, costs: np.ndarray, weights, rows: np.ndarray) -> np.ndarray:
    """(K, Q) model rows the frontier's rule chooses among ``rows`` (costs (M,), every query labelled)."""
    known = np.zeros(probs.shape, dtype=bool)
    known[rows] = True
    c = np.broadcast_to(np.nan_to_num(costs, nan=0.0)[:, None], probs.shape).copy()
    c[~known] = np.nan
    chosen = rule_curve(probs, np.zeros(probs.shape), c, known, weights).chosen
    assert chosen is not None
    return chosen


def test_the_bench_runs_the_library_frontier_on_the_cached_fits(tmp_path, monkeypatch):
    rng = np.random.default_rng(0)
    names = [f"m{i}-{s}b" for i, s in enumerate([1, 3, 7, 13, 70])] + ["mystery"]
    scores = (rng.uniform(size=(6, 40)) < np.linspace(0.3, 0.8, 6)[:, None]).astype(np.float32)
    folds = [Fold(k, np.arange(0), np.arange(5), np.arange(0), np.arange(20 * k, 20 * k + 20)) for k in range(2)]
    setup = SimpleNamespace(
        matrix=SimpleNamespace(models=names, queries=[f"q{q}" for q in range(40)]), scores=scores, splits=folds
    )
    models = tmp_path / "models.csv"
    models.write_text("model,params_b\n" + "".join(f"{n},{n.split('-')[1][:-1]}\n" for n in names[:5]))
    monkeypatch.setattr(bench_frontier, "protocol_setup", lambda *a, **k: setup)
    monkeypatch.setattr(bench_frontier, "MODELS_CSV", models)
    monkeypatch.setattr(
        bench_frontier,
        "cached_probs",
        lambda cache, setup, name, fold, tags: (
            np.clip(scores[:, fold.test] * 0.6 + rng.uniform(0, 0.4, size=(6, 20)), 0, 1),
            f"{name}_f{fold.index}.npz",
        ),
    )
    assert bench_frontier.main(["--out-dir", str(tmp_path), "--n-boot", "20", "--tag", "_t", "--folds", "2"]) == 0
    result = json.loads((tmp_path / "frontier_metabench_b256_t.json").read_text())
    assert result["settings"]["costs"]["models_of_unknown_cost"] == 1  # mystery: no size, never priced
    assert set(result["frontier"]) == {
        *bench_frontier.METHODS,
        "oracle",
        "threshold_locus",
        "threshold_mf",
        "random_mix",
    }
    assert {f["best_single"] for f in result["frontier_folds"]} <= set(names[:5])
    assert set(result["targets"]) == {
        "locus_aiq_at_least_every_label_free_router",
        "best_single_accuracy_at_most_20_percent_of_its_cost",
    }
    assert (tmp_path / "frontier_metabench.png").stat().st_size > 0
    assert bench_frontier.main(["--table", str(tmp_path / "frontier_metabench_b256_t.json")]) == 0


def test_targets_compare_locus_with_the_label_free_routers_only():
    def router(aiq, diff=None, share=None):
        return {
            "aiq": {"mean": aiq},
            "cost_share_at_best_single": {"mean": share, "ci_low": None, "ci_high": None},
            **({"aiq_vs_locus": {"diff": diff, "ci_low": diff, "ci_high": diff}} if diff is not None else {}),
        }

    frontier = {
        "locus": router(0.8, share=0.15),
        "irt": router(0.7, 0.1),
        "oracle": router(0.95, -0.15),
        "per_benchmark": router(0.85, -0.05),
    }
    got = targets(frontier)
    assert got["locus_aiq_at_least_every_label_free_router"]["met"]  # the oracle and per-benchmark read labels
    assert got["best_single_accuracy_at_most_20_percent_of_its_cost"]["met"]
    frontier["knn"] = router(0.81, -0.01)
    assert set(targets(frontier)["locus_aiq_at_least_every_label_free_router"]["above_locus"]) == {"knn"}


def test_locus_serve_routes_a_query_as_the_bench_decides(tmp_path):
    """One real POST /route per weight on the tiny served pool: the frontier's decision from the same P(correct),
    costs and candidates is the server's."""
    from tests.locus_pipeline.serve.helpers import NAMES, QUERY, client_for, expected_probs
    from tests.locus_pipeline.serve_home import build_home

    built = build_home(tmp_path / "home", NAMES)
    costs = {"alpha-7b": 7, "beta-13b": 13, "gamma-70b": 70, "delta-1b": 1, "org/epsilon 3b": 3}
    p = expected_probs(built, QUERY)
    names = list(p)
    probs = np.array([[p[n]] for n in names])
    cost = np.array([costs[n] for n in names], dtype=np.float64)
    candidates = ["alpha-7b", "gamma-70b", "delta-1b", "org/epsilon 3b"]
    rows = np.array(sorted(names.index(c) for c in candidates))
    with client_for(built, tmp_path, models={"models": {n: {"cost_per_query": c} for n, c in costs.items()}}) as client:
        for w in (0.0, 0.5, 0.9, 0.99, 1.0):
            served = client.post("/route", json={"query": QUERY, "quality_weight": w, "candidates": candidates}).json()
            assert names[choices(probs, cost, [w], rows)[0][0]] == served["chosen"], w


@pytest.mark.e2e
def test_the_asset_the_server_and_the_bench_decide_alike_with_unknown_costs_candidates_and_caps(tmp_path):
    """The cost_frontier asset (invoked as Dagster runs it), locus serve (POST /route) and the bench's rule choose the
    same model for every query, weight and candidate set, on a tiny home whose catalog leaves one model's size
    unknown (no size in its name either): the asset and the bench leave it out, the server leaves it out of every
    cost-aware ranking by itself."""
    import dagster as dg
    import pandas as pd

    from locus_model.data.encoding import encode_queries
    from locus_model.infer import predict_proba
    from locus_model.pool import pool_matrix
    from locus_model.routing import cost_info, cost_table, frontier_of_pool
    from locus_pipeline.defs.assets.cost import cost_frontier as cost_frontier_asset
    from tests.locus_pipeline.serve.helpers import client_for
    from tests.locus_pipeline.serve_home import build_home, queries

    names = ["alpha-7b", "beta-13b", "gamma-70b", "delta-1b", "org/epsilon 3b", "mystery-model"]
    built = build_home(tmp_path / "home", names)
    home = built["home"]
    pool_names, z = pool_matrix(home.read_pool())
    texts = queries(6, seed=5)
    probs = predict_proba(built["model"], z, encode_queries(texts, encoder="hashing-256", progress=False))  # (M, Q)
    labels = (np.random.default_rng(0).uniform(size=probs.shape) < 0.5).astype(np.float64)
    qids = [f"t{q}" for q in range(len(texts))]
    # the likelier right, the dearer, in steps as small as the untrained predictor's P(correct) differences: every
    # weight trades the two differently
    mean = probs.mean(axis=1)
    rank, step = np.argsort(np.argsort(mean)), float(np.median(np.diff(np.sort(mean))))
    sizes = {n: np.nan if n == "mystery-model" else 1 + step * rank[i] for i, n in enumerate(pool_names)}
    catalog = pd.DataFrame({"model": pool_names, "params_b": [sizes[n] for n in pool_names]})
    home.write_table("model_catalog", catalog)  # the server reads the same catalog
    home.write_table(
        "raw_evaluations", pd.DataFrame({"source": ["long_format"], "root": ["tests"]})
    )  # the report's data note
    preds = pd.DataFrame(
        {
            "model": np.repeat(pool_names, len(qids)),
            "query_id": np.tile(qids, len(pool_names)),
            "prob": probs.ravel(),
            "label": labels.ravel(),
            "checkpoint_id": built["checkpoint_id"],
        }
    )
    evaluations = pd.DataFrame({"query_id": qids, "query": texts})
    with dg.build_asset_context() as context:
        table = cost_frontier_asset(
            context,
            model_embeddings=home.read_pool(),
            test_query_predictions=preds,
            model_catalog=catalog,
            evaluation_table=evaluations,
            home=home,
        ).set_index("quality_weight")
    costs = cost_table(pool_names, cost_info(catalog)).costs()  # (M,) params_b, NaN for mystery-model
    assert np.isnan(costs[pool_names.index("mystery-model")]) and set(table["cost_basis"]) == {"params_b"}
    known = np.flatnonzero(~np.isnan(costs))
    weights = [float(w) for w in table.index]  # the asset's 41, from 0 to 1
    bench = choices(probs, costs, weights, known)  # (K, Q)
    assert len({tuple(b) for b in bench}) > 1  # the weights lead to different choices
    q = np.arange(len(texts))
    subset = ["beta-13b", "gamma-70b", "delta-1b", "org/epsilon 3b", "mystery-model"]
    rows = np.array(sorted(pool_names.index(n) for n in subset if n != "mystery-model"))
    cap = float(np.median(costs[rows]))
    small = rows[costs[rows] <= cap]
    capped_frontier = frontier_of_pool(
        probs[rows],
        labels[rows],
        [pool_names[i] for i in rows],
        texts,
        cost_table(pool_names, cost_info(catalog)),
        weights=weights,
    )
    with client_for(built, tmp_path) as client:
        for k, w in enumerate(weights):
            served = []
            for text in texts:
                body = {"query": text, "quality_weight": w} | (
                    {} if w < 1 else {"candidates": [pool_names[i] for i in known]}
                )
                decision = client.post("/route", json=body).json()
                served.append(pool_names.index(decision["chosen"]))
                if w < 1:
                    assert decision["unknown_cost"] == ["mystery-model"], decision
                capped = client.post(
                    "/route", json={"query": text, "quality_weight": w, "candidates": subset, "max_params": cap}
                ).json()
                assert pool_names.index(capped["chosen"]) == choices(probs, costs, [w], small)[0][texts.index(text)]
                assert set(capped["over_params"]) == {pool_names[i] for i in rows if costs[i] > cap}
                assert capped["unknown_params"] == (
                    [] if w < 1 else ["mystery-model"]
                )  # w < 1: left out as unknown cost
            assert served == bench[k].tolist(), w
            assert table.loc[w, "accuracy"] == pytest.approx(labels[bench[k], q].mean())  # the asset's point
            assert table.loc[w, "mean_cost"] == pytest.approx(costs[bench[k]].mean())
            assert [rows[i] for i in capped_frontier.chosen[k]] == choices(probs, costs, [w], rows)[0].tolist()


def test_prices_make_the_cost_dollars_per_query_and_unpriced_models_unknown(tmp_path):
    prices = tmp_path / "prices.csv"
    prices.write_text("model,price_input_per_mtok,price_output_per_mtok\na,1.0,2.0\nb,0.5,0.5\n")
    costs, note = model_costs(["a", "b", "c"], ["x" * 400], prices=prices, output_tokens=50)  # 100 input tokens
    np.testing.assert_allclose(costs[:, 0], [(100 * 1.0 + 50 * 2.0) / 1e6, (100 * 0.5 + 50 * 0.5) / 1e6, np.nan])
    assert note["basis"] == "usd" and note["models_of_unknown_cost"] == 1 and note["unknown_cost"] == ["c"]
    nothing = tmp_path / "none.csv"
    nothing.write_text("model,price_input_per_mtok\nzz,1.0\n")
    with pytest.raises(SystemExit, match="no model of the suite has a price"):
        model_costs(["a"], ["x"], prices=nothing)
