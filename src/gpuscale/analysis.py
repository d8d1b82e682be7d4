"""Fits on the speedup table: scaling exponents and Amdahl's law. numpy only, no torch.

Every fit returns a dict whose `ok` says whether it could be made; when not, `reason` says why
(too few points), and nothing downstream draws a line for it.
"""

from __future__ import annotations

import math

import numpy as np

MIN_POINTS = 3  # two parameters from two points leave no residual: no uncertainty, no test


def linear_fit(x, y) -> dict:
    """Ordinary least squares y = intercept + slope * x with standard errors and R^2."""
    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    n = len(x)
    if n < MIN_POINTS:
        return {"ok": False, "n": n, "reason": f"{n} point(s); a fit with an uncertainty needs at least {MIN_POINTS}"}
    if np.ptp(x) == 0:
        return {"ok": False, "n": n, "reason": "all points share one x value"}
    design = np.column_stack([np.ones(n), x])
    coef, *_ = np.linalg.lstsq(design, y, rcond=None)
    residuals = y - design @ coef
    dof = n - 2
    sigma2 = float(residuals @ residuals) / dof
    cov = sigma2 * np.linalg.inv(design.T @ design)
    total = float(((y - y.mean()) ** 2).sum())
    r2 = 1.0 - float(residuals @ residuals) / total if total > 0 else 1.0
    return {
        "ok": True,
        "n": n,
        "intercept": float(coef[0]),
        "slope": float(coef[1]),
        "intercept_se": math.sqrt(max(cov[0, 0], 0.0)),
        "slope_se": math.sqrt(max(cov[1, 1], 0.0)),
        "covariance": float(cov[0, 1]),
        "r2": r2,
    }


def scaling_fit(size, speedup) -> dict:
    """log(speedup) = a + b log(size): b is the scaling exponent."""
    size, speedup = np.asarray(size, dtype=float), np.asarray(speedup, dtype=float)
    fit = linear_fit(np.log(size), np.log(speedup))
    if fit["ok"]:
        fit["exponent"], fit["exponent_se"] = fit["slope"], fit["slope_se"]
    return fit


def compare_predictors(fits: dict[str, dict]) -> str:
    """One plain sentence on which predictor of speedup fits better, by R^2 of the log-log fit."""
    usable = {name: f for name, f in fits.items() if f.get("ok")}
    if len(usable) == 1:
        ((name, fit),) = usable.items()
        return (
            f"Only {name} could be fitted (R² {fit['r2']:.2f}, exponent {fit['exponent']:.2f} ± "
            f"{fit['exponent_se']:.2f}); no second predictor to compare."
        )
    if not usable:
        return "Not enough models measured on both devices to fit or compare predictors (3 or more needed)."
    ranked = sorted(usable.items(), key=lambda item: item[1]["r2"], reverse=True)
    (best, fb), (other, fo) = ranked[0], ranked[1]
    return (
        f"Speedup follows {best} (R² {fb['r2']:.2f}, exponent {fb['exponent']:.2f} ± {fb['exponent_se']:.2f}) "
        f"better than {other} (R² {fo['r2']:.2f}, exponent {fo['exponent']:.2f} ± {fo['exponent_se']:.2f})."
    )


def amdahl_fit(cpu_seconds, gpu_seconds) -> dict:
    """T_gpu = s + T_cpu / k across models: s seconds the GPU does not accelerate, k how much faster it runs
    the rest."""
    fit = linear_fit(cpu_seconds, gpu_seconds)
    if not fit["ok"]:
        return fit
    s, inv_k = fit["intercept"], fit["slope"]
    if inv_k <= 0:
        return {
            "ok": False,
            "n": fit["n"],
            "reason": "fitted slope is not positive: GPU time does not grow with CPU time",
        }
    fit.update(
        {
            "serial_seconds": s,
            "serial_seconds_se": fit["intercept_se"],
            "acceleration": 1.0 / inv_k,
            "acceleration_se": fit["slope_se"] / inv_k**2,
        }
    )
    if k_undetermined(fit["acceleration"], fit["acceleration_se"]):
        fit["note"] = (
            "k undetermined (its ± exceeds it): the GPU epoch hardly grows with the CPU epoch, so nearly "
            "all of it is s, the part the GPU does not accelerate"
        )
    return fit


def k_undetermined(acceleration: float, acceleration_se: float | None) -> bool:
    """Whether an Amdahl fit's k is undetermined: its standard error reaches k itself (equivalently, 1/k lies
    within one standard error of 0, so k has no upper bound)."""
    return acceleration_se is not None and acceleration_se >= acceleration


def parallel_fraction(serial_seconds: float, cpu_seconds: float) -> float:
    """Amdahl's P for one model: the share of its CPU time that the GPU accelerates."""
    return 1.0 - serial_seconds / cpu_seconds


def amdahl_speedup(p: float, n):
    """S(N) = 1 / ((1 - P) + P / N)."""
    n = np.asarray(n, dtype=float)
    return 1.0 / ((1.0 - p) + p / n)


def effective_units(p: float, acceleration: float) -> float:
    """Under T_gpu = s + T_cpu / k, a model with parallel fraction P runs as if on N = k * P units."""
    return acceleration * p


def bootstrap_ratio_ci(numerator, denominator, resamples: int = 2000, level: float = 0.95, seed: int = 0):
    """Percentile bootstrap interval of median(numerator) / median(denominator), resampling each side's seeds.

    (None, None) when neither side has more than one value: one run per side gives no interval.
    """
    a, b = np.asarray(numerator, dtype=float), np.asarray(denominator, dtype=float)
    if len(a) == 0 or len(b) == 0 or (len(a) < 2 and len(b) < 2):
        return None, None
    rng = np.random.default_rng(seed)
    ratios = np.median(rng.choice(a, size=(resamples, len(a))), axis=1) / np.median(
        rng.choice(b, size=(resamples, len(b))), axis=1
    )
    tail = (1 - level) / 2
    return float(np.quantile(ratios, tail)), float(np.quantile(ratios, 1 - tail))


def thread_fit(threads, seconds) -> dict:
    """Amdahl from a CPU thread sweep: T(N) = a + b / N, so P = b / (a + b) (a: serial seconds, b: parallel).

    P's standard error by the delta method from the fit's covariance.
    """
    threads, seconds = np.asarray(threads, dtype=float), np.asarray(seconds, dtype=float)
    fit = linear_fit(1.0 / threads, seconds)
    if not fit["ok"]:
        return fit
    a, b = fit["intercept"], fit["slope"]
    if a + b <= 0 or b <= 0:
        return {
            "ok": False,
            "n": fit["n"],
            "reason": "time does not fall with more threads: no parallel fraction to fit",
        }
    grad = np.array([-b, a]) / (a + b) ** 2
    cov = np.array([[fit["intercept_se"] ** 2, fit["covariance"]], [fit["covariance"], fit["slope_se"] ** 2]])
    fit.update(
        {
            "parallel_fraction": b / (a + b),
            "parallel_fraction_se": float(np.sqrt(max(grad @ cov @ grad, 0.0))),
            "one_thread_seconds": a + b,
        }
    )
    return fit
