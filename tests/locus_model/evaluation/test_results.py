"""The protocol result flattened into a long table, and its headline as Markdown (evaluation.results)."""

from __future__ import annotations

from locus_model.evaluation.results import flatten_results, headline_markdown


def stat(mean: float, std: float = 0.01) -> dict:
    return {"mean": mean, "std": std}


RESULT = {
    "methods": {
        "locus": {
            "all": {
                "routing_acc": stat(0.8),
                "auc": stat(0.7),
                "brier": stat(0.2),
                "correctness_acc": stat(0.65),
                "per_benchmark": {"math": {"routing_acc": stat(0.9, 0.02)}},
                "vs_best_single": {"diff": 0.05, "ci_low": 0.01, "ci_high": 0.09},
                "vs_methods": {"irt": {"auc": {"diff": 0.01, "ci_low": -0.02, "ci_high": 0.03}}},
            }
        },
        "irt": {"all": {"routing_acc": stat(0.78), "auc": stat(0.69)}, "held_out": {"routing_acc": stat(0.7)}},
    }
}


def test_flatten_results_one_row_per_method_group_benchmark_and_metric() -> None:
    flat = flatten_results(RESULT)
    assert list(flat.columns) == ["method", "group", "benchmark", "metric", "mean", "std"]
    rows = {(r.method, r.group, r.benchmark, r.metric): (r.mean, r.std) for r in flat.itertuples()}
    assert rows[("locus", "all", "", "routing_acc")] == (0.8, 0.01)
    assert rows[("locus", "all", "math", "routing_acc")] == (0.9, 0.02)
    assert rows[("locus", "all", "", "vs_best_single.ci_low")][0] == 0.01
    assert rows[("locus", "all", "", "vs_irt.auc.diff")][0] == 0.01
    assert rows[("irt", "held_out", "", "routing_acc")] == (0.7, 0.01)
    assert len(flat) == 4 + 1 + 3 + 3 + 3  # locus headline, per benchmark, vs_best_single, vs_irt; irt


def test_headline_markdown_one_row_per_method_and_group_one_column_per_metric() -> None:
    lines = headline_markdown(flatten_results(RESULT)).splitlines()
    assert [c.strip() for c in lines[0].strip("|").split("|")] == [
        "method",
        "group",
        "auc",
        "brier",
        "correctness_acc",
        "routing_acc",
    ]
    assert len(lines) == 2 + 3  # header, rule, (irt, all), (irt, held_out), (locus, all)
    locus = next(line for line in lines if "locus" in line)
    assert [c.strip() for c in locus.strip("|").split("|")][2:] == ["0.7", "0.2", "0.65", "0.8"]


def test_the_frontier_table_says_the_cost_shares_in_words() -> None:
    from locus_model.evaluation.results import frontier_rows

    def share(mean, low, high, missed):
        return {"mean": mean, "ci_low": low, "ci_high": high, "not_reached": missed}

    aiq = {"mean": 0.8, "ci_low": 0.7, "ci_high": 0.9}
    result = {
        "frontier": {
            "locus": {
                "aiq": aiq,
                "cost_share_at_best_single": share(None, 0.5, None, 0.6),
                "cost_share_at_95": share(0.3, 0.22, None, 0.12),
            },
            "knn": {
                "aiq": aiq,
                "cost_share_at_best_single": share(0.9, 0.8, 1.0, 0.0),
                "cost_share_at_95": share(None, None, None, 1.0),
            },
            "mf": {
                "aiq": aiq,
                "cost_share_at_best_single": share(None, 0.9, None, 0.998),
                "cost_share_at_95": share(0.5, 0.4, None, 0.001),
            },
        }
    }
    rows = {r["router"]: r for r in frontier_rows(result)}
    assert rows["locus"]["cost at 95% of it"] == "30% of its cost (95% CI from 22%; not reached in 12% of resamples)"
    assert rows["locus"]["cost at best single's accuracy"] == "not reached (reached in 40% of resamples)"
    assert rows["knn"]["cost at best single's accuracy"] == "90% of its cost (95% CI 80-100%)"
    assert rows["knn"]["cost at 95% of it"] == "not reached"
    assert rows["mf"]["cost at best single's accuracy"] == "not reached (reached in <1% of resamples)"
    assert rows["mf"]["cost at 95% of it"] == "50% of its cost (95% CI from 40%; not reached in <1% of resamples)"
