"""The replay's figures: every method's outcomes on a stream, their curves per window, the paired differences over
seeds, the newcomer's share and the drift's shift, as JSON, text and a plot."""

from __future__ import annotations

import math
from dataclasses import asdict, replace

import numpy as np

from locus_model.evaluation.stream_routing import JUDGE, METHODS, Stream, StreamConfig, route_stream
from locus_model.stats.bootstrap import paired_bootstrap


def score_stream(scenario: str, stream: Stream, info: dict, *, seed: int, config: StreamConfig) -> dict:
    """Every method's choices on one stream and the outcomes they got (true labels), plus the scenario's extras."""
    choices = {m: route_stream(stream, m, config=config, seed=seed * 1000 + i) for i, m in enumerate(METHODS)}
    t = np.arange(stream.labels.shape[1])
    out = {"correct": {m: stream.labels[c, t] for m, c in choices.items()}, "info": info, "choices": choices}
    if scenario == "poisoned":
        clean = replace(stream, reported=stream.labels, client=np.full(len(t), JUDGE, dtype=object))
        c = route_stream(clean, "learning", config=config, seed=seed * 1000)
        out["unpoisoned"] = stream.labels[c, t]
    if scenario == "newcomer":
        out["informed_correct"] = stream.labels[info["informed"], t]
    return out


def _curve(x: np.ndarray, window: int) -> list[float]:
    return [float(np.mean(x[i : i + window])) for i in range(0, len(x), window)]


def _paired(a: list[float], b: list[float], n_boot: int) -> dict:
    d = paired_bootstrap(np.asarray(a), np.asarray(b), n_boot=n_boot, seed=0)
    return {"mean": d["diff"], "ci_low": d["ci_low"], "ci_high": d["ci_high"]}


def summarise(scenario: str, runs: list[dict], models: list[str], config: StreamConfig) -> dict:
    """The scenario's JSON: per method routing accuracy, its curve and regret (means over seeds), and learning minus
    every other method paired over seeds (over the stream, and over its first 2,000 events)."""
    acc = {m: [float(r["correct"][m].mean()) for r in runs] for m in METHODS}
    head = {m: [float(r["correct"][m][:2000].mean()) for r in runs] for m in METHODS}
    out: dict = {"methods": {}, "paired": {}, "paired_first_2000": {}}
    for m in METHODS:
        curves = np.mean([_curve(r["correct"][m], config.window) for r in runs], axis=0)
        out["methods"][m] = {
            "routing_acc": float(np.mean(acc[m])),
            "per_seed": acc[m],
            "curve": curves.tolist(),
            "regret": float(np.mean(acc["oracle"]) - np.mean(acc[m])),
        }
    for m in METHODS:
        if m != "learning":
            out["paired"][f"learning_minus_{m}"] = _paired(acc["learning"], acc[m], config.n_boot)
            out["paired_first_2000"][f"learning_minus_{m}"] = _paired(head["learning"], head[m], config.n_boot)
    info = runs[0]["info"]
    if scenario == "newcomer":
        out.update(_newcomer(runs, models, config))
    elif scenario == "drift":
        out.update(_drift(runs, models))
    elif scenario == "poisoned":
        clean = [float(r["unpoisoned"].mean()) for r in runs]
        out["unpoisoned_learning"] = {"routing_acc": float(np.mean(clean))}
        out["poison_effect"] = _paired(acc["learning"], clean, config.n_boot)
        out["down"], out["up"] = models[info["down"]], models[info["up"]]
    elif scenario == "unlike":
        out["stream_benchmarks"] = [r["info"]["benchmarks"] for r in runs]
    return out


def _newcomer(runs: list[dict], models: list[str], config: StreamConfig) -> dict:
    """traffic_share_at_500: the newcomer's share of the events 250-500 after it joined, over the share LOCUS gives it
    on the same events when it knows the newcomer's column (its row from its training evaluations); the cost of
    learning it: that informed LOCUS's accuracy minus the learning router's over the 1,000 events after it joined."""
    shares, informed_shares, learned, informed = [], [], [], []
    for r in runs:
        info, new, join = r["info"], r["info"]["model"], r["info"]["join"]
        win = slice(join + 250, join + 500)
        mine = float(np.mean(r["choices"]["learning"][win] == new))
        full = float(np.mean(info["informed"][win] == new))
        shares.append(mine / full if full > 0 else None)
        informed_shares.append(full)
        labels_win = slice(join, join + 1000)
        learned.append(float(r["correct"]["learning"][labels_win].mean()))
        informed.append(float(r["informed_correct"][labels_win].mean()))
    valid = [s for s in shares if s is not None]
    return {
        "newcomer": models[runs[0]["info"]["model"]],
        "traffic_share_at_500": float(np.mean(valid)) if valid else None,
        "traffic_share_at_500_per_seed": shares,
        "informed_share_at_500": informed_shares,
        "exploration_cost_first_1000": _paired(informed, learned, config.n_boot),
    }


def _drift(runs: list[dict], models: list[str]) -> dict:
    """events_to_shift: after the drift, the first event by which the degraded model's share of the last 100 events
    is within 5 points of what full knowledge of its new column gives it (the weakest model's share under frozen
    LOCUS: the degraded model answers as the weakest does); the mean over seeds that got there."""
    steps = []
    for r in runs:
        info = r["info"]
        on = (r["choices"]["learning"][info["at"] :] == info["model"]).astype(float)
        rolling = np.convolve(on, np.ones(100) / 100, mode="valid")  # rolling[i]: events i .. i + 99 after the drift
        hit = np.flatnonzero(rolling <= info["informed_share"] + 0.05)
        steps.append(int(hit[0] + 100) if len(hit) else None)
    got = [s for s in steps if s is not None]
    return {
        "events_to_shift": float(np.mean(got)) if got else None,
        "events_to_shift_per_seed": steps,
        "degraded": models[runs[0]["info"]["model"]],
        "like": models[runs[0]["info"]["like"]],
    }


def format_stream(result: dict) -> str:
    """The replay as a table: per scenario, each method's routing accuracy and regret, learning's paired differences."""
    lines = []
    for scenario, r in result["stream"].items():
        lines.append(
            f"\nstream: {scenario} ({result['settings']['seeds']} seed(s), "
            f"{result['settings']['config']['events']} events)"
        )
        lines.append(f"  {'method':<18}{'routing acc':>12}{'regret':>9}   learning minus it [95% interval]")
        for m, v in r["methods"].items():
            d = r["paired"].get(f"learning_minus_{m}")
            diff = (
                "" if d is None else f"   {100 * d['mean']:+.2f} [{100 * d['ci_low']:+.2f}, {100 * d['ci_high']:+.2f}]"
            )
            lines.append(f"  {m:<18}{100 * v['routing_acc']:>11.2f}%{100 * v['regret']:>8.2f}{diff}")
        for key in ("traffic_share_at_500", "events_to_shift"):
            if key in r:
                lines.append(f"  {key}: {r[key] if r[key] is None else round(r[key], 3)}")
        if "poison_effect" in r:
            e = r["poison_effect"]
            lines.append(
                f"  poisoned minus unpoisoned learning: {100 * e['mean']:+.2f} [{100 * e['ci_low']:+.2f}, "
                f"{100 * e['ci_high']:+.2f}]"
            )
    return "\n".join(lines)


def plot_stream(result: dict, path) -> str:
    """Routing accuracy per ``window`` events, one line per method, one panel per scenario; the PNG's path."""
    import matplotlib  # why: only with --plot

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # why: only with --plot

    scenarios = list(result["stream"])
    window = result["settings"]["config"]["window"]
    fig, axes = plt.subplots(1, len(scenarios), figsize=(4.5 * len(scenarios), 3.6), squeeze=False)
    for ax, scenario in zip(axes[0], scenarios):
        for m, v in result["stream"][scenario]["methods"].items():
            x = window * (np.arange(len(v["curve"])) + 1)
            ax.plot(
                x,
                v["curve"],
                marker="o",
                ms=3,
                label=m,
                lw=2.2 if m == "learning" else 1.2,
                ls="--" if m in ("oracle", "rule_full_labels") else "-",
            )
        ax.set_title(scenario)
        ax.set_xlabel(f"events (per {window})")
        ax.set_ylabel("routing accuracy")
        ax.grid(alpha=0.3)
    axes[0][-1].legend(fontsize=7, loc="best")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return str(path)


def _config_dict(config: StreamConfig) -> dict:
    d = asdict(config)
    d["learning"] = {k: (None if isinstance(v, float) and math.isinf(v) else v) for k, v in d["learning"].items()}
    return d


__all__ = ["format_stream", "plot_stream", "score_stream", "summarise"]
