"""The replay's figures: every method's outcomes on a stream, their curves per window, the differences paired per
event (a block bootstrap over the events of every seed), the newcomer's share and the drift's shift, the line to
act on, as JSON, text and a plot."""

from __future__ import annotations

import math
from dataclasses import asdict, replace

import numpy as np

from locus_model.evaluation.stream_routing import JUDGE, METHODS, Stream, StreamConfig, route_stream


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


EVENT_BLOCK = 100  # events per bootstrap block: a router's state carries over a run of events, not over a block
MIN_SEEDS = 5  # fewer seeds: the figures carry a warning (one stream order and one training per seed)


def paired_over_events(a: list[np.ndarray], b: list[np.ndarray], n_boot: int, *, seed: int = 0) -> dict:
    """Mean of a - b over every event of every seed (a[i], b[i]: seed i's per-event outcomes, paired by event) and
    its 95% percentile interval from a block bootstrap over events: each seed's events cut into consecutive blocks of
    EVENT_BLOCK, the blocks of all seeds pooled and drawn with replacement (``n_boot`` times)."""
    sums, counts = [], []
    for x, y in zip(a, b):
        d = np.asarray(x, np.float64) - np.asarray(y, np.float64)
        cuts = np.arange(0, len(d), EVENT_BLOCK)
        sums.append(np.add.reduceat(d, cuts) if len(d) else np.zeros(0))
        counts.append(np.diff(np.append(cuts, len(d))))
    s, c = np.concatenate(sums), np.concatenate(counts).astype(np.float64)
    if c.sum() == 0:
        return {"mean": None, "ci_low": None, "ci_high": None, "events": 0, "blocks": 0}
    rng = np.random.default_rng(seed)
    draw = rng.integers(0, len(s), size=(n_boot, len(s)))  # (B, blocks)
    means = s[draw].sum(axis=1) / c[draw].sum(axis=1)
    lo, hi = np.quantile(means, [0.025, 0.975])
    return {
        "mean": float(s.sum() / c.sum()),
        "ci_low": float(lo),
        "ci_high": float(hi),
        "events": int(c.sum()),
        "blocks": len(s),
    }


def summarise(scenario: str, runs: list[dict], models: list[str], config: StreamConfig) -> dict:
    """The scenario's JSON: per method routing accuracy, its curve and regret (means over seeds), learning minus
    every other method paired per event (over the stream, and over its first 2,000 events; paired_over_events), the
    scenario's story in words and its extras."""
    acc = {m: [float(r["correct"][m].mean()) for r in runs] for m in METHODS}
    out: dict = {"methods": {}, "paired": {}, "paired_first_2000": {}}
    for m in METHODS:
        curves = np.mean([_curve(r["correct"][m], config.window) for r in runs], axis=0)
        out["methods"][m] = {
            "routing_acc": float(np.mean(acc[m])),
            "per_seed": acc[m],
            "curve": curves.tolist(),
            "regret": float(np.mean(acc["oracle"]) - np.mean(acc[m])),
        }
    mine = [r["correct"]["learning"] for r in runs]
    for m in METHODS:
        if m != "learning":
            other = [r["correct"][m] for r in runs]
            out["paired"][f"learning_minus_{m}"] = paired_over_events(mine, other, config.n_boot)
            out["paired_first_2000"][f"learning_minus_{m}"] = paired_over_events(
                [x[:2000] for x in mine], [x[:2000] for x in other], config.n_boot
            )
    info = runs[0]["info"]
    if scenario == "newcomer":
        out.update(_newcomer(runs, models, config))
    elif scenario == "drift":
        out.update(_drift(runs, models))
    elif scenario == "poisoned":
        clean = [float(r["unpoisoned"].mean()) for r in runs]
        out["unpoisoned_learning"] = {"routing_acc": float(np.mean(clean))}
        out["poison_effect"] = paired_over_events(mine, [r["unpoisoned"] for r in runs], config.n_boot)
        out["down"], out["up"] = models[info["down"]], models[info["up"]]
    elif scenario == "unlike":
        out["stream_benchmarks"] = [r["info"]["benchmarks"] for r in runs]
    out["story"] = story(scenario, out, info, models, config)
    change = info.get("at", info.get("join"))
    if change is not None:
        out["change_at"] = int(change)  # the event of the change (drift, newcomer): marked on the plot
    return out


def _newcomer(runs: list[dict], models: list[str], config: StreamConfig) -> dict:
    """newcomer_share_at_500: the newcomer's share (0-1) of the events 250-500 after it joined under learning, beside
    informed_share_at_500, the share LOCUS gives it on the same events when it knows the newcomer's column (its row
    from its training evaluations); the cost of learning it: that informed LOCUS's accuracy minus the learning
    router's over the 1,000 events after it joined, paired per event."""
    shares, informed_shares, learned, informed = [], [], [], []
    for r in runs:
        info, new, join = r["info"], r["info"]["model"], r["info"]["join"]
        win = slice(join + 250, join + 500)
        shares.append(float(np.mean(r["choices"]["learning"][win] == new)))
        informed_shares.append(float(np.mean(info["informed"][win] == new)))
        labels_win = slice(join, join + 1000)
        learned.append(r["correct"]["learning"][labels_win])
        informed.append(r["informed_correct"][labels_win])
    return {
        "newcomer": models[runs[0]["info"]["model"]],
        "newcomer_share_at_500": float(np.mean(shares)),
        "newcomer_share_at_500_per_seed": shares,
        "informed_share_at_500": float(np.mean(informed_shares)),
        "informed_share_at_500_per_seed": informed_shares,
        "exploration_cost_first_1000": paired_over_events(informed, learned, config.n_boot),
    }


def _drift(runs: list[dict], models: list[str]) -> dict:
    """events_to_shift: after the drift, the first event by which the degraded model's share of the last 100 events
    is within 5 points of what full knowledge of its new column gives it (the weakest model's share under frozen
    LOCUS: the degraded model answers as the weakest does); per seed (None: never within the stream) and the median
    over seeds with never counted as never (None when half the seeds or more never got there)."""
    steps = []
    for r in runs:
        info = r["info"]
        on = (r["choices"]["learning"][info["at"] :] == info["model"]).astype(float)
        rolling = np.convolve(on, np.ones(100) / 100, mode="valid")  # rolling[i]: events i .. i + 99 after the drift
        hit = np.flatnonzero(rolling <= info["informed_share"] + 0.05)
        steps.append(int(hit[0] + 100) if len(hit) else None)
    median = float(np.median([math.inf if s is None else s for s in steps]))
    return {
        "events_to_shift": None if math.isinf(median) else median,
        "events_to_shift_per_seed": steps,
        "seeds_shifted": sum(s is not None for s in steps),
        "degraded": models[runs[0]["info"]["model"]],
        "like": models[runs[0]["info"]["like"]],
    }


def story(scenario: str, summary: dict, info: dict, models: list[str], config: StreamConfig) -> str:
    """What happens in the scenario's stream, in words (the first seed's models: the scenario names the same ones on
    every seed but ``unlike``'s benchmarks)."""
    n = config.events
    if scenario == "stationary":
        return (
            f"a random {1 - config.train_fraction:.0%} of the queries streams ({n} events); LOCUS is trained on the "
            "rest; nothing changes"
        )
    if scenario == "unlike":
        return (
            f"LOCUS is trained on some benchmarks and the stream ({n} events) comes from the others "
            f"({', '.join(info['benchmarks'])} on the first seed): traffic unlike what the router saw"
        )
    if scenario == "newcomer":
        return (
            f"{summary['newcomer']}, with no evaluation (held out of training), joins at event {info['join']} "
            f"of {n}; learning gives it {summary['newcomer_share_at_500']:.0%} of the events 250-500 after it joined, "
            f"full knowledge of its answers {summary['informed_share_at_500']:.0%}"
        )
    if scenario == "drift":
        return (
            f"at event {info['at']} of {n}, {summary['degraded']} (the model frozen LOCUS routes most to) starts "
            f"answering like {summary['like']} (the weakest model); full knowledge would give it "
            f"{info['informed_share']:.0%} of the events after"
        )
    if scenario == "poisoned":
        return (
            f"a client grading {config.poison_share:.0%} of the {n} events reports 0 for every answer of "
            f"{summary['down']} and 1 for every answer of {summary['up']}; an honest judge grades the rest"
        )
    return str(info.get("story", ""))


def verdict(result: dict) -> dict:
    """The line to act on: learning pays on this data when, against frozen LOCUS, some scenario's paired interval
    is above 0 and none is below; it costs when one is below; else it does not pay."""
    rows = {s: r["paired"]["learning_minus_frozen"] for s, r in result["stream"].items()}
    rows = {s: d for s, d in rows.items() if d["mean"] is not None}
    above = [s for s, d in rows.items() if d["ci_low"] > 0]
    below = [s for s, d in rows.items() if d["ci_high"] < 0]
    figures = ", ".join(
        f"{s} {100 * d['mean']:+.1f} [{100 * d['ci_low']:+.1f}, {100 * d['ci_high']:+.1f}]" for s, d in rows.items()
    )
    if below:
        line = f"learning costs on this data: {figures} points over frozen: keep --learn off"
    elif above:
        line = f"learning pays on this data: {figures} points over frozen"
    else:
        line = f"learning does not pay on this data: {figures} points over frozen: keep --learn off"
    return {"pays": bool(above) and not below, "costs": bool(below), "line": line}


def warnings_of(result: dict) -> list[str]:
    """What the reader of the figures must know first (too few seeds)."""
    seeds = result["settings"]["seeds"]
    if seeds < MIN_SEEDS:
        return [
            f"only {seeds} seed(s): each seed is one training and one stream order; the intervals (over events) "
            f"do not see how much another training would change; give --stream-seeds {MIN_SEEDS} or more"
        ]
    return []


def format_stream(result: dict) -> str:
    """The replay as text: the line to act on first, any warning, then per scenario its story, each method's routing
    accuracy and regret and learning's paired differences (per event, block bootstrap over events)."""
    v = result.get("verdict") or verdict(result)
    lines = [v["line"], *(f"warning: {w}" for w in result.get("warnings", warnings_of(result)))]
    for scenario, r in result["stream"].items():
        lines.append(
            f"\nstream: {scenario} ({result['settings']['seeds']} seed(s), "
            f"{result['settings'].get('events', result['settings']['config']['events'])} events)"
        )
        if r.get("story"):
            lines.append(f"  {r['story']}")
        lines.append(f"  {'method':<18}{'routing acc':>12}{'regret':>9}   learning minus it [95% interval, events]")
        for m, val in r["methods"].items():
            d = r["paired"].get(f"learning_minus_{m}")
            diff = "" if d is None or d["mean"] is None else f"   {_points(d)}"
            lines.append(f"  {m:<18}{100 * val['routing_acc']:>11.2f}%{100 * val['regret']:>8.2f}{diff}")
        if "newcomer_share_at_500" in r:
            lines.append(
                f"  the newcomer's share of events 250-500 after it joined: {r['newcomer_share_at_500']:.2f} "
                f"(full knowledge {r['informed_share_at_500']:.2f}); per seed "
                f"{', '.join(f'{x:.2f}' for x in r['newcomer_share_at_500_per_seed'])}"
            )
        if "events_to_shift_per_seed" in r:
            per_seed = ", ".join("never" if x is None else str(x) for x in r["events_to_shift_per_seed"])
            median = "never" if r["events_to_shift"] is None else f"{r['events_to_shift']:.0f}"
            lines.append(f"  events to shift: median {median} (per seed {per_seed}; never = not within the stream)")
        if "poison_effect" in r:
            lines.append(f"  poisoned minus unpoisoned learning: {_points(r['poison_effect'])}")
    return "\n".join(lines)


def _points(d: dict) -> str:
    return f"{100 * d['mean']:+.2f} [{100 * d['ci_low']:+.2f}, {100 * d['ci_high']:+.2f}]"


STYLES = {  # every method visible where curves coincide (frozen under best_single): its own dash and marker
    "learning": ("-", "o", 2.4),
    "frozen": ("--", "s", 1.6),
    "thompson_group": ("-.", "^", 1.2),
    "thompson": (":", "v", 1.2),
    "best_single": ("-", "x", 1.0),
    "rule_full_labels": ((0, (5, 1, 1, 1)), "D", 1.0),
    "oracle": ((0, (1, 1)), ".", 1.0),
}


def plot_stream(result: dict, path) -> str:
    """Routing accuracy per ``window`` events, one line per method (each its own dash and hollow marker, set a little
    aside, learning on top), one panel per scenario, the event of the change marked; the PNG's path."""
    import matplotlib  # why: only with --plot

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # why: only with --plot

    scenarios = list(result["stream"])
    window = result["settings"]["config"]["window"]
    fig, axes = plt.subplots(1, len(scenarios), figsize=(4.8 * len(scenarios), 3.8), squeeze=False)
    for ax, scenario in zip(axes[0], scenarios):
        r = result["stream"][scenario]
        n = len(r["methods"])
        for i, (m, v) in enumerate(r["methods"].items()):
            # each method a little aside (1.5% of a window per place) and hollow markers: equal points stay visible
            x = window * (np.arange(len(v["curve"])) + 1 + 0.015 * (i - (n - 1) / 2))
            ls, marker, lw = STYLES.get(m, ("-", "o", 1.2))
            ax.plot(x, v["curve"], ls=ls, marker=marker, ms=5, mfc="none", lw=lw, label=m, zorder=10 - i)
        if r.get("change_at") is not None:
            ax.axvline(r["change_at"], color="grey", lw=1, ls=":")
            what = "drift" if scenario == "drift" else "joins"
            ax.annotate(what, (r["change_at"], 1.0), xycoords=("data", "axes fraction"), fontsize=7, va="top")
        ax.set_title(scenario)
        ax.set_xlabel(f"event (each point: the {window} events up to it)")
        ax.set_ylabel(f"routing accuracy over {window} events")
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


__all__ = ["format_stream", "paired_over_events", "plot_stream", "score_stream", "summarise", "verdict", "warnings_of"]
