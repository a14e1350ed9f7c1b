"""The protocol's result dict: saved as strict JSON, printed as plain-text tables, flattened into a long table
(one row per method, group, benchmark and metric) with its headline as Markdown."""

from __future__ import annotations

import json
import math
import sys
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

GROUPS = ("all", "in_training", "held_out")  # the built-in model groups of a result, in print order


def config_dict(config: Any) -> dict | None:
    return asdict(config) if config is not None else None


def json_clean(obj: Any) -> Any:
    """NaN/inf -> None and numpy scalars -> Python, so the result is strict JSON."""
    if isinstance(obj, dict):
        return {str(k): json_clean(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [json_clean(v) for v in obj]
    if isinstance(obj, (np.integer,)):
        return int(obj)
    if isinstance(obj, (float, np.floating)):
        return None if not math.isfinite(float(obj)) else float(obj)
    return obj


def save_results(result: dict, path: str | Path) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result, indent=2, allow_nan=False) + "\n")
    return path


# ---------------------------------------------------------------------------------------------- printing


def _fmt(stat: dict | None, scale: float = 100.0, digits: int = 1) -> str:
    if not stat or stat.get("mean") is None:
        return "-"
    return f"{stat['mean'] * scale:.{digits}f}±{stat['std'] * scale:.{digits}f}"


def format_results(result: dict) -> str:
    """The result as plain-text tables, one per group (percent; Brier x100; +- = std over folds)."""
    s, z = result["settings"], result["sizes"]
    lines = [
        f"protocol={s['protocol']} budget={s['budget']} folds={s['folds']} "
        f"held_out={z['held_out_models']}/{z['models']} "
        f"models, {z['queries']} queries, wall {result['wall_s']:.0f} s"
    ]
    if s.get("guard_margin") == "measured":
        lines.append(
            "locus routes under the measured guard: the model most accurate on its own anchors is left only where "
            "another is better with 95% probability given P's error measured per query group on the validation "
            "answers (routing, hit@3, the frontier; correct, AUC and Brier read P(correct) itself)"
        )
    elif s.get("guard_margin"):
        lines.append(
            f"locus routes under a guard of {s['guard_margin']:g}: the model most accurate on its own anchors "
            f"is left only for a P(correct) more than {s['guard_margin']:g} higher (routing, hit@3, the "
            "frontier; correct, AUC and Brier read P(correct) itself)"
        )
    lines += [f"WARNING: {w}" for w in result.get("warnings") or []]
    if z.get("held_out_models") == 1:
        lines.append(
            "WARNING: the held_out group has one model: routing among one model picks it for every query, so "
            "every method (oracle included) routes alike there; its routing, hit@3 and routing differences "
            "are n/a (its correct, AUC and Brier still measure the predictions)"
        )
    lines.append(
        "units: percent, mean±std over folds; Brier: the Brier score x 100 (lower is better); vs best_single: "
        "routing accuracy minus the best single model's, in points "
        "[95% paired bootstrap CI], tie when it covers 0"
    )
    header = (
        f"{'method':<12} {'routing %':>11} {'hit@3 %':>11} {'correct %':>11} {'AUC %':>11} {'Brier x100':>11}  "
        "vs best_single [95% CI]"
    )
    groups = list(GROUPS) + [g for g in (result["settings"].get("extra_groups") or {}) if g not in GROUPS]
    for group in groups:
        rows = [(m, res[group]) for m, res in result["methods"].items() if group in res]
        if not rows:
            continue
        one_model = group == "held_out" and z.get("held_out_models") == 1  # routing among one model: n/a
        routing = (lambda stat: "n/a") if one_model else _fmt
        lines += ["", f"[{group}]", header]
        for name, entry in rows:
            vs_text = "n/a (one model)" if one_model else format_interval(entry.get("vs_best_single"))
            lines.append(
                f"{name:<12} {routing(entry['routing_acc']):>11} {routing(entry['hit@3']):>11} "
                f"{_fmt(entry['correctness_acc']):>11} "
                f"{_fmt(entry['auc']):>11} {_fmt(entry['brier']):>11}  {vs_text:<26}".rstrip()
            )
        locus = next((entry for m, entry in rows if m == "locus"), None)
        if locus and locus.get("vs_methods"):
            lines += [
                "",
                f"LOCUS minus each method [{group}] (fold means; 95% paired bootstrap CI over test queries within "
                "folds; Brier: negative favours LOCUS)",
                (f"{'method':<12} " + " ".join(f"{k:<24}" for k in _PAIRED)).rstrip(),
            ]
            for other, stats in locus["vs_methods"].items():
                cells = [
                    "n/a (one model)" if one_model and k == "routing_acc" else format_interval(stats.get(k))
                    for k in _PAIRED
                ]
                lines.append((f"{other:<12} " + " ".join(f"{c:<24}" for c in cells)).rstrip())
    return "\n".join(lines)


_PAIRED = ("routing_acc", "correctness_acc", "auc", "brier")


def format_interval(stat: dict | None, scale: float = 100.0) -> str:
    """' +1.2 [ +0.3, +2.0]' for a {"diff", "ci_low", "ci_high"} dict (x100; each number 5 wide, so that a column of
    them lines up), with ' tie' when the interval covers 0."""
    if not stat or stat.get("diff") is None:
        return "-"
    tie = " tie" if stat["ci_low"] <= 0 <= stat["ci_high"] else ""
    return f"{stat['diff'] * scale:+5.1f} [{stat['ci_low'] * scale:+5.1f},{stat['ci_high'] * scale:+5.1f}]{tie}"


def _percent(x: float) -> str:
    """A share of resamples: "12%", "<1%" (not 0% for a few), ">99%"."""
    return "<1%" if 0 < x < 0.005 else ">99%" if 0.995 <= x < 1 else f"{x:.0%}"


def _share(stat: dict) -> str:
    """A cost share in words: "30% of its cost (95% CI 22-41%)", with "; not reached in 12% of resamples" where some
    resamples never reach it (the interval then has no upper end), "not reached" where the point figure is not."""
    missed = stat.get("not_reached") or 0.0
    if stat["mean"] is None or stat["mean"] == float("inf"):
        return "not reached" + (f" (reached in {_percent(1 - missed)} of resamples)" if 0 < missed < 1 else "")
    open_bound = stat["ci_high"] is None or stat["ci_high"] == float("inf")  # inf before the JSON's clean-up
    interval = (
        f"95% CI from {100 * stat['ci_low']:.0f}%"
        if open_bound
        else f"95% CI {100 * stat['ci_low']:.0f}-{100 * stat['ci_high']:.0f}%"
    )
    return f"{100 * stat['mean']:.0f}% of its cost ({interval}" + (
        f"; not reached in {_percent(missed)} of resamples)" if missed > 0 else ")"
    )


def frontier_rows(result: dict) -> list[dict]:
    """The frontier of a result run with costs, one row per router: AIQ (x100) and the cost shares at 100% / 95% of
    the best single model's accuracy, each with its 95% paired interval; [] without costs."""
    rows = []
    for name, e in (result.get("frontier") or {}).items():
        aiq = e["aiq"]
        rows.append(
            {
                "router": name,
                "AIQ x100": "-"
                if aiq["mean"] is None
                else f"{100 * aiq['mean']:.1f} [{100 * aiq['ci_low']:.1f}, {100 * aiq['ci_high']:.1f}]",
                "cost at best single's accuracy": _share(e["cost_share_at_best_single"]),
                "cost at 95% of it": _share(e["cost_share_at_95"]),
            }
        )
    return rows


def format_frontier(result: dict) -> str:
    """The frontier table of a result run with costs (``locus evaluate --models-file``); "" without costs."""
    rows = frontier_rows(result)
    if not rows:
        return ""
    costs, folds = result["settings"]["costs"], result["frontier_folds"]
    best = ", ".join(sorted({f["best_single"] for f in folds}))
    unpriced = ", ".join(
        sorted({f["most_accurate"] for f in folds if f.get("most_accurate", f["best_single"]) != f["best_single"]})
    )
    reference = (
        f"best single model {best} (the best on the anchors)"
        if not unpriced
        else f"best single model of known cost {best} (the most accurate on the anchors, {unpriced}, has no price: "
        "the verdict calls it and states its cost share as unknown)"
    )
    lines = [
        "Quality-cost frontier [all models, test queries, fold means; 95% paired bootstrap CI]: cost = "
        f"{costs['means']}; {costs['models_of_unknown_cost']} model(s) of unknown cost left out; {reference}; "
        "cost shares are of its cost fold by fold, read from the fold-mean hull (the plot's curve); "
        "AIQ: RouterBench's, cost range from the cheapest to the most expensive model"
    ]
    widths = {k: max(len(k), *(len(r[k]) for r in rows)) for k in rows[0]}
    lines.append("  ".join(f"{k:<{w}}" for k, w in widths.items()))
    lines += ["  ".join(f"{r[k]:<{w}}" for k, w in widths.items()) for r in rows]
    return "\n".join(lines)


def print_results(result: dict, file: Any = None) -> None:
    print(format_results(result), file=file or sys.stdout)


# ---------------------------------------------------------------------------------------------- long table

HEADLINE_METRICS = ("routing_acc", "correctness_acc", "auc", "brier")


def flatten_results(result: dict) -> pd.DataFrame:
    """The result as a long table: method, group, benchmark ('' = all), metric, mean, std. Paired comparisons
    become metrics too: ``vs_best_single.<key>`` and, for LOCUS minus another method,
    ``vs_<method>.<metric>.<diff|ci_low|ci_high>`` (std None); a result run with costs adds each router's
    ``frontier.<figure>.<mean|ci_low|ci_high>`` (group all)."""
    rows = []
    for method, groups in result["methods"].items():
        for group, entry in groups.items():
            for metric, stat in entry.items():
                if metric == "per_benchmark":
                    rows += [
                        dict(method=method, group=group, benchmark=bench, metric=m, mean=s["mean"], std=s["std"])
                        for bench, metrics in stat.items()
                        for m, s in metrics.items()
                    ]
                elif metric == "vs_best_single":
                    rows += [
                        dict(method=method, group=group, benchmark="", metric=f"vs_best_single.{k}", mean=v, std=None)
                        for k, v in stat.items()
                    ]
                elif metric == "vs_methods":
                    rows += [
                        dict(method=method, group=group, benchmark="", metric=f"vs_{other}.{m}.{k}", mean=v, std=None)
                        for other, metrics in stat.items()
                        for m, interval in metrics.items()
                        for k, v in interval.items()
                    ]
                else:
                    rows.append(
                        dict(
                            method=method, group=group, benchmark="", metric=metric, mean=stat["mean"], std=stat["std"]
                        )
                    )
    rows += [
        dict(method=method, group="all", benchmark="", metric=f"frontier.{figure}.{k}", mean=v, std=None)
        for method, figures in (result.get("frontier") or {}).items()
        for figure, stat in figures.items()
        for k, v in stat.items()
    ]
    return pd.DataFrame(rows)


def headline_markdown(flat: pd.DataFrame) -> str:
    """A flattened result's headline as a Markdown table: one row per (method, group), one column per metric of
    ``HEADLINE_METRICS`` (fold means, 4 significant digits)."""
    headline = flat[(flat["benchmark"] == "") & flat["metric"].isin(HEADLINE_METRICS)]
    table = headline.pivot_table(index=["method", "group"], columns="metric", values="mean").reset_index()
    return table.rename_axis(columns=None).to_markdown(index=False, floatfmt=".4g")
