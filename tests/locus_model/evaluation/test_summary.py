"""The protocol's summary: the label checks that decide whether an interval may be claimed."""

from __future__ import annotations

import numpy as np
import pytest

from locus_model.evaluation.summary import label_warnings


def test_label_warnings_name_a_one_model_pool_and_queries_no_model_differs_on() -> None:
    rng = np.random.default_rng(0)
    varied = (rng.random((5, 30)) < 0.5).astype(float)
    assert label_warnings(varied, [f"m{i}" for i in range(5)]) == ([], False)
    one, degenerate = label_warnings(varied[:1], ["m0"])
    assert "1 model(s)" in one[0]
    same_per_query = np.tile(varied[:1], (5, 1))  # every model scores what the others score, query by query
    same_per_query[2, 3] = np.nan
    warnings, degenerate = label_warnings(same_per_query, [f"m{i}" for i in range(5)])
    assert degenerate and "no query on which two models' scores differ" in warnings[0]


def guarded_protocol(monkeypatch, margin: float | None) -> dict:
    """The protocol on a small table, LOCUS replaced by a stand-in whose P(correct) is 0.5 everywhere but 0.51 for
    the least accurate model, with a guard whose standing is each model's anchor accuracy."""
    from locus_model.evaluation import protocol
    from locus_model.evaluation.methods import Fitted
    from locus_model.routing import RoutingPolicy
    from tests.locus_model.tables import make_table, unit_encodings

    real = protocol.fit_and_predict

    def stand_in(**args):
        if args["name"] != "locus":
            return real(**args)
        standing = np.nanmean(args["fold"].budget_and_val(args["scores"])[0], axis=1)
        probs = np.full((len(standing), len(args["fold"].test)), 0.5, np.float32)
        probs[int(np.argmin(standing))] = 0.51
        return Fitted(probs, 0.0, standing, args["guard_margin"])

    monkeypatch.setattr(protocol, "fit_and_predict", stand_in)
    table = make_table()
    top = table["model"] == "m09"
    table.loc[top, "score"] = (np.random.default_rng(1).random(top.sum()) < 0.9).astype(float)
    return protocol.evaluate(
        table,
        unit_encodings(60),
        budget=20,
        folds=3,
        methods=("locus",),
        progress=False,
        n_boot=200,
        policy=RoutingPolicy() if margin is None else RoutingPolicy(guard_margin=margin),
    )


def test_the_protocol_routes_by_the_guarded_scores_and_scores_p_as_it_is(monkeypatch) -> None:
    guarded, bare = guarded_protocol(monkeypatch, None), guarded_protocol(monkeypatch, 0.0)
    g, b = guarded["methods"]["locus"]["all"], bare["methods"]["locus"]["all"]
    single = guarded["methods"]["best_single"]["all"]["routing_acc"]["mean"]
    # under the guard the 0.01 edge of the weakest model is not enough: the most accurate on its anchors is called
    assert g["routing_acc"]["mean"] == pytest.approx(single)
    assert g["vs_best_single"]["diff"] == pytest.approx(0.0)
    assert b["routing_acc"]["mean"] < single - 0.1  # by P alone the weakest model takes every query
    assert g["auc"] == b["auc"] and g["brier"] == b["brier"]  # P(correct) itself is untouched
    assert guarded["settings"]["guard_margin"] == 0.02 and bare["settings"]["guard_margin"] == 0.0
    assert not guarded["verdict"]["pays"] and guarded["verdict"]["delta"] == pytest.approx(0.0)
