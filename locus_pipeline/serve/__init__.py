"""`locus serve`: a gateway routing over LOCUS_HOME's pool by the trained router, in front of OpenAI-compatible
endpoints.

    POST /route                 {query, candidates?, max_cost?, max_params?, quality_weight?} -> ranking, chosen,
                                fallback chain
    POST /v1/chat/completions   model "locus" | "locus:<quality_weight>" | a pool model: route the last user message
                                (among "locus": {candidates?, max_cost?, max_params?}), forward to the chosen model's
                                upstream (fallback chain on error / timeout)
    GET  /v1/models             "locus" and every pool model (routable: in the served set, with an upstream)
    POST /v1/outcomes           {request_id, score, source?} or a list: grade an answer (its x-locus-request-id);
                                the router learns from it (learning.py, docs/serve.md "Learning from outcomes")
    GET  /metrics               Prometheus text;  GET /healthz

How a query is routed: its text is encoded with the sentence encoder of the pool's checkpoint and the runtime
its training encodings came from (``--encoder-runtime`` overrides; locus_model.data.encoding, loaded once per
process; encodings kept in an in-process LRU keyed by encoder, runtime and text), the correctness predictor gives
P(correct) for every candidate (locus_model.infer.predict_proba) and locus_model.routing ranks them by
quality_weight * P - (1 - quality_weight) * cost / max cost, under the request's caps (cost, parameters). The
candidate set is the pool, or with ``--portfolio k-center-15`` a portfolio of the portfolios table. Concurrent
queries are encoded together: a micro-batching queue feeds the scorer's own thread, which takes what is waiting when it
is free (up to ``max_batch``; a query alone at once, a batch others are joining within ``batch_wait_ms`` of its first),
and encodes and scores them in one call. A query the encoder refuses (text that is not valid Unicode) fails alone with
a 400; the others of its batch are answered.

Hot reload: a background task polls the pool file's (mtime, size, inode) every ``poll_seconds`` (and the portfolios
table's, when a portfolio is served); on a change it loads the new pool and its checkpoint off the event loop and
swaps one immutable :class:`Snapshot`. A request keeps the snapshot it started with, so a reload never mixes two
pools in one decision. The models config is read once.

Storage goes through LocusHome only (the pool, its checkpoint, the model catalog's costs, the portfolios table).

    config.py    ServeConfig; the models config (per pool model its upstream and cost)
    snapshot.py  the pool being served, swapped whole on a reload;  portfolio.py  a portfolio as the candidate set
    scorer.py    P(correct) of every pool model for a query, micro-batched on the scorer's thread
    gateway.py   the served state (snapshot, scorer, metrics) and its decisions (locus_model.routing.route)
    chat.py      the OpenAI-compatible endpoint: model names, the routed text, forwarding down the fallback chain
    upstream.py  one upstream call: failures that fall back, what is read bounded, credentials scrubbed, event
                 streams rewritten;  cooldown.py  failing upstreams skipped for a while (docs/serve.md)
    http.py      OpenAI-style errors, the body limit;  metrics.py  Prometheus metrics
    learning.py  request ids, the outcomes, the online learner (locus_model.learning) and budgeted exploration; the
                 decision and outcome logs through LocusHome (storage/traffic.py)
    app.py       the FastAPI app and `serve`
"""

from locus_pipeline.serve.app import create_app, serve
from locus_pipeline.serve.config import ConfigError, ModelsConfig, ServeConfig, Upstream, read_models_config
from locus_pipeline.serve.snapshot import Snapshot, load_snapshot

__all__ = [
    "ServeConfig",
    "ModelsConfig",
    "Upstream",
    "read_models_config",
    "load_snapshot",
    "Snapshot",
    "create_app",
    "serve",
    "ConfigError",
]
