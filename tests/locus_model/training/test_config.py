"""TrainConfig: its checks and the schedule it sets (noise annealing, epochs within a step budget)."""

import pytest

from locus_model.training import TrainConfig
from locus_model.training.config import epochs_to_run, noise_ratio


def test_noise_schedule_is_a_cosine_from_start_to_end():
    cfg = TrainConfig(noise_start=0.4, noise_end=0.1, noise_anneal_epochs=10)
    assert noise_ratio(0, cfg) == pytest.approx(0.4)
    assert noise_ratio(5, cfg) == pytest.approx(0.25)
    assert noise_ratio(10, cfg) == noise_ratio(99, cfg) == pytest.approx(0.1)


def test_latent_config_is_checked():
    assert TrainConfig(latent_noise=2).latent_noise == (2.0,)
    assert TrainConfig().latent_steps > 0  # the defaults
    for bad in (dict(latent_noise=()), dict(latent_steps=-1)):
        with pytest.raises(ValueError, match="latent"):
            TrainConfig(**bad)


def test_max_steps_bounds_the_epochs_and_none_leaves_them():
    # a pool of 2,001 models: epochs of min(2001, 200) / 8 = 25 steps; 600 steps = 24 epochs
    assert epochs_to_run(TrainConfig(epochs=120, max_steps=600), 2001) == 24
    # a pool of 23 models: 3 steps per epoch, 120 epochs = 360 steps, under the bound: unchanged
    assert epochs_to_run(TrainConfig(epochs=120, max_steps=600), 23) == 120
    # rounded up to a whole epoch, never below one
    assert epochs_to_run(TrainConfig(epochs=120, max_steps=601), 2001) == 25
    assert epochs_to_run(TrainConfig(epochs=120, max_steps=1), 2001) == 1
    assert epochs_to_run(TrainConfig(epochs=120, max_steps=None), 2001) == 120
    with pytest.raises(ValueError, match="max_steps"):
        TrainConfig(max_steps=0)


def test_the_default_schedule_trains_a_large_pool_in_steps_and_a_small_pool_in_epochs():
    # metabench's 1,601 training models: 25 steps per epoch, bounded to 600 steps (24 epochs, a 15-minute fold);
    # MMLU-Pro's 23 and any pool of up to 40 training models keep every one of the 120 epochs
    assert epochs_to_run(TrainConfig(), 1601) == 24
    assert epochs_to_run(TrainConfig(), 40) == TrainConfig().epochs == 120
    assert epochs_to_run(TrainConfig(), 23) == 120
    # the synthetic pool's ~90 training models: 12 steps per epoch, 50 epochs
    assert epochs_to_run(TrainConfig(), 90) == 50
