"""The synthetic pool's query texts (locus_model.data.synthetic_text): distinct, and their benchmark recoverable
from the words."""

from __future__ import annotations

import re

import numpy as np

from locus_model.data.synthetic_skills import make_synthetic_tables


def test_query_texts_are_distinct_and_recover_their_benchmark() -> None:
    evaluations, _, truth = make_synthetic_tables("small", seed=0)
    queries = evaluations.drop_duplicates("query_id").set_index("query_id").loc[truth.query_ids]
    texts = queries["query"].tolist()
    assert len(set(texts)) == len(texts) and min(len(t) for t in texts) > 40
    # Bag-of-words nearest centroid, fit on train queries, scored on val + test queries.
    tokens = [re.findall(r"[a-z]+", t.lower()) for t in texts]
    vocab = {w: i for i, w in enumerate(sorted({w for ts in tokens for w in ts}))}
    x = np.zeros((len(texts), len(vocab)))  # (Q, V)
    for row, ts in enumerate(tokens):
        for w in ts:
            x[row, vocab[w]] += 1
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    labels, train = queries["benchmark"].to_numpy(), queries["split"].to_numpy() == "train"
    names = sorted(set(labels))
    centroids = np.stack([x[train & (labels == b)].mean(0) for b in names])  # (B, V)
    predicted = np.array(names)[np.argmax(x[~train] @ centroids.T, axis=1)]
    assert (predicted == labels[~train]).mean() > 0.9
