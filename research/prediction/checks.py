"""How well the cost model predicts, within the records of one study: leave one model out, the summaries
against the targets, and the noise floor the measurements themselves set (how far their repeats move).

Numpy only, as costmodel; predict/transfer.py checks across leases.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass

import numpy as np

from gpuscale.predict import costmodel as cm


def percent_error(predicted: float, measured: float) -> float:
    return 100.0 * (predicted / measured - 1.0)


def leave_one_model_out(
    obs: list[cm.Observation], facts: dict[str, cm.ModelFacts], priors: dict | None = None
) -> list[dict]:
    """Each model's epochs and speedups predicted from constants fitted without any of that model's records.

    priors: {(device, variant): Calibration} from a probe of the same host, if any. Rows: one per
    (model, device, variant) and one per (model, "speedup", variant) where both devices were measured.
    """
    priors = priors or {}
    rows = []
    groups = sorted({(o.device, o.variant) for o in obs})
    by_key = {(o.model, o.device, o.variant): o for o in obs}
    for model in sorted({o.model for o in obs}):
        predicted: dict[tuple, tuple[dict, cm.Calibration]] = {}
        for device, variant in groups:
            mine = by_key.get((model, device, variant))
            if mine is None:
                continue
            rest = [o for o in obs if o.device == device and o.variant == variant and o.model != model]
            try:
                cal = cm.fit(rest, facts, priors.get((device, variant)), device, variant)
            except cm.CostModelError:
                continue
            p = cm.predict_epoch(cal, facts[model], mine.images, math.ceil(mine.images / mine.steps))
            predicted[(device, variant)] = (p, cal)
            rows.append(
                {
                    "source": mine.source,
                    "model": model,
                    "device": device,
                    "variant": variant,
                    "quantity": "epoch_seconds",
                    "predicted": p["epoch_seconds"],
                    "measured": mine.epoch_seconds,
                    "error_percent": percent_error(p["epoch_seconds"], mine.epoch_seconds),
                    "bound": p["bound"],
                    "calibration": cal.source,
                }
            )
        for variant in sorted({v for _, v in groups}):
            cpu, gpu = predicted.get(("cpu", variant)), predicted.get(("cuda", variant))
            if cpu is None or gpu is None:
                continue
            s = cm.speedup(cpu[0], gpu[0], cpu[1], gpu[1])
            measured = by_key[(model, "cpu", variant)].epoch_seconds / by_key[(model, "cuda", variant)].epoch_seconds
            rows.append(
                {
                    "source": by_key[(model, "cpu", variant)].source,
                    "model": model,
                    "device": "speedup",
                    "variant": variant,
                    "quantity": "speedup",
                    "predicted": s["speedup"],
                    "measured": measured,
                    "error_percent": percent_error(s["speedup"], measured),
                    "bound": gpu[0]["bound"],
                    "calibration": f"{cpu[1].source} / {gpu[1].source}",
                }
            )
    return rows


def summarize(rows: list[dict], median_target: float = 15.0, worst_target: float = 35.0) -> list[dict]:
    """Median and worst absolute % error per (device or speedup, variant); the speedup rows against targets."""
    out = []
    for device, variant in sorted({(r["device"], r["variant"]) for r in rows}):
        mine = [r for r in rows if r["device"] == device and r["variant"] == variant]
        errors = [abs(r["error_percent"]) for r in mine]
        worst = max(mine, key=lambda r: abs(r["error_percent"]))
        row = {
            "device": device,
            "variant": variant,
            "models": len(mine),
            "median_abs_error_percent": statistics.median(errors),
            "worst_abs_error_percent": max(errors),
            "worst_model": worst["model"],
            "meets_target": None,
        }
        if device == "speedup":
            row["meets_target"] = bool(row["median_abs_error_percent"] <= median_target and max(errors) <= worst_target)
        out.append(row)
    return out


# ----------------------------------------------------------------------------- the measurements' own spread

# A median of k >= 3 values of a normal spread varies pi/2 times as much as their mean (large-k efficiency).
MEDIAN_VARIANCE_FACTOR = math.pi / 2
FLOOR_DRAWS = 4000


def _median_variance(variance: float, k: int) -> float:
    """The variance of the median of k values each of this variance (of 1 or 2 values: the mean)."""
    return variance / k * (MEDIAN_VARIANCE_FACTOR if k >= 3 else 1.0)


@dataclass(frozen=True)
class Spread:
    """How much a measured epoch of one (host, device, protocol) moves between repeats, as variances of
    log(epoch seconds): within a run (one steady epoch against the next) and between runs (seeds' medians, beyond
    what the within-run spread explains). dof: the degrees of freedom each rests on (0: not measured here)."""

    epoch_variance: float
    epoch_dof: int
    run_variance: float = 0.0
    run_dof: int = 0

    def observation_log_sd(self, o: cm.Observation) -> float:
        """The log-sd of an observation's epoch value: the median of its steady epochs, the median over its seeds."""
        within = _median_variance(self.epoch_variance, max(o.steady_epochs, 1))
        return math.sqrt((self.run_variance + within) / max(o.seeds, 1))


def _pooled(variances: list[tuple[float, int]]) -> tuple[float, int]:
    dof = sum(d for _, d in variances)
    return (sum(v * d for v, d in variances) / dof, dof) if dof else (0.0, 0)


def measured_spreads(folders: dict[str, list[dict]]) -> dict[tuple, Spread]:
    """Per (host fingerprint, device, variant, sampled), from the measured non-sweep records of every folder: the
    pooled variance of log steady epochs within each run that has two or more, and between the seeds' medians of a
    (model, device) with two or more seeds in one folder (less the within-run share those medians carry; never
    below 0). Runs of one model in different folders are not seeds of each other: their leases differ."""
    within: dict[tuple, list[tuple[float, int]]] = {}
    groups: dict[tuple, list[list[float]]] = {}
    for folder, records in folders.items():
        for r in records:
            if r.get("status") != "measured" or r["key"].get("sweep"):
                continue
            key = (r["environment"].get("host_fingerprint"), r["key"]["device"], r["key"]["variant"], cm._sampled(r))
            logs = [math.log(x) for x in cm._steady_epochs(r)]
            if len(logs) >= 2:
                within.setdefault(key, []).append((statistics.variance(logs), len(logs) - 1))
            if logs:
                groups.setdefault((*key, folder, r["key"]["model"]), []).append(logs)
    out = {}
    for key, parts in within.items():
        epoch_variance, epoch_dof = _pooled(parts)
        between = []
        for (*group_key, _folder, _model), runs in groups.items():
            if tuple(group_key) == key and len(runs) >= 2:
                medians = [statistics.median(x) for x in runs]
                share = _median_variance(epoch_variance, min(len(x) for x in runs))
                between.append((max(statistics.variance(medians) - share, 0.0), len(runs) - 1))
        run_variance, run_dof = _pooled(between)
        out[key] = Spread(epoch_variance, epoch_dof, run_variance, run_dof)
    return out


def spread_for(o: cm.Observation, spreads: dict[tuple, Spread]) -> tuple[Spread | None, str]:
    """The spread that applies to an observation: its own (host, device, protocol)'s; else, for a sampled run, its
    host's full-epoch spread on the device, a lower bound (a sampled epoch rests on a few timed steps); else none."""
    own = spreads.get((o.host_fingerprint, o.device, o.variant, o.sampled))
    if own is not None:
        return own, "measured"
    full = spreads.get((o.host_fingerprint, o.device, o.variant, False))
    if o.sampled and full is not None:
        return full, "lower bound"
    return None, "unknown"


def noise_floor(
    log_sds: list[float], median_target: float = 15.0, worst_target: float = 35.0, draws: int = FLOOR_DRAWS
) -> dict:
    """What a perfect model would score against measurements this noisy: each value's error drawn as
    exp(N(0, sd)) - 1, `draws` times (a fixed seed: the same inputs give the same floor). Returns the median over
    draws of the median and of the worst absolute % error, and the share of draws meeting both targets."""
    sds = np.asarray(log_sds, dtype=float)
    if sds.size == 0:
        return {"floor_median_percent": None, "floor_worst_percent": None, "floor_meets_target_share": None}
    errors = 100.0 * np.abs(np.expm1(np.random.default_rng(0).normal(size=(draws, sds.size)) * sds))
    medians, worsts = np.median(errors, axis=1), errors.max(axis=1)
    return {
        "floor_median_percent": float(np.median(medians)),
        "floor_worst_percent": float(np.median(worsts)),
        "floor_meets_target_share": float(np.mean((medians <= median_target) & (worsts <= worst_target))),
    }
