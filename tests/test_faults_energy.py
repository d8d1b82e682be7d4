"""RAPL counters wrap: a sampling thread sees every wrap, or the figure is marked unavailable (issue 16)."""

from __future__ import annotations

import pytest

from gpuscale.measure import energy


class Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def rapl(tmp_path, start: int = 0, wrap: int | None = 1_000_000_000):
    domain = tmp_path / "intel-rapl:0"
    domain.mkdir(parents=True)
    (domain / "energy_uj").write_text(str(start))
    if wrap is not None:
        (domain / "max_energy_range_uj").write_text(str(wrap))
    return tmp_path, domain / "energy_uj"


def test_every_wrap_between_two_epoch_readings_is_counted(tmp_path):
    root, counter = rapl(tmp_path)  # wraps at 1000 J: at most 1 s at MAX_WATTS
    clock = Clock()
    meter = energy.RaplMeter(root, poll_seconds=None, clock=clock)
    start = meter.read()
    for value in (900_000_000, 100_000_000, 600_000_000, 50_000_000):  # two wraps within one "epoch"
        clock.now += 0.5
        counter.write_text(str(value))
        meter.poll()  # what the sampling thread does
    clock.now += 0.5
    assert meter.read() - start == pytest.approx(900 + 200 + 500 + 450)
    assert meter.describe()["available"] is True


def test_readings_further_apart_than_a_wrap_mark_the_figure_unavailable_with_the_reason(tmp_path):
    root, counter = rapl(tmp_path)
    clock = Clock()
    meter = energy.RaplMeter(root, poll_seconds=None, clock=clock)
    meter.read()
    clock.now += 5.0  # the counter could have wrapped five times at MAX_WATTS
    counter.write_text("10")
    meter.read()
    info = meter.describe()
    assert info["available"] is False and "wraps may have been missed" in info["reason"]


def test_a_counter_without_a_readable_wrap_range_is_unavailable(tmp_path):
    root, _ = rapl(tmp_path, wrap=None)
    meter = energy.RaplMeter(root)
    assert meter.read() is None and "max_energy_range_uj" in meter.describe()["reason"]


def test_the_sampling_thread_polls_often_enough(tmp_path):
    root, _ = rapl(tmp_path, wrap=262_143_328_850)
    meter = energy.RaplMeter(root)
    try:
        assert meter.max_gap_seconds == pytest.approx(262.14, rel=1e-3)
        assert any(t.name == "gpuscale-rapl" for t in __import__("threading").enumerate())
    finally:
        meter.close()
