import numpy as np
import pytest

from gpuscale.analyze import analysis


def test_scaling_fit_recovers_a_known_exponent():
    rng = np.random.default_rng(0)
    size = np.geomspace(1e5, 6e7, 9)
    speedup = 0.01 * size**0.45 * np.exp(rng.normal(0, 0.02, size.size))
    fit = analysis.scaling_fit(size, speedup)
    assert fit["ok"]
    assert fit["exponent"] == pytest.approx(0.45, abs=3 * fit["exponent_se"] + 1e-3)
    assert 0 < fit["exponent_se"] < 0.05
    assert fit["r2"] > 0.99


def test_amdahl_fit_recovers_serial_seconds_and_acceleration():
    cpu = np.array([11.5, 46.4, 544.4, 120.0, 300.0])
    gpu = 5.7 + cpu / 70.0
    fit = analysis.amdahl_fit(cpu, gpu)
    assert fit["ok"]
    assert fit["serial_seconds"] == pytest.approx(5.7)
    assert fit["acceleration"] == pytest.approx(70.0)


def test_amdahl_fit_says_when_k_is_undetermined():
    # the GPU epoch stays near 8 s while the CPU epoch goes from 20 s to 800 s: s is clear, k is not
    cpu = np.array([20.0, 50.0, 100.0, 220.0, 800.0])
    gpu = np.array([8.5, 6.9, 9.6, 6.3, 9.0])
    fit = analysis.amdahl_fit(cpu, gpu)
    assert fit["ok"] and fit["acceleration_se"] > fit["acceleration"]
    assert fit["serial_seconds"] == pytest.approx(gpu.mean(), abs=1.5)
    assert "k undetermined" in fit["note"]
    # a clean linear relation gets no such note
    assert "note" not in analysis.amdahl_fit(cpu, 5.7 + cpu / 70.0)


def test_amdahl_fit_on_the_papers_table_gives_the_papers_analysis():
    # PAPER.md: a = 56.8 s fixed, 1/b = ~70x, reproducing 1.97 / 7.32 / 40.59
    cpu = np.array([114.94, 463.63, 5443.67])
    gpu = np.array([57.99, 63.77, 134.08])
    fit = analysis.amdahl_fit(cpu, gpu)
    assert fit["serial_seconds"] == pytest.approx(56.8, abs=0.1)
    assert fit["acceleration"] == pytest.approx(70.4, abs=0.5)
    predicted = cpu / (fit["serial_seconds"] + cpu / fit["acceleration"])
    np.testing.assert_allclose(predicted, [1.97, 7.32, 40.59], atol=0.03)


def test_amdahl_curve_and_effective_units_agree_with_the_linear_model():
    s, k, cpu = 5.0, 50.0, 200.0
    p = analysis.parallel_fraction(s, cpu)
    n = analysis.effective_units(p, k)
    assert float(analysis.amdahl_speedup(p, n)) == pytest.approx(cpu / (s + cpu / k))
    assert float(analysis.amdahl_speedup(p, 1)) == pytest.approx(1.0)
    assert float(analysis.amdahl_speedup(p, 1e12)) == pytest.approx(1 / (1 - p), rel=1e-6)


@pytest.mark.parametrize("n", [0, 1, 2])
def test_fits_with_too_few_points_say_so(n):
    fit = analysis.scaling_fit(np.geomspace(1, 10, n) if n else [], np.ones(n) * 2)
    assert not fit["ok"] and "at least 3" in fit["reason"]
    assert not analysis.amdahl_fit(np.arange(1, n + 1) * 10.0, np.arange(1, n + 1) * 1.0)["ok"]


def test_compare_predictors_names_the_better_fit():
    size = np.geomspace(1e5, 1e8, 6)
    flops = size * np.array([1, 5, 0.5, 3, 0.2, 2])
    speedup = flops**0.4
    verdict = analysis.compare_predictors(
        {
            "parameters": analysis.scaling_fit(size, speedup),
            "training FLOPs per image": analysis.scaling_fit(flops, speedup),
        }
    )
    assert verdict.startswith("Speedup follows training FLOPs per image")


def test_thread_fit_recovers_the_parallel_fraction():
    threads = np.array([1, 2, 4, 8, 16])
    p, one = 0.9, 100.0
    seconds = one * ((1 - p) + p / threads)
    fit = analysis.thread_fit(threads, seconds)
    assert fit["ok"] and fit["parallel_fraction"] == pytest.approx(p)
    assert fit["one_thread_seconds"] == pytest.approx(one)
    noisy = seconds * np.array([1.01, 0.99, 1.02, 0.98, 1.0])
    fit = analysis.thread_fit(threads, noisy)
    assert abs(fit["parallel_fraction"] - p) < 3 * fit["parallel_fraction_se"] + 0.01
