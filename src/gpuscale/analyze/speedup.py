"""The speedup table: per (source, model, variant, GPU device), CPU against GPU seconds, paired within one machine
lease where report.pairing asks it, with the spreads between epochs, rounds, seeds and leases and the intervals."""

from __future__ import annotations

import math
import statistics

import polars as pl

from gpuscale.analyze import analysis
from gpuscale.analyze.tables import KEY_COLUMNS
from gpuscale.contract import record

SAME_LEASE, CROSS_LEASE, UNKNOWN = "same-lease", "cross-lease", "unknown"  # the speedup table's `pairing`
PAIRINGS = (SAME_LEASE, "any")  # report.pairing
UNKNOWN_LEASE = record.lease_of(None)


# The run columns a speedup is made of, per side
_PAIR_COLUMNS = [
    "lease",
    "seed",
    "round",
    "parameters",
    "train_flops_per_image",
    "host",
    "gpu_name",
    "synthetic",
    "extrapolated",
    "total_train_seconds",
    "epoch_seconds_mean",
    "steady_epoch_seconds_median",
    "steady_epoch_log_sd",
    "final_test_accuracy",
    "epochs",
    "train_images",
]


def short_lease(lease: str | None) -> str:
    """A boot id as a reader tells leases apart: its first 8 characters."""
    return "unknown" if lease in (None, UNKNOWN_LEASE) else f"{lease[:8]}…"


def speedup_frame(runs: pl.DataFrame, tolerance: float, pairing: str = SAME_LEASE) -> pl.DataFrame:
    """Per (source, model, variant, GPU device): CPU vs GPU seconds, speedups, their spreads, accuracy parity.

    CPU and GPU are only ever paired within one source (one host's records), never across hosts, and within one
    machine lease (the boot id): each lease holding both halves gives median(CPU epoch) / median(GPU epoch) over its
    seeds and rounds, and the speedup is the median over leases (pairing `same-lease`). A half whose lease was not
    recorded pairs with the other as one pool (`unknown`). Halves only in different known leases are refused, listed
    with `pairing_reason`, unless `pairing` is `any` (pooled, `cross-lease`). docs/methodology.md has the arithmetic.
    """
    if pairing not in PAIRINGS:
        raise ValueError(f"report.pairing: {pairing!r}; expected one of {', '.join(PAIRINGS)}")
    # single-device runs only: data-parallel ones (cuda-ddpN, cpu-ddpN) go to the scaling table
    measured = runs.filter(
        (pl.col("status") == "measured") & pl.col("sweep_parameter").is_null() & (pl.col("world_size") == 1)
    )
    missing = {
        (r["source"], r["model"], r["variant"]): r["not_measured_reason"]
        for r in runs.filter((pl.col("status") == "not_measured") & pl.col("sweep_parameter").is_null())
        .sort(KEY_COLUMNS)
        .iter_rows(named=True)
    }
    by_group: dict[tuple, dict[str, list[dict]]] = {}
    for r in measured.sort(KEY_COLUMNS).select("source", "model", "variant", "device", *_PAIR_COLUMNS).to_dicts():
        by_group.setdefault((r["source"], r["model"], r["variant"]), {}).setdefault(r["device"], []).append(r)
    rows = []
    for (source, model, variant), devices in by_group.items():
        cpu = devices.get("cpu", [])
        gpus = sorted(d for d in devices if d != "cpu") or [None]
        for gpu_device in gpus:
            row = _speedup_row(cpu, devices.get(gpu_device, []), pairing, tolerance)
            rows.append(
                {
                    "source": source,
                    "model": model,
                    "variant": variant,
                    "gpu_device": gpu_device,
                    "gpu_not_measured_reason": missing.get((source, model, variant)),
                    **row,
                }
            )
    out = pl.DataFrame(rows, schema=SPEEDUP_SCHEMA, orient="row") if rows else pl.DataFrame(schema=SPEEDUP_SCHEMA)
    return out.sort(["source", "variant", "parameters", "model", "gpu_device"], nulls_last=True)


SPEEDUP_SCHEMA = {
    "source": pl.String,
    "model": pl.String,
    "variant": pl.String,
    "parameters": pl.Int64,
    "train_flops_per_image": pl.Int64,
    "host": pl.String,
    "gpu_device": pl.String,
    "gpu_name": pl.String,
    "cpu_seconds": pl.Float64,
    "gpu_seconds": pl.Float64,
    "cpu_epoch_seconds": pl.Float64,
    "gpu_epoch_seconds": pl.Float64,
    "cpu_steady_epoch_seconds": pl.Float64,
    "gpu_steady_epoch_seconds": pl.Float64,
    "speedup": pl.Float64,
    "steady_speedup": pl.Float64,
    "cpu_accuracy": pl.Float64,
    "gpu_accuracy": pl.Float64,
    "accuracy_difference": pl.Float64,
    "protocol_mismatch": pl.Boolean,
    "synthetic": pl.Boolean,
    "extrapolated": pl.Boolean,
    "cpu_extrapolated": pl.Boolean,
    "gpu_extrapolated": pl.Boolean,
    "gpu_seeds": pl.Int64,
    "cpu_seeds": pl.Int64,
    "gpu_not_measured_reason": pl.String,
    "accuracy_parity": pl.Boolean,
    "speedup_ci_low": pl.Float64,
    "speedup_ci_high": pl.Float64,
    # pairing by machine lease (issue 26)
    "pairing": pl.String,  # same-lease, cross-lease, unknown; null where no speedup was made
    "pairing_reason": pl.String,  # why there is no speedup although both halves were measured, or what was left out
    "leases": pl.Int64,  # leases that gave a same-lease pair (0: cross-lease; null: unknown)
    "lease_ids": pl.String,  # those leases' boot ids, comma-separated
    "cpu_lease_ids": pl.String,  # the leases of the CPU runs that entered the speedup
    "gpu_lease_ids": pl.String,
    "rounds": pl.Int64,  # how many rounds the pair's runs were measured in
    "epoch_spread": pl.Float64,  # log sd: steady epochs within a run, CPU and GPU in quadrature
    "round_spread": pl.Float64,  # log sd: rounds of one seed within a lease, CPU and GPU in quadrature
    "seed_spread": pl.Float64,  # log sd: seeds of one round within a lease, CPU and GPU in quadrature
    "lease_spread": pl.Float64,  # log sd of the leases' speedups (2+ leases)
    "speedup_interval_low": pl.Float64,  # speedup x exp(-1.96 sqrt(epoch² + round² + lease²)), holding the bootstrap
    "speedup_interval_high": pl.Float64,
    "epochs": pl.Int64,  # epochs per run (the GPU half's where the halves differ: protocol_mismatch)
}


def _median(values) -> float | None:
    known = [v for v in values if v is not None]
    return statistics.median(known) if known else None


def _leases_text(runs: list[dict]) -> str | None:
    return ", ".join(sorted({r["lease"] for r in runs})) or None


def _pair_units(cpu: list[dict], gpu: list[dict], pairing: str) -> tuple[str | None, list, str | None]:
    """(pairing, [(lease, CPU runs, GPU runs)], reason): which runs of each half enter the speedup, paired how."""
    if not cpu or not gpu:
        return None, [], None
    cpu_leases, gpu_leases = {r["lease"] for r in cpu}, {r["lease"] for r in gpu}
    shared = sorted((cpu_leases & gpu_leases) - {UNKNOWN_LEASE})
    if shared:
        units = [
            (lease, [r for r in cpu if r["lease"] == lease], [r for r in gpu if r["lease"] == lease])
            for lease in shared
        ]
        left = [
            f"{n} {side} run{'s' if n > 1 else ''} in a lease without a {other} run"
            for side, other, runs in (("CPU", "GPU", cpu), ("GPU", "CPU", gpu))
            if (n := sum(r["lease"] not in shared for r in runs))
        ]
        reason = f"{' and '.join(left)} left out (same-lease pairs only)" if left else None
        return SAME_LEASE, units, reason
    if UNKNOWN_LEASE in cpu_leases | gpu_leases:
        return UNKNOWN, [(UNKNOWN_LEASE, cpu, gpu)], None
    where = (
        f"CPU in lease{'s' if len(cpu_leases) > 1 else ''} {', '.join(map(short_lease, sorted(cpu_leases)))}, "
        f"GPU in lease{'s' if len(gpu_leases) > 1 else ''} {', '.join(map(short_lease, sorted(gpu_leases)))}"
    )
    if pairing == "any":
        return CROSS_LEASE, [(None, cpu, gpu)], f"{where}: paired across leases (report.pairing: any)"
    return None, [], f"{where}: no same-lease pair; report.pairing: any pairs them, marked cross-lease"


def _side_spreads(runs: list[dict]) -> dict[str, float | None]:
    """One half's spreads (log sd): epochs within a run, rounds of one (lease, seed), seeds of one (lease, round)."""
    by_seed, by_round = {}, {}
    for r in runs:
        by_seed.setdefault((r["lease"], r["seed"]), []).append(r["epoch_seconds_mean"])
        by_round.setdefault((r["lease"], r["round"]), []).append(r["epoch_seconds_mean"])
    return {
        "epoch": analysis.pooled_sd(r["steady_epoch_log_sd"] for r in runs),
        "round": analysis.pooled_log_sd(by_seed.values()),
        "seed": analysis.pooled_log_sd(by_round.values()),
    }


def _speedup_row(cpu: list[dict], gpu: list[dict], pairing: str, tolerance: float) -> dict:
    """The speedup table's columns from one model's CPU and GPU runs (either may be empty)."""
    kind, units, reason = _pair_units(cpu, gpu, pairing)
    if units:  # the runs that enter the speedup; without a pair, each half's own runs are described
        cpu, gpu = [r for _, c, _ in units for r in c], [r for _, _, g in units for r in g]
    return {
        **_halves(cpu, gpu, tolerance),
        **_paired_seconds(units),
        **_ratio_columns(units),
        "pairing": kind,
        "pairing_reason": reason,
        "leases": {SAME_LEASE: len(units), CROSS_LEASE: 0}.get(kind),
        "lease_ids": ", ".join(lease for lease, _, _ in units) if kind == SAME_LEASE else None,
        "cpu_lease_ids": _leases_text(cpu),
        "gpu_lease_ids": _leases_text(gpu),
        "rounds": len({r["round"] for r in cpu + gpu}) or None,
    }


def _halves(cpu: list[dict], gpu: list[dict], tolerance: float) -> dict:
    """Each half's medians over its runs, accuracy parity and what the runs were (sampled, synthetic, protocol)."""
    cpu_sampled, gpu_sampled = any(r["extrapolated"] for r in cpu), any(r["extrapolated"] for r in gpu)
    first = (gpu or cpu or [{}])[0]
    cpu_acc = _median(r["final_test_accuracy"] for r in cpu)
    gpu_acc = _median(r["final_test_accuracy"] for r in gpu)
    # a sampled run trained on a few steps per epoch: its accuracy is no 10-epoch accuracy, so no parity
    difference = None if cpu_sampled or gpu_sampled or cpu_acc is None or gpu_acc is None else gpu_acc - cpu_acc
    return {
        "parameters": first.get("parameters"),
        "train_flops_per_image": first.get("train_flops_per_image"),
        "host": first.get("host"),
        "gpu_name": gpu[0]["gpu_name"] if gpu else None,
        **{
            f"{side}_{column}": _median(r[field] for r in runs)
            for side, runs in (("cpu", cpu), ("gpu", gpu))
            for column, field in (
                ("seconds", "total_train_seconds"),
                ("epoch_seconds", "epoch_seconds_mean"),
                ("steady_epoch_seconds", "steady_epoch_seconds_median"),
            )
        },
        "cpu_accuracy": cpu_acc,
        "gpu_accuracy": gpu_acc,
        "accuracy_difference": difference,
        "protocol_mismatch": bool(cpu and gpu)
        and (cpu[0]["epochs"] != gpu[0]["epochs"] or cpu[0]["train_images"] != gpu[0]["train_images"]),
        "synthetic": any(r["synthetic"] for r in cpu + gpu),
        "extrapolated": cpu_sampled or gpu_sampled,
        "cpu_extrapolated": cpu_sampled,
        "gpu_extrapolated": gpu_sampled,
        "epochs": first.get("epochs"),
        "gpu_seeds": len(gpu) or None,
        "cpu_seeds": len(cpu) or None,
        "accuracy_parity": None if difference is None else abs(difference) <= tolerance,
    }


_SECONDS = (
    ("seconds", "total_train_seconds"),
    ("epoch_seconds", "epoch_seconds_mean"),
    ("steady_epoch_seconds", "steady_epoch_seconds_median"),
)


def _geometric_mean(values: list[float]) -> float:
    return math.exp(statistics.fmean(math.log(v) for v in values))


def _middle(ratios: list) -> list[int]:
    """The units whose ratio is the log median: the middle one of an odd count, the middle two of an even one."""
    order = sorted(range(len(ratios)), key=lambda i: ratios[i])
    return order[(len(order) - 1) // 2 : len(order) // 2 + 1]


def _paired_seconds(units: list) -> dict:
    """Each side's seconds from the pairing the speedup came from, so that CPU / GPU shown is the speedup: the medians
    of the lease whose ratio is the median (the geometric mean of the middle two leases' for an even count); the
    steady seconds likewise from the steady ratios. Without a pair, nothing (each half's own medians stand)."""
    if not units:
        return {}
    medians = [
        {
            f"{side}_{column}": _median(r[field] for r in runs)
            for side, runs in (("cpu", c), ("gpu", g))
            for column, field in _SECONDS
        }
        for _, c, g in units
    ]
    out = {}
    for column in ("seconds", "epoch_seconds", "steady_epoch_seconds"):
        cpu, gpu = [m[f"cpu_{column}"] for m in medians], [m[f"gpu_{column}"] for m in medians]
        basis = "steady_epoch_seconds" if column == "steady_epoch_seconds" else "epoch_seconds"
        ratios = [
            m[f"cpu_{basis}"] / m[f"gpu_{basis}"] if m[f"cpu_{basis}"] and m[f"gpu_{basis}"] else None for m in medians
        ]
        if None in ratios or None in cpu or None in gpu:
            continue
        middle = _middle(ratios)
        out[f"cpu_{column}"] = _geometric_mean([cpu[i] for i in middle])
        out[f"gpu_{column}"] = _geometric_mean([gpu[i] for i in middle])
    return out


def _ratio_columns(units: list) -> dict:
    """The speedup (log median over leases of each lease's median CPU / median GPU epoch), the steady one, each
    spread, the bootstrap over seeds and the interval that holds them (docs/methodology.md)."""
    ratios, steady = [], []
    for _, c, g in units:
        ratios.append(_median(r["epoch_seconds_mean"] for r in c) / _median(r["epoch_seconds_mean"] for r in g))
        sc = _median(r["steady_epoch_seconds_median"] for r in c)
        sg = _median(r["steady_epoch_seconds_median"] for r in g)
        steady.append(sc / sg if sc is not None and sg is not None else None)
    speedup = analysis.log_median(ratios) if ratios else None
    cpu, gpu = [r for _, c, _ in units for r in c], [r for _, _, g in units for r in g]
    spreads_c, spreads_g = _side_spreads(cpu), _side_spreads(gpu)
    spreads = {k: analysis.quadrature(spreads_c[k], spreads_g[k]) if units else None for k in spreads_c}
    lease_spread = analysis.log_sd(ratios) if len(units) > 1 else None
    ci = analysis.bootstrap_leases_ratio_ci(
        [([r["epoch_seconds_mean"] for r in c], [r["epoch_seconds_mean"] for r in g]) for _, c, g in units]
    )
    interval = analysis.combined_interval(speedup, (spreads["epoch"], spreads["round"], lease_spread), *ci)
    return {
        "speedup": speedup,
        "steady_speedup": analysis.log_median(steady) if steady and None not in steady else None,
        "speedup_ci_low": ci[0],
        "speedup_ci_high": ci[1],
        "epoch_spread": spreads["epoch"],
        "round_spread": spreads["round"],
        "seed_spread": spreads["seed"],
        "lease_spread": lease_spread,
        "speedup_interval_low": interval[0],
        "speedup_interval_high": interval[1],
    }
