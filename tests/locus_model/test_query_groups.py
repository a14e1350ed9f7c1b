"""Query groups, group profiles and the blend (locus_model.query_groups), and the trained router that carries them
(locus_model.router): hand-checked numbers, the blend's fit, the checkpoint round trip."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import torch

from locus_model.model import Locus, LocusConfig
from locus_model.query_groups import (
    SMOOTHING,
    Blend,
    QueryGroups,
    fit_blend,
    fit_groups,
    fit_query_groups,
    group_proba,
    group_profiles,
    group_rates,
)
from locus_model.router import Router, fit_router


def constant_locus() -> Locus:
    """A LOCUS on 8-d queries whose predictor says P(correct) = 0.5 for every pair: it knows nothing."""
    torch.manual_seed(0)
    model = Locus(LocusConfig(query_dim=8, d=16, n_blocks=1, n_latents=4, n_heads=2, predictor_hidden=8)).eval()
    with torch.no_grad():
        model.head.weight.zero_()
        model.head.bias.zero_()
    return model


def two_topics(n: int = 40, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """n queries in two well separated directions of 8-d space, labelled "maths" and "law"."""
    rng = np.random.default_rng(seed)
    labels = np.array(["maths", "law"] * (n // 2))
    centre = np.where(labels[:, None] == "maths", np.eye(8)[0], np.eye(8)[1]) * 3.0
    return (centre + 0.3 * rng.standard_normal((n, 8))).astype(np.float32), labels


def test_group_rates_are_smoothed_means_by_hand():
    scores = np.array([[1.0, 1.0, 0.0, np.nan]], np.float32)  # overall 2/3
    onehot = np.array([[1, 0], [1, 0], [0, 1], [0, 1]], np.float32)
    rates = group_rates(scores, onehot, smoothing=1.0)
    # group 0: (2 + 2/3) / (2 + 1) = 8/9; group 1: (0 + 2/3) / (1 + 1) = 1/3 (the NaN cell is not counted)
    np.testing.assert_allclose(rates, [[8 / 9, 1 / 3]], rtol=1e-6)


def test_fit_groups_and_fit_router_take_an_explicit_pseudo_count():
    enc, labels = two_topics(80)
    rng = np.random.default_rng(5)
    scores = (rng.uniform(size=(10, 80)) < 0.6).astype(np.float32)
    train, val = scores.copy(), scores.copy()
    train[:, 60:], val[:, :60] = np.nan, np.nan
    assert fit_groups(enc, train, val, labels).smoothing == SMOOTHING
    assert fit_groups(enc, train, val, labels, smoothing=3.0).smoothing == 3.0
    router, _ = fit_router(constant_locus(), enc, train, val, labels, smoothing=3.0)
    assert router.groups.smoothing == 3.0
    assert QueryGroups.from_dict(router.groups.to_dict()).smoothing == 3.0
    profiles = router.profiles(enc, train, labels)
    np.testing.assert_allclose(profiles, group_rates(train, router.groups.membership(enc, labels), 3.0), rtol=1e-6)


def test_the_classifier_predicts_each_topic_from_its_encoding_alone():
    enc, labels = two_topics()
    groups = fit_query_groups(enc, labels)
    assert groups.names == ("law", "maths") and groups.labelled
    member = groups.membership(enc)
    assert member.shape == (40, 2)
    np.testing.assert_allclose(member.sum(1), 1.0, rtol=1e-5)
    assert (np.array(groups.names)[member.argmax(1)] == labels).all()


def test_a_known_label_overrides_the_classifier_and_an_unknown_one_does_not():
    enc, labels = two_topics()
    groups = fit_query_groups(enc, labels)
    wrong = np.where(labels == "maths", "law", "maths")  # labels that contradict the encodings
    member = groups.membership(enc, wrong)
    assert (np.array(groups.names)[member.argmax(1)] == wrong).all() and set(np.unique(member)) == {0.0, 1.0}
    unread = groups.membership(enc, np.array([""] * 40))
    np.testing.assert_array_equal(unread, groups.membership(enc))


def test_without_labels_the_groups_are_clusters_and_no_label_is_read():
    enc, labels = two_topics()
    groups = fit_query_groups(enc, None)
    assert not groups.labelled and groups.names[0] == "cluster 0"
    member = groups.membership(enc)
    # the clusters split the two topics apart: every cluster holds one topic only
    for g in range(len(groups.names)):
        assert len(set(labels[member.argmax(1) == g])) <= 1


def test_a_specialist_wins_its_topic_through_the_group_table():
    enc, labels = two_topics()
    maths = labels == "maths"
    scores = np.stack([np.where(maths, 1.0, 0.0), np.where(maths, 0.0, 1.0), np.full(40, 0.6)]).astype(np.float32)
    groups = fit_query_groups(enc, labels)
    profiles = group_profiles(groups, enc, scores, labels)
    p = group_proba(profiles, groups.membership(enc))  # (3 models, 40 queries), labels not read at query time
    chosen = p.argmax(0)
    assert (chosen[maths] == 0).all() and (chosen[~maths] == 1).all()


def test_fit_blend_recovers_the_weights_of_a_logistic_truth():
    rng = np.random.default_rng(0)
    a, g = rng.normal(size=(50, 40)), rng.uniform(0.05, 0.95, size=(50, 40))
    logit_true = 0.5 * a + 1.5 * np.log(g / (1 - g)) - 0.2
    labels = (rng.uniform(size=a.shape) < 1 / (1 + np.exp(-logit_true))).astype(np.float32)
    blend = fit_blend(a, g, labels)
    assert blend.predictor == pytest.approx(0.5, abs=0.15) and blend.groups == pytest.approx(1.5, abs=0.2)
    assert fit_blend(a, g, np.full_like(labels, np.nan)) == Blend()  # no cells: the predictor alone


def test_the_blend_leans_on_the_source_that_predicts_validation():
    enc, labels = two_topics(80)
    maths = labels == "maths"
    rng = np.random.default_rng(1)
    truth = np.stack([np.where(maths, 0.9, 0.2), np.where(maths, 0.2, 0.9), np.full(80, 0.55)] * 4)  # (12, 80)
    scores = (rng.uniform(size=truth.shape) < truth).astype(np.float32)
    train, val = scores.copy(), scores.copy()
    train[:, 60:], val[:, :60] = np.nan, np.nan
    router, embeddings = fit_router(constant_locus(), enc, train, val, labels)
    assert embeddings.shape == (12, 16)
    assert router.blend.groups > 0.5 and abs(router.blend.predictor) < 0.1  # a constant predictor gets no weight
    assert "benchmarks" in router.describe()
    assert f"{router.groups.smoothing:.1f} pseudo-answers" in router.describe()


def test_the_router_round_trips_through_one_checkpoint_and_scores_a_pool(tmp_path):
    enc, labels = two_topics()
    router = Router(constant_locus(), groups=fit_query_groups(enc, labels), blend=Blend(0.7, 1.2, -0.1))
    router.save(tmp_path / "r.pt", encoder="x")
    back, extra = Router.load(tmp_path / "r.pt")
    assert extra["encoder"] == "x" and "router" not in extra
    assert back.blend == router.blend and back.groups.names == router.groups.names
    np.testing.assert_array_equal(back.groups.membership(enc), router.groups.membership(enc))
    scores = np.where(np.arange(40) < 20, 1.0, 0.0)[None].repeat(3, 0).astype(np.float32)
    z, profiles = back.pool_rows(enc, scores, labels)
    pool = pd.DataFrame({"model": ["a", "b", "c"], "embedding": list(z), "group_profile": list(profiles)})
    np.testing.assert_allclose(back.scorer(pool).proba(enc), router.proba(z, profiles, enc), rtol=1e-6)
    with pytest.raises(ValueError, match="re-embed the pool"):
        back.scorer(pool.assign(group_profile=[np.zeros(0, np.float32)] * 3))


def test_a_checkpoint_without_a_router_says_retrain(tmp_path):
    from locus_model.model import save_checkpoint

    save_checkpoint(tmp_path / "old.pt", constant_locus(), encoder="x")
    with pytest.raises(ValueError, match=r"retrain \(make demo"):
        Router.load(tmp_path / "old.pt")


def test_membership_refuses_encodings_of_another_width():
    enc, labels = two_topics()
    with pytest.raises(ValueError, match="encode the queries with the checkpoint's encoder"):
        fit_query_groups(enc, labels).membership(np.zeros((3, 5), np.float32))
