"""bench_families' measures: tags from model names, and the clustering and tag scores against their floors."""

from __future__ import annotations

import numpy as np

from bench.bench_families import clustering_scores, tag, tag_scores


def test_tags_come_from_the_name_after_the_organisation():
    assert [
        tag(n)
        for n in ("org/WizardMath-7B", "x/deepseek-coder-6.7b", "NovoCode/Mistral-7B", "a/gsm8k-tune", "plain/llama")
    ] == ["math", "code", "other", "math", "other"]


def test_planted_families_score_far_above_the_shuffled_floor_and_tagged_clusters_find_their_own():
    rng = np.random.default_rng(0)
    centres = 4.0 * np.eye(6)[:3]
    view = np.concatenate([c + 0.3 * rng.normal(size=(20, 6)) for c in centres]) + 1.0  # away from the origin (cosine)
    names = [f"m{i}" for i in range(60)]
    arch = ["A"] * 20 + ["B"] * 20 + [""] * 5 + ["C"] * 15  # five unlabelled models are left out of the scores
    r = clustering_scores(view, names, arch, top={"A", "B", "C"}, seed=0)
    assert r["k"] == 3 and r["adjusted_rand"] > 0.9 and r["purity"] > 0.95 and r["top5_adjusted_rand"] > 0.9
    assert abs(r["floor_adjusted_rand"]) < 0.1 and r["floor_purity"] < r["purity"]
    tags = np.array(["math"] * 20 + ["code"] * 20 + ["other"] * 20)
    scores = tag_scores(view, tags)
    assert scores["math"]["nn_same_tag"] == 1.0 and scores["code"]["silhouette"] > 0.5
    assert scores["math"]["base_rate"] == 19 / 59
