"""The sampled protocol's arithmetic, and a sampled run's record checked against its own clocks.

How close a sampled run comes to a separate full run is a timing comparison, so it is a benchmark
(`research/sampling/sampled_vs_full.py`), not a test: on a shared machine two processes differ by more than the
extrapolation does.
"""

import pytest
from test_train import tiny_settings

from gpuscale.contract import record, sampling
from gpuscale.measure import train


def test_extrapolation_keeps_the_warmup_and_scales_the_steady_steps():
    # 2 warm-up steps took 2 s, then 8 more took 4 s (0.5 s a step): 30 steps = 2 s + 28 x 0.5 s
    assert sampling.extrapolate(2.0, 6.0, 2, 10, 30) == pytest.approx(16.0)
    # a constant pace is extrapolated exactly, whatever the warm-up
    assert sampling.extrapolate(0.3, 1.2, 3, 12, 391) == pytest.approx(0.1 * 391)
    # nothing to extrapolate when every step was timed
    assert sampling.extrapolate(1.0, 7.0, 2, 30, 30) == pytest.approx(7.0)


def test_a_sampled_epochs_seconds_are_the_extrapolation_of_its_own_clock_marks(prepared, tmp_path):
    # 200 images, batch 32: 7 steps; 4 timed, the first 2 as warm-up. The record keeps the clock at the
    # warm-up step (a step mark) and at the end of the timed steps (measured_seconds), so anyone can redo it.
    settings = tiny_settings(epochs=2)
    settings["train"].update(max_steps_per_epoch=4, sample_warmup_steps=2)
    train.run(settings, prepared, tmp_path / "s.json", threads=1)
    for epoch in record.load(tmp_path / "s.json")["epochs"]:
        marks = dict(epoch["step_marks"])
        assert epoch["measured_steps"] == 4 and epoch["steps"] == 7 and epoch["extrapolated"]
        assert 0 < marks[2] < epoch["measured_seconds"]
        assert epoch["train_seconds"] == pytest.approx(
            sampling.extrapolate(marks[2], epoch["measured_seconds"], 2, 4, 7), rel=1e-12
        )
        assert epoch["images_per_second"] == pytest.approx(epoch["train_images"] / epoch["train_seconds"])
