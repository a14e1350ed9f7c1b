"""A tiny LOCUS_HOME for the router's tests and bench: a random (untrained) checkpoint and a pool embedded with it.

No training and no Dagster run: the checkpoint is a freshly initialised Locus saved with its encoder's name, the
pool comes from locus_model.pool.embed_models on random evaluations, and both are stored where LocusHome looks.
"""

from __future__ import annotations

import socket
import threading
import time
from pathlib import Path
from typing import Sequence

import numpy as np
import pandas as pd
import torch

from locus_model.data.encoders import resolve_encoder, resolve_runtime
from locus_model.data.encoding import encode_queries
from locus_model.model import Locus, LocusConfig
from locus_model.pool import embed_models, upsert_rows
from locus_pipeline.storage import LocusHome, checkpoint_id, write_parquet_atomic
from tests.locus_model.tiny_locus import one_group_router

TOPICS = ("algebra", "biology", "chemistry", "history", "law", "physics", "economics", "philosophy")


def queries(n: int, *, seed: int = 0) -> list[str]:
    rng = np.random.default_rng(seed)
    return [
        f"question {i} about {TOPICS[i % len(TOPICS)]}: what is {rng.integers(1000)} plus {rng.integers(1000)}?"
        for i in range(n)
    ]


def save_random_checkpoint(
    home: LocusHome, *, encoder: str, seed: int, full_size: bool = False, runtime: str | None = None
) -> tuple[Locus, str]:
    """A random Locus for ``encoder`` at checkpoints/locus-<id>.pt (tiny, or the default LocusConfig's size with
    ``full_size``), recording the encoder runtime (default: the library's); returns (model, checkpoint id)."""
    torch.manual_seed(seed)
    dim = resolve_encoder(encoder).dim
    config = (
        LocusConfig(query_dim=dim)
        if full_size
        else LocusConfig(query_dim=dim, d=16, n_blocks=1, n_latents=4, n_heads=2, predictor_hidden=8)
    )
    model = Locus(config).eval()
    tmp = home.dir("checkpoints") / f".tmp-{seed}.pt"
    one_group_router(model).save(tmp, encoder=encoder, encoder_runtime=resolve_runtime(encoder, runtime))
    cid = checkpoint_id(tmp)
    tmp.rename(home.checkpoint_file(cid))
    return model, cid


def evaluations(names: Sequence[str], texts: Sequence[str], *, seed: int) -> pd.DataFrame:
    """Random 0/1 scores, each model with its own accuracy."""
    rng = np.random.default_rng(seed)
    rows = []
    for m, name in enumerate(names):
        acc = 0.2 + 0.6 * rng.random()
        for q, text in enumerate(texts):
            rows.append((name, f"q{q}", text, float(rng.random() < acc)))
    return pd.DataFrame(rows, columns=["model", "query_id", "query", "score"])


def embed(
    model: Locus,
    cid: str,
    names: Sequence[str],
    *,
    encoder: str,
    source: str,
    seed: int,
    n_queries: int = 40,
    cache_dir: Path | None = None,
    runtime: str | None = None,
) -> pd.DataFrame:
    texts = queries(n_queries, seed=seed)
    table = evaluations(names, texts, seed=seed)
    vectors = encode_queries(texts, encoder=encoder, runtime=runtime, cache_dir=cache_dir, progress=False)
    enc = pd.DataFrame({"query_id": [f"q{q}" for q in range(len(texts))], "encoding": list(vectors)})
    return embed_models(one_group_router(model), table, enc, checkpoint=cid, source=source)


def build_home(
    root: Path,
    names: Sequence[str],
    *,
    encoder: str = "hashing-256",
    seed: int = 0,
    n_queries: int = 40,
    full_size: bool = False,
    runtime: str | None = None,
) -> dict:
    """A home with a checkpoint, warehouse/locus_checkpoint.parquet and a pool of ``names`` (encoded with
    ``runtime``, default the library's, which the checkpoint records)."""
    home = LocusHome(root=str(root))
    model, cid = save_random_checkpoint(home, encoder=encoder, seed=seed, full_size=full_size, runtime=runtime)
    home.write_table(
        "locus_checkpoint",
        pd.DataFrame(
            {"checkpoint_id": [cid], "path": [home.relative(home.checkpoint_file(cid))], "encoder": [encoder]}
        ),
    )
    pool = embed(
        model,
        cid,
        names,
        encoder=encoder,
        source="training",
        seed=seed,
        n_queries=n_queries,
        cache_dir=home.encoding_cache(encoder),
        runtime=runtime,
    )
    write_parquet_atomic(pool, home.pool_path)
    return {"home": home, "model": model, "checkpoint_id": cid, "pool": pool, "encoder": encoder}


def onboard(built: dict, name: str, *, seed: int = 99) -> pd.DataFrame:
    """Add one model to the pool, as an onboarding run does: one more row, the file replaced atomically."""
    home = built["home"]
    rows = embed(
        built["model"],
        built["checkpoint_id"],
        [name],
        encoder=built["encoder"],
        source="onboarded",
        seed=seed,
        cache_dir=home.encoding_cache(built["encoder"]),
    )
    pool = upsert_rows(home.read_pool(), rows)
    write_parquet_atomic(pool, home.pool_path)
    return pool


class ServerThread:
    """A uvicorn server for ``app`` on 127.0.0.1 (a free port) in a background thread; a context manager."""

    def __init__(self, app) -> None:
        import uvicorn

        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self.server = uvicorn.Server(
            uvicorn.Config(app, log_level="warning", timeout_graceful_shutdown=1, lifespan="on")
        )
        self.thread = threading.Thread(target=self.server.run, kwargs={"sockets": [self.sock]}, daemon=True)

    def __enter__(self) -> "ServerThread":
        self.thread.start()
        deadline = time.monotonic() + 60
        while not self.server.started:
            if not self.thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError("the test server did not start")
            time.sleep(0.02)
        return self

    def __exit__(self, *exc) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=10)
        self.sock.close()
