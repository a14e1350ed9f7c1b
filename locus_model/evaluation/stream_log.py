"""The replay of a real log: graded answers replayed in the order they were graded (`locus evaluate --stream-log`).

The log (locus_model.data.stream_log) is cut at a time, ``start``: LOCUS is trained on the answers graded before it
(a model answering a query more than once there: the mean of its scores), and every request from ``start`` on (the
answers sharing a query and a time) is one event of the stream, in the log's order. Each model's outcome on an event
is its graded answer there, so a name that changed behaviour after ``start`` answers as it then did. An event that
does not grade every model of the stream is left out (the methods and the oracle compare every model's outcome; the
count is reported). A model first graded after ``start`` joins as a newcomer does in the ``newcomer`` scenario: the
pool's mean row and its two-answer prior. The methods, the scoring and the figures are the replay's
(locus_model.evaluation.stream).
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np
import pandas as pd

from locus_model.data.stream_log import read_stream_log
from locus_model.evaluation.results import json_clean
from locus_model.evaluation.stream import (
    Trained,
    report,
    stream_config,
    stream_margin,
    train_once,
    trainings_of,
    with_verdict,
)
from locus_model.evaluation.stream_report import _config_dict, score_stream, summarise
from locus_model.evaluation.stream_routing import JUDGE, Stream, StreamConfig, guarded_argmax
from locus_model.learning import pool_prior, prior_variance
from locus_model.model_config import LocusConfig

SCENARIO = "log"


@dataclass(frozen=True)
class LogSplit:
    """A log cut at ``start``: what LOCUS trains on and the stream's events."""

    models: list[str]  # (M,) every model of the log
    query_ids: list[str]  # (Q,) every query of the log, the encodings' order
    texts: list[str]  # (Q,) their texts
    benchmarks: np.ndarray  # (Q,) str
    train_scores: np.ndarray  # (M, Q) the mean score of each model's answers before start, NaN where none
    event_query: np.ndarray  # (T,) each event's query (index into query_ids)
    event_labels: np.ndarray  # (S, T) each stream model's graded answer on each event
    stream_models: np.ndarray  # (S,) the models graded after start (indices into models)
    start: float
    left_out: int  # events from start on that did not grade every stream model
    answers_before: int  # graded answers LOCUS trains on


def split_log(table: pd.DataFrame, *, start: float | None = None, train_fraction: float = 0.5) -> LogSplit:
    """The log (read_stream_log's table, in time order) cut at ``start`` (None: the time of the answer at
    ``train_fraction`` of the log's rows)."""
    times = table["time"].to_numpy(np.float64)
    if start is None:
        start = float(times[min(len(times) - 1, int(train_fraction * len(times)))])
    before, after = table[times < start], table[times >= start]
    if before.empty or after.empty:
        raise ValueError(
            f"the log's start {start:g} leaves {len(before)} graded answers to train on and {len(after)} to "
            f"replay (the log runs from {times.min():g} to {times.max():g}). How to fix: give --stream-log-start "
            "a time inside the log, with answers on both sides"
        )
    models = sorted(table["model"].unique().astype(str))
    queries = table.drop_duplicates("query_id").sort_values("query_id", kind="stable")
    query_ids = queries["query_id"].astype(str).tolist()
    m_index, q_index = pd.Index(models), pd.Index(query_ids)
    mean = before.groupby(["model", "query_id"], sort=False)["score"].mean()
    train_scores = np.full((len(models), len(query_ids)), np.nan, np.float32)
    train_scores[
        m_index.get_indexer(mean.index.get_level_values(0)), q_index.get_indexer(mean.index.get_level_values(1))
    ] = mean.to_numpy(np.float32)
    stream_models = np.sort(m_index.get_indexer(after["model"].unique()))
    events = after.groupby(["time", "query_id"], sort=False).ngroup().to_numpy()  # in time order (the table's)
    n_events = int(events.max()) + 1
    labels = np.full((len(stream_models), n_events), np.nan)
    s_index = pd.Index(stream_models)
    labels[s_index.get_indexer(m_index.get_indexer(after["model"])), events] = after["score"].to_numpy(np.float64)
    event_query = np.zeros(n_events, np.int64)
    event_query[events] = q_index.get_indexer(after["query_id"])
    complete = ~np.isnan(labels).any(axis=0)
    if not complete.any():
        raise ValueError(
            f"no event from the log's start {start:g} on grades all {len(stream_models)} models graded after it "
            "(an event: the answers sharing a query and a time). How to fix: log every candidate's graded answer "
            "to a request under the request's time"
        )
    return LogSplit(
        models=models,
        query_ids=query_ids,
        texts=queries["query"].astype(str).tolist(),
        benchmarks=queries["benchmark"].to_numpy(str),
        train_scores=train_scores,
        event_query=event_query[complete],
        event_labels=labels[:, complete],
        stream_models=stream_models,
        start=float(start),
        left_out=int((~complete).sum()),
        answers_before=len(before),
    )


def log_stream(split: LogSplit, trained: Trained, *, seed: int, config: StreamConfig) -> tuple[Stream, dict]:
    """The stream of one seed (the log's events; the reveal and delay draws by seed) and its ``info``."""
    method, rows = trained.method, trained.trained_models
    scorer, router, encodings = method.scorer, method.router, method.encodings
    if scorer is None or router is None or encodings is None:
        raise ValueError("log_stream: the LOCUS method is not fitted (no scorer, router or encodings): fit it first")
    order = np.full(len(split.models), -1, np.int64)
    order[rows] = np.arange(len(rows))
    new = np.array([s for s in split.stream_models if order[s] < 0], np.int64)  # first graded after start
    if len(new):  # the pool's prior, as locus serve's snapshot makes it for a model with no evaluations
        emb, prof = pool_prior(scorer.profiles, scorer.embeddings, np.ones(len(rows), bool))
        scorer = scorer.extended(np.repeat(emb[None], len(new), 0), np.repeat(prof[None], len(new), 0))
        order[new] = np.arange(len(rows), len(rows) + len(new))
    s_order = order[split.stream_models]
    n = split.event_labels.shape[1]
    enc = encodings[split.event_query]
    p = scorer.proba(enc, s_order).astype(np.float64)  # (S, T)
    margin = stream_margin(config, router, enc)
    profiles = scorer.profiles[s_order].astype(np.float64)
    n_evaluations = (~np.isnan(split.train_scores[split.stream_models])).sum(axis=1)  # answers before the cut
    prior_var = prior_variance(profiles, n_evaluations, router.groups.shares(), router_var=config.learning.prior_var)
    train_acc = _mean_before(split)
    known = np.flatnonzero(order[split.stream_models] < len(rows))
    best_single = int(known[np.argmax(train_acc[split.stream_models[known]])]) if len(known) else 0
    bench_names, bench = np.unique(split.benchmarks[split.event_query], return_inverse=True)
    rng = np.random.default_rng([seed, 68])
    revealed = np.asarray(rng.random(n) < config.feedback)
    late = rng.random(n) < config.delayed
    stream = Stream(
        p=p,
        group=np.argmax(router.groups.membership(enc), axis=1),
        bench=bench,
        labels=split.event_labels.copy(),
        reported=split.event_labels.copy(),
        client=np.full(n, JUDGE, dtype=object),
        available=np.ones(p.shape, bool),
        revealed=revealed,
        arrives=np.arange(n) + 1 + np.where(late, config.delay, 0),
        standing=scorer.standing[s_order],
        profiles=profiles,
        shares=router.groups.shares(),
        margin=margin,
        best_single=best_single,
        prior_var=prior_var,
    )
    frozen = guarded_argmax(p, stream.standing, margin, stream.available)
    return stream, {"benchmarks": [str(b) for b in bench_names], "frozen_share": np.bincount(frozen, minlength=len(p))}


def _mean_before(split: LogSplit) -> np.ndarray:
    """(M,) each model's mean score on the answers before the cut (NaN: none, a newcomer)."""
    seen = ~np.isnan(split.train_scores)
    total = np.where(seen, split.train_scores, 0.0).sum(axis=1)
    return np.where(seen.any(axis=1), total / np.maximum(seen.sum(axis=1), 1), np.nan)


def log_story(split: LogSplit, names: list[str]) -> str:
    """The log in words: its size, the cut, and the names whose accuracy moved most from before the cut to after."""
    before = _mean_before(split)[split.stream_models]
    after = np.nanmean(split.event_labels, axis=1)
    moved = sorted(
        ((after[i] - before[i], names[i]) for i in range(len(names)) if not np.isnan(before[i])), key=lambda x: x[0]
    )
    change = ""
    if moved and abs(moved[0][0]) >= 0.05:
        d, name = moved[0]
        change = (
            f"; {name} answers {100 * abs(d):.0f} points {'worse' if d < 0 else 'better'} after the cut than before"
        )
    joined = [names[i] for i in range(len(names)) if np.isnan(before[i])]
    join = f"; first graded after the cut (newcomers): {', '.join(joined)}" if joined else ""
    return (
        f"a log of {len(split.models)} models: LOCUS trained on the {split.answers_before} answers graded before "
        f"time {split.start:g}, then {split.event_labels.shape[1]} events replayed in the log's order"
        f" ({split.left_out} left out: not every model graded){change}{join}"
    )


def replay_log(
    split: LogSplit,
    encodings: np.ndarray,
    *,
    seeds: int = 5,
    first_seed: int = 0,
    config: StreamConfig | None = None,
    train_config: Any = None,
    model_config: Any = None,
    progress: bool = True,
) -> dict:
    """The log replayed over ``seeds`` seeds (a training and the reveal draws per seed; the events as logged): the
    JSON-ready ``{"verdict", "warnings", "settings", "stream": {"log": ...}}`` of the replay."""
    config = config or StreamConfig()
    log = (lambda s: print(s, file=sys.stderr, flush=True)) if progress else (lambda s: None)
    start = time.perf_counter()
    trained_rows = np.flatnonzero(~np.isnan(split.train_scores).all(axis=1))
    train_q = np.flatnonzero(~np.isnan(split.train_scores).all(axis=0))
    if len(trained_rows) < 2 or len(train_q) < 2:
        raise ValueError(
            f"the log before its start {split.start:g} grades {len(trained_rows)} model(s) on {len(train_q)} "
            "query(ies): LOCUS needs 2 or more of each to train. How to fix: start the replay later "
            "(--stream-log-start)"
        )
    names = [split.models[i] for i in split.stream_models]
    runs = []
    log(f"the replay trains LOCUS {trainings_of([SCENARIO], seeds)} time(s) ({seeds} seed(s)), one at a time")
    for seed in range(first_seed, first_seed + seeds):
        t0 = time.perf_counter()
        method, fitted_scores = train_once(
            split.train_scores,
            encodings,
            split.benchmarks,
            train_q,
            trained_rows,
            seed=seed,
            config=config,
            train_config=train_config,
            model_config=model_config,
        )
        trained = Trained(method, train_q, np.zeros(0, np.int64), trained_rows, fitted_scores)
        stream, info = log_stream(split, trained, seed=seed, config=config)
        info["story"] = log_story(split, names)
        runs.append(score_stream(SCENARIO, stream, info, seed=seed, config=config))
        log(f"seed {seed}: trained and replayed {stream.labels.shape[1]} events in {time.perf_counter() - t0:.0f} s")
    result = {
        "settings": {
            "seeds": seeds,
            "first_seed": first_seed,
            "scenarios": [SCENARIO],
            "models": names,
            "queries": len(split.query_ids),
            "config": _config_dict(config),
            "start": split.start,
            "events_left_out": split.left_out,
            "trainings": seeds,
            "events": int(split.event_labels.shape[1]),
        },
        "wall_s": round(time.perf_counter() - start, 1),
        "stream": {SCENARIO: summarise(SCENARIO, runs, names, config)},
    }
    return json_clean(with_verdict(result))


def run_log_replay(args, encode: Callable[[list[str]], np.ndarray], train_config, progress: bool) -> dict:
    """What `locus evaluate --stream-log FILE` does: the log read and validated, cut at ``--stream-log-start``, its
    queries encoded (``encode``: texts -> (Q, D)), replayed, saved, printed (and plotted with --plot)."""
    config = stream_config(args)
    table = read_stream_log(args.stream_log)
    split = split_log(table, start=args.stream_log_start, train_fraction=config.train_fraction)
    if progress:
        print(
            f"{len(table)} graded answers of {len(split.models)} models from {args.stream_log}; LOCUS trains on the "
            f"{split.answers_before} before time {split.start:g}, {split.event_labels.shape[1]} events replayed"
            + (f" ({split.left_out} left out: not every model graded)" if split.left_out else ""),
            file=sys.stderr,
        )
    encodings = encode(split.texts)
    result = replay_log(
        split,
        encodings,
        seeds=args.stream_seeds,
        config=config,
        train_config=train_config,
        model_config=LocusConfig(query_dim=encodings.shape[1]),
        progress=progress,
    )
    result["settings"].update({"stream_log": str(args.stream_log), "encoder": args.encoder})
    return report(result, args)


__all__ = ["LogSplit", "log_stream", "replay_log", "run_log_replay", "split_log"]
