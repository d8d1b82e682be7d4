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


# ---- spreads of a speedup (issue 26: the machine state is part of the measurement) ------------------------------
# Every spread is a standard deviation on the log scale (0.10: about ±10% for one repeat), so spreads of the CPU and
# the GPU side add in quadrature (log of a ratio = difference of logs of independent timings) and spreads of
# different sources add in quadrature too.
Z95 = 1.959963984540054  # the two-sided 95% point of the normal distribution


def log_sd(values) -> float | None:
    """The sample standard deviation (n - 1) of log(values); None for fewer than two values."""
    logs = np.log(np.asarray([v for v in values if v is not None], dtype=float))
    if len(logs) < 2:
        return None
    return float(np.std(logs, ddof=1))


def pooled_log_sd(groups) -> float | None:
    """The spread within groups: sqrt of the mean over groups of two or more values of each one's log variance
    (each group weighs the same); None when no group has two values."""
    variances = [sd**2 for sd in (log_sd(g) for g in groups) if sd is not None]
    return math.sqrt(sum(variances) / len(variances)) if variances else None


def pooled_sd(spreads) -> float | None:
    """sqrt of the mean of squared spreads (each already a log sd), the Nones left out; None when all are."""
    known = [s for s in spreads if s is not None]
    return math.sqrt(sum(s * s for s in known) / len(known)) if known else None


def quadrature(*spreads) -> float | None:
    """sqrt(sum of squares) of the spreads that are known; None when none is."""
    known = [s for s in spreads if s is not None]
    return math.sqrt(sum(s * s for s in known)) if known else None


def log_median(values) -> float:
    """exp(median(log values)): the median for an odd count, the geometric mean of the middle two for an even one
    (a ratio's middle on its own scale)."""
    return float(np.exp(np.median(np.log(np.asarray(values, dtype=float)))))


def combined_interval(
    speedup: float | None,
    spreads,
    ci_low: float | None = None,
    ci_high: float | None = None,
    z: float = Z95,
) -> tuple[float | None, float | None]:
    """speedup × exp(±z · sqrt(Σ spread²)) over the known spreads, widened to contain [ci_low, ci_high] (the
    bootstrap over seeds); (None, None) with neither a spread nor a bootstrap interval."""
    if speedup is None:
        return None, None
    total = quadrature(*spreads)
    if total is None and ci_low is None:
        return None, None
    low = high = speedup
    if total is not None:
        low, high = speedup * math.exp(-z * total), speedup * math.exp(z * total)
    if ci_low is not None:
        low, high = min(low, ci_low), max(high, ci_high)
    return low, high


def bootstrap_leases_ratio_ci(pairs, resamples: int = 2000, level: float = 0.95, seed: int = 0):
    """The bootstrap of a speedup paired within leases: each resample draws every lease's CPU and GPU runs with
    replacement, takes each lease's median(CPU) / median(GPU) and the log median (log_median) over leases.

    One lease is bootstrap_ratio_ci itself (the same draws). (None, None) when no lease has two runs on a side.
    """
    pairs = [(np.asarray(c, dtype=float), np.asarray(g, dtype=float)) for c, g in pairs if len(c) and len(g)]
    if len(pairs) == 1:
        return bootstrap_ratio_ci(*pairs[0], resamples=resamples, level=level, seed=seed)
    if not pairs or all(len(c) < 2 and len(g) < 2 for c, g in pairs):
        return None, None
    rng = np.random.default_rng(seed)
    logs = np.stack(
        [
            np.log(
                np.median(rng.choice(c, size=(resamples, len(c))), axis=1)
                / np.median(rng.choice(g, size=(resamples, len(g))), axis=1)
            )
            for c, g in pairs
        ]
    )
    ratios = np.exp(np.median(logs, axis=0))
    tail = (1 - level) / 2
    return float(np.quantile(ratios, tail)), float(np.quantile(ratios, 1 - tail))
