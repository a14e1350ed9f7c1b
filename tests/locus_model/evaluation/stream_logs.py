"""A small log of graded answers in time order (the stream-log tests of the reader, the replay and the CLI)."""

import numpy as np
import pandas as pd


def graded_log(n_queries: int = 60, seed: int = 0) -> pd.DataFrame:
    """3 models answer every query once before time 1000 and once after; m0 is right on benchmark a before the cut
    and wrong on everything after it (a redeploy behind its name)."""
    rng = np.random.default_rng(seed)
    rows = []
    for when, offset in (("before", 0), ("after", 1000)):
        for q in range(n_queries):
            bench = "a" if q % 2 else "b"
            for m, rate in (("m0", {"a": 0.9, "b": 0.3}), ("m1", {"a": 0.5, "b": 0.7}), ("m2", {"a": 0.4, "b": 0.4})):
                right = rng.random() < rate[bench]
                if m == "m0" and when == "after":
                    right = False
                rows.append(
                    {
                        "model": m,
                        "query_id": f"q{q}",
                        "query": f"question {q} about {bench}",
                        "benchmark": bench,
                        "score": float(right),
                        "time": offset + q,
                    }
                )
    return pd.DataFrame(rows)
