"""The aggregation stage: run records -> Polars tables, metrics and fits.

Reads every record through gpuscale.record.load() (which upgrades older schema versions, so no fallbacks
across versions here); writes the tables of gpuscale.analyze.tables to results/tables
as CSV (to read) and Parquet (typed, for the charts and the report), notes.json and results/metrics.json.
Output is deterministic: rows sorted, columns in a fixed order, so rerunning on the same records changes no byte.
"""

from __future__ import annotations

import logging
import math
import statistics
from pathlib import Path

import polars as pl

from gpuscale.analyze import analysis, tables
from gpuscale.analyze import metrics as metrics_mod

# The table contract lives in gpuscale.analyze.tables; these names stay importable from here for one release.
from gpuscale.analyze.tables import (  # noqa: F401
    EPOCH_SCHEMA,
    FIT_LABELS,
    FITS_SCHEMA,
    KEY_COLUMNS,
    LOCAL_SOURCE,
    PAPER_SOURCE,
    PHASE_SCHEMA,
    RUN_SCHEMA,
    SAMPLING_SCHEMA,
    SCALING_SCHEMA,
    TABLES,
    Fit,
    paper_frame,
    read_tables,
)
from gpuscale.contract import fsutil, record, sampling
from gpuscale.contract import settings as typed

log = logging.getLogger("gpuscale.analyze.aggregate")


class AggregateError(RuntimeError):
    """Records that cannot be aggregated; str() names the file(s)."""


def find_records(folder: Path) -> list[Path]:
    return sorted(p for p in Path(folder).rglob("*.json") if not p.name.startswith("."))


def load_all(
    sources: dict[str, list[Path]], skip_bad: bool = False, lenient: tuple[str, ...] = ()
) -> tuple[list[tuple[str, Path, dict]], list[dict]]:
    """(source, path, record) for every listed record, and the skipped ones. A record is data from outside: it must
    read (gpuscale.record.load: schema, finite figures), lie where its key says and not repeat a run of its lease;
    one source's runs of one key come from one host. A bad record in a `lenient` source (a reference folder) is
    skipped and listed (the report shows it); in the study's own records it stops the stage unless skip_bad."""
    loaded, skipped = [], []
    seen: dict[tuple, Path] = {}
    hosts: dict[tuple, tuple[str, Path]] = {}
    for source, paths in sources.items():
        for path in paths:
            try:
                rec = record.load(path)
                _check_identity(source, path, rec, seen, hosts)
            except (record.RecordError, AggregateError) as err:
                if not (skip_bad or source in lenient):
                    raise AggregateError(f"{err} (fix or remove it, or set report.skip_bad_records: true)") from None
                log.warning("skipped a bad record of %s: %s", source, err)
                skipped.append({"source": source, "path": str(path), "reason": str(err)})
                continue
            loaded.append((source, path, rec))
    return loaded, skipped


def _check_identity(source: str, path: Path, rec: dict, seen: dict, hosts: dict) -> None:
    """Raise (one line naming the file) when the record lies elsewhere than its key says, repeats a run already
    read (one run per key and lease: the same run taken again in another lease is a repeat and kept), or was
    measured on another host than the same key's other records of this source."""
    wrong_place = record.misplaced(path, rec)
    if wrong_place:
        raise AggregateError(wrong_place)
    key = (source, rec["conditions"]["lease"], *record.key(rec))
    if key in seen:
        raise AggregateError(f"two records for {'/'.join(map(str, key))}: {seen[key]} and {path}; remove one")
    fingerprint = rec["environment"].get("host_fingerprint")
    first = hosts.setdefault((source, *record.key(rec)), (fingerprint, path))
    if fingerprint != first[0]:
        raise AggregateError(
            f"{path}: measured on another host than {first[1]} (fingerprints {str(fingerprint)[:12]} and "
            f"{str(first[0])[:12]}); one source is one host: put one of them in its own reference folder"
        )
    seen[key] = path


def host_label(rec: dict) -> str:
    env = rec["environment"]
    return f"{env['host']} ({env['gpu']['name'] if env.get('gpu') else env['cpu_model']})"


def runs_frame(loaded) -> pl.DataFrame:
    rows = []
    for source, path, rec in loaded:
        env, timing, quality = rec["environment"], rec["timing"] or {}, rec["quality"] or {}
        recorded = rec["settings"]["train"]  # the record's copy (JSON, any readable schema version), not params
        epochs = rec["epochs"]
        distributed = rec["distributed"] or {}
        rows.append(
            {
                "source": source,
                **flat_key(rec),
                "status": rec["status"],
                "not_measured_reason": rec["not_measured_reason"],
                "drifted": rec["conditions"]["drifted"],
                "label": rec["label"],
                "host": host_label(rec),
                "hostname": env["host"],
                "cpu_model": env["cpu_model"],
                "cpu_logical_cores": env["cpu_logical_cores"],
                "torch_threads": env["torch_threads"],
                "loader_workers": loader_workers(rec),
                "oversubscribed": oversubscribed(rec),
                **compile_cache_columns(rec),
                "gpu_name": (env.get("gpu") or {}).get("name"),
                "gpu_driver": (env.get("gpu") or {}).get("driver_version"),
                "torch_version": env["torch_version"],
                "cuda_version": env["cuda_version"],
                "cudnn_version": env["cudnn_version"],
                "git_commit": env["git"].get("commit"),
                "parameters": rec["model"]["parameters"],
                "train_flops_per_image": rec["model"]["train_flops_per_image"],
                "epochs": recorded["epochs"],
                "batch_size": recorded["batch_size"],
                "world_size": distributed.get("world_size", 1),
                "global_batch_size": distributed.get("global_batch_size", recorded["batch_size"]),
                "data_source": rec["data"]["source"],
                "synthetic": rec["data"]["synthetic"],
                "train_images": rec["data"]["train_images"],
                "test_images": rec["data"]["test_images"],
                "manifest_sha256": rec["data"]["manifest_sha256"],
                "total_train_seconds": timing.get("total_train_seconds"),
                "epoch_seconds_mean": (timing["total_train_seconds"] / len(epochs)) if epochs else None,
                "warmup_epoch_seconds": timing.get("warmup_epoch_seconds"),
                "steady_epoch_seconds_median": timing.get("steady_epoch_seconds_median"),
                "steady_epoch_log_sd": analysis.log_sd(e["train_seconds"] for e in epochs if not e["warmup"]),
                "total_eval_seconds": timing.get("total_eval_seconds"),
                "train_images_per_second": timing.get("train_images_per_second"),
                "steady_images_per_second": timing.get("steady_images_per_second"),
                "extrapolated": timing.get("extrapolated", False),
                "final_test_accuracy": quality.get("final_test_accuracy"),
                **energy_columns(rec["energy"]),
                "phase_overhead_fraction": (rec["phase_profile"] or {}).get("overhead_fraction"),
                "started_at": rec["started_at"],
                "finished_at": rec["finished_at"],
                "record_path": str(path),
                "record_sha256": fsutil.sha256_file(path),
            }
        )
    return pl.DataFrame(rows, schema=RUN_SCHEMA).sort(KEY_COLUMNS)


def loader_workers(rec: dict) -> int | None:
    """DataLoader worker processes beside the training process (0 for the device loader; None if not recorded)."""
    if ((rec["variant"] or {}).get("knobs") or {}).get("loader") == "device":
        return 0
    return (rec["settings"]["train"].get("loader") or {}).get("num_workers")


def oversubscribed(rec: dict) -> bool:
    """A CPU run whose torch threads plus DataLoader workers outnumber the host's logical cores: they compete."""
    env, workers = rec["environment"], loader_workers(rec)
    return (
        rec["key"]["device"] == "cpu"
        and workers is not None
        and env["torch_threads"] + workers > env["cpu_logical_cores"]
    )


def compile_cache_columns(rec: dict) -> dict:
    """For a compiled run: which torch.compile cache it started with (cold, shared, or unknown in records made
    before gpuscale recorded it) and how many files that cache held; nulls for an uncompiled run."""
    effective = (rec["variant"] or {}).get("effective") or {}
    if effective.get("compile", "none") == "none":
        return {"compile_cache": None, "compile_cache_files_at_start": None}
    return {
        "compile_cache": effective.get("compile_cache", "unknown"),
        "compile_cache_files_at_start": effective.get("compile_cache_files_at_start"),
    }


def flat_key(rec: dict) -> dict:
    """The record's key as columns, with its round (1 where it has none) and lease; a sweep becomes sweep_parameter /
    sweep_value (null on study runs)."""
    sweep = rec["key"].get("sweep") or {}
    return {
        **{k: v for k, v in rec["key"].items() if k != "sweep"},
        "round": rec["key"].get("round", 1),
        "lease": rec["conditions"]["lease"],
        "sweep_parameter": sweep.get("parameter"),
        "sweep_value": sweep.get("value"),
    }


def energy_columns(energy: dict | None) -> dict:
    if not energy:
        return {
            "gpu_joules_per_epoch": None,
            "cpu_joules_per_epoch": None,
            "gpu_images_per_joule": None,
            "energy_note": "not recorded (record schema 1 or not measured)",
        }
    notes = [f"{k}: {v['reason']}" for k, v in energy.items() if not v["available"]]
    return {
        "gpu_joules_per_epoch": energy["gpu"]["joules_per_epoch"],
        "cpu_joules_per_epoch": energy["cpu"]["joules_per_epoch"],
        "gpu_images_per_joule": energy["gpu"]["images_per_joule"],
        "energy_note": "; ".join(notes),
    }


PHASE_ORDER = record.PHASES


def phases_frame(loaded) -> pl.DataFrame:
    """Per run and phase: seconds per step, share of the step, and that share of a steady epoch."""
    rows = []
    for source, _, rec in loaded:
        profile = rec["phase_profile"]
        if not profile:
            continue
        epochs = rec["epochs"]
        steady = [e["train_seconds"] for e in (epochs[1:] or epochs)]
        epoch_seconds = sorted(steady)[len(steady) // 2]
        for phase in PHASE_ORDER:
            fraction = profile["phase_fractions"][phase]
            rows.append(
                {
                    "source": source,
                    **flat_key(rec),
                    "phase": phase,
                    "seconds_per_step": profile["phase_seconds_per_step"][phase],
                    "fraction": fraction,
                    "seconds_per_epoch": fraction * epoch_seconds,
                    "overhead_fraction": profile["overhead_fraction"],
                    "profile_steps": profile["steps"],
                }
            )
    return pl.DataFrame(rows, schema=PHASE_SCHEMA).sort([*KEY_COLUMNS, "phase"])


def sampling_frame(loaded) -> pl.DataFrame:
    """The sampled protocol checked on full runs: for each run timed in full whose epochs carry step marks, what
    timing only the first N steps of every epoch would have estimated for the total, against the measured total."""
    rows = []
    for source, _, rec in loaded:
        epochs = rec["epochs"]
        if not epochs or any(e["extrapolated"] or not e["step_marks"] for e in epochs):
            continue
        warmup = rec["settings"]["train"]["sample_warmup_steps"]
        marks = [{step: seconds for step, seconds in e["step_marks"]} for e in epochs]
        common = set.intersection(*(set(m) for m in marks))
        if warmup not in common:
            continue
        measured = sum(e["train_seconds"] for e in epochs)
        for n in sorted(s for s in common if s > warmup):
            estimates = [
                sampling.extrapolate(m[warmup], m[n], warmup, n, e["steps"]) for m, e in zip(marks, epochs, strict=True)
            ]
            errors = [est / e["train_seconds"] - 1 for est, e in zip(estimates, epochs, strict=True)]
            rows.append(
                {
                    "source": source,
                    **flat_key(rec),
                    "sampled_steps": n,
                    "warmup_steps": warmup,
                    "steps_per_epoch": epochs[0]["steps"],
                    "epochs": len(epochs),
                    "estimated_total_seconds": sum(estimates),
                    "measured_total_seconds": measured,
                    "error": sum(estimates) / measured - 1,
                    "epoch_error_min": min(errors),
                    "epoch_error_max": max(errors),
                }
            )
    return pl.DataFrame(rows, schema=SAMPLING_SCHEMA).sort([*KEY_COLUMNS, "sampled_steps"])


def conditions_frame(loaded) -> pl.DataFrame:
    """The machine state of every run: one row per record, sentinel (before / after its job) and component. Records
    made before schema 4 have no sentinel and no rows here (their lease is in the runs table)."""
    rows = [
        {
            "source": source,
            **flat_key(rec),
            "when": when,
            "component": name,
            **{k: component.get(k) for k in ("value", "unit", "faster", "spread")},
        }
        for source, _, rec in loaded
        for when in ("before", "after")
        for name, component in ((rec["conditions"].get(when) or {}).get("components") or {}).items()
    ]
    return pl.DataFrame(rows, schema=tables.CONDITIONS_SCHEMA).sort([*KEY_COLUMNS, "when", "component"])


def epochs_frame(loaded) -> pl.DataFrame:
    rows = [
        {"source": source, **flat_key(rec), **{k: e[k] for k in EPOCH_SCHEMA if k in e}}
        for source, _, rec in loaded
        for e in rec["epochs"]
    ]
    return pl.DataFrame(rows, schema=EPOCH_SCHEMA).sort([*KEY_COLUMNS, "epoch"])


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


def variant_gains(runs: pl.DataFrame, baseline: str = "paper") -> pl.DataFrame:
    """Per source, model and device: seconds per epoch of each variant against the baseline variant.

    Splits a speedup into what the hardware gives (the baseline's CPU-vs-GPU ratio) and what the way of
    running it adds (each device's own gain from baseline to another variant).
    """
    per = (
        runs.filter((pl.col("status") == "measured") & pl.col("sweep_parameter").is_null())
        .group_by(["source", "model", "device", "variant"])
        .agg(pl.col("epoch_seconds_mean").median(), pl.col("steady_epoch_seconds_median").median())
    )
    base = (
        per.filter(pl.col("variant") == baseline)
        .drop("variant")
        .rename({"epoch_seconds_mean": "baseline_seconds", "steady_epoch_seconds_median": "baseline_steady_seconds"})
    )
    other = per.filter(pl.col("variant") != baseline)
    # gain: over the whole run (a compiled variant pays its compilation in the first epoch); steady_gain: after it
    return (
        other.join(base, on=["source", "model", "device"], how="inner")
        .with_columns(
            pl.lit(baseline).alias("baseline"),
            (pl.col("baseline_seconds") / pl.col("epoch_seconds_mean")).alias("gain"),
            (pl.col("baseline_steady_seconds") / pl.col("steady_epoch_seconds_median")).alias("steady_gain"),
        )
        .select(
            "source",
            "model",
            "device",
            "baseline",
            "variant",
            "baseline_seconds",
            pl.col("epoch_seconds_mean").alias("variant_seconds"),
            "gain",
            "baseline_steady_seconds",
            pl.col("steady_epoch_seconds_median").alias("variant_steady_seconds"),
            "steady_gain",
        )
        .sort(["source", "model", "device", "variant"])
    )


def scaling_frame(runs: pl.DataFrame) -> pl.DataFrame:
    """Data-parallel runs against one process of the same kind (cuda-ddpN against cuda, cpu-ddpN against cpu),
    per source, model and variant: speedup of the steady epoch (the first epoch holds start-up and compilation)
    and scaling efficiency = speedup / processes."""
    measured = runs.filter((pl.col("status") == "measured") & pl.col("sweep_parameter").is_null()).with_columns(
        pl.coalesce("steady_epoch_seconds_median", "epoch_seconds_mean").alias("epoch_seconds"),
        pl.col("device").str.replace(typed.DATA_PARALLEL_SUFFIX, "").alias("base_device"),
    )
    per = measured.group_by(["source", "model", "variant", "device", "base_device"]).agg(
        pl.col("world_size").first(),
        pl.col("global_batch_size").first(),
        pl.col("epoch_seconds").median(),
        pl.col("extrapolated").any(),
    )
    parallel = per.filter(pl.col("world_size") > 1)
    single = per.filter(pl.col("world_size") == 1).select(
        "source",
        "model",
        "variant",
        pl.col("device").alias("base_device"),
        pl.col("epoch_seconds").alias("base_epoch_seconds"),
        pl.col("extrapolated").alias("base_extrapolated"),
    )
    out = parallel.join(single, on=["source", "model", "variant", "base_device"], how="left").with_columns(
        (pl.col("base_epoch_seconds") / pl.col("epoch_seconds")).alias("speedup"),
        pl.col("extrapolated") | pl.col("base_extrapolated").fill_null(False),
    )
    out = out.with_columns((pl.col("speedup") / pl.col("world_size")).alias("efficiency"))
    return out.select(list(SCALING_SCHEMA)).cast(SCALING_SCHEMA).sort(["source", "variant", "model", "device"])


def sweeps_frame(runs: pl.DataFrame) -> pl.DataFrame:
    """Sweep runs: seconds per steady epoch and throughput against the swept value, relative to the smallest value."""
    sweeps = runs.filter((pl.col("status") == "measured") & pl.col("sweep_parameter").is_not_null()).with_columns(
        pl.coalesce("steady_epoch_seconds_median", "epoch_seconds_mean").alias("epoch_seconds"),
        pl.coalesce("steady_images_per_second", "train_images_per_second").alias("images_per_second"),
    )
    group = ["source", "model", "device", "variant", "sweep_parameter"]
    return (
        sweeps.group_by([*group, "sweep_value"])
        .agg(
            pl.col("epoch_seconds").median(),
            pl.col("images_per_second").median(),
            pl.col("extrapolated").any(),
            pl.col("oversubscribed").any(),
        )
        .sort([*group, "sweep_value"])
        .with_columns(
            pl.col("sweep_value").first().over(group).alias("baseline_value"),
            (pl.col("epoch_seconds").first().over(group) / pl.col("epoch_seconds")).alias("speedup_vs_baseline"),
        )
        .rename({"sweep_parameter": "parameter", "sweep_value": "value"})
    )


def thread_fits(sweeps: pl.DataFrame) -> list[dict]:
    rows = []
    threads = sweeps.filter(pl.col("parameter") == "threads")
    for (source, model, variant), frame in threads.group_by(["source", "model", "variant"], maintain_order=True):
        fit = analysis.thread_fit(frame["value"], frame["epoch_seconds"])
        rows.append(
            _fit_row(
                source,
                variant,
                Fit.THREADS,
                fit,
                fit.get("parallel_fraction"),
                fit.get("parallel_fraction_se"),
                model=model,
            )
        )
    return rows


def fits(speedup: pl.DataFrame, sweeps: pl.DataFrame | None = None) -> tuple[pl.DataFrame, dict]:
    """Scaling and Amdahl fits per (source, variant), plus the paper's own three points."""
    rows, summary = [], {}
    groups = [
        (key, frame)
        for key, frame in speedup.filter(pl.col("speedup").is_not_null()).group_by(
            ["source", "variant"], maintain_order=True
        )
    ]
    groups.append(((PAPER_SOURCE, "paper"), paper_frame()))
    for (source, variant), frame in sorted(groups, key=lambda g: (g[0][0], g[0][1])):
        group_fits = {"parameters": analysis.scaling_fit(frame["parameters"], frame["speedup"])}
        if "train_flops_per_image" in frame.columns:
            group_fits["training FLOPs per image"] = analysis.scaling_fit(
                frame["train_flops_per_image"], frame["speedup"]
            )
        amdahl = analysis.amdahl_fit(frame["cpu_epoch_seconds"], frame["gpu_epoch_seconds"])
        leases, lease_note = fit_leases(frame)
        for predictor, fit in group_fits.items():
            rows.append(
                _fit_row(source, variant, SCALING_FITS[predictor], fit, fit.get("exponent"), fit.get("exponent_se"))
                | _with_leases(fit, leases, lease_note)
            )
        rows.append(
            _fit_row(
                source,
                variant,
                Fit.AMDAHL,
                amdahl,
                amdahl.get("acceleration"),
                amdahl.get("acceleration_se"),
                amdahl.get("serial_seconds"),
                amdahl.get("serial_seconds_se"),
            )
            | _with_leases(amdahl, leases, lease_note)
        )
        summary[f"{source} / {variant}"] = {
            "scaling": group_fits,
            "amdahl": amdahl,
            "verdict": analysis.compare_predictors(group_fits),
        }
    if sweeps is not None:
        rows += thread_fits(sweeps)
    return pl.DataFrame(rows, schema=FITS_SCHEMA), summary


def fit_leases(frame: pl.DataFrame) -> tuple[int | None, str]:
    """How many machine leases the fitted speedups' runs span, and what the fit's note says of it: across models
    a comparison is honest only within one lease. None (and a note) where a lease was not recorded; the paper's
    points have no lease (None, no note)."""
    if "cpu_lease_ids" not in frame.columns or frame.is_empty():
        return None, ""
    found = {
        lease
        for column in ("cpu_lease_ids", "gpu_lease_ids")
        for text in frame[column].drop_nulls()
        for lease in text.split(", ")
    }
    if UNKNOWN_LEASE in found:
        known = len(found - {UNKNOWN_LEASE})
        return None, "lease not recorded for some models" + (f" (the others span {known})" if known else "")
    if len(found) > 1:
        return len(found), f"the models' speedups span {len(found)} machine leases: across models this crosses leases"
    return len(found), ""


def _with_leases(fit: dict, leases: int | None, note: str) -> dict:
    """A scaling or Amdahl fit row's lease count, and its note on leases after whatever else it says."""
    row_note = fit.get("reason") or fit.get("note", "")
    return {"leases": leases, "note": "; ".join(n for n in (row_note, note if fit["ok"] else "") if n)}


# The scaling fits by predictor (the fit summary in notes.json and metrics keep these names).
SCALING_FITS = {"parameters": Fit.SCALING_PARAMETERS, "training FLOPs per image": Fit.SCALING_FLOPS}


def _fit_row(
    source, variant, fit_id: Fit, fit, estimate, estimate_se, intercept=None, intercept_se=None, model=None
) -> dict:
    return {
        "source": source,
        "variant": variant,
        "fit": FIT_LABELS[fit_id].format(model=model),
        "ok": fit["ok"],
        "points": fit["n"],
        "estimate": estimate,
        "estimate_se": estimate_se,
        "intercept": intercept if intercept is not None else fit.get("intercept"),
        "intercept_se": intercept_se if intercept_se is not None else fit.get("intercept_se"),
        "r2": fit.get("r2"),
        "note": fit.get("reason") or fit.get("note", ""),
        "fit_id": fit_id.value,
        "model": model,
        "leases": None,
    }


def overlaps(runs: pl.DataFrame) -> list[dict]:
    """Timing runs on one host whose [started_at, finished_at] intervals intersect (made by hand, not by the
    workflow)."""
    measured = runs.filter(pl.col("status") == "measured").select(
        "source",
        "hostname",
        "model",
        "device",
        "variant",
        "seed",
        pl.col("started_at").str.to_datetime(time_zone="UTC"),
        pl.col("finished_at").str.to_datetime(time_zone="UTC"),
    )
    found = []
    for (source, host), frame in measured.group_by(["source", "hostname"], maintain_order=True):
        items = frame.sort("started_at").to_dicts()
        for i, a in enumerate(items):
            for b in items[i + 1 :]:
                if b["started_at"] < a["finished_at"]:
                    found.append(
                        {
                            "source": source,
                            "host": host,
                            "runs": [f"{r['model']}/{r['device']}/{r['variant']}/seed{r['seed']}" for r in (a, b)],
                        }
                    )
    return found


def _clean(value):
    if isinstance(value, float) and (math.isnan(value) or math.isinf(value)):
        return None
    if isinstance(value, dict):
        return {k: _clean(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_clean(v) for v in value]
    return value


def run(
    records: list[Path],
    reference: list[str],
    out_dir: Path,
    metrics_path: Path,
    tolerance: float,
    skip_bad: bool = False,
    pairing: str = SAME_LEASE,
) -> dict:
    """Aggregate this host's records (the study's, listed) and every record under each reference folder."""
    sources = {LOCAL_SOURCE: [Path(p) for p in records]}
    for folder in reference:
        if not Path(folder).is_dir():
            raise AggregateError(f"report.reference: {folder} is not a folder (list folders under reference/)")
        # A reference folder is one host's measurements: never paired with this host's runs.
        sources[f"reference: {Path(folder).name}"] = find_records(Path(folder))
    loaded, skipped = load_all(sources, skip_bad=skip_bad, lenient=tuple(s for s in sources if s != LOCAL_SOURCE))
    runs = runs_frame(loaded)
    epochs = epochs_frame(loaded)
    speedup = speedup_frame(runs, tolerance, pairing)
    phases = phases_frame(loaded)
    gains = variant_gains(runs)
    sweeps = sweeps_frame(runs)
    sampling = sampling_frame(loaded)
    scaling = scaling_frame(runs)
    fit_table, summary = fits(speedup, sweeps)
    out_dir = Path(out_dir)
    frames = {
        "runs": runs,
        "epochs": epochs,
        "speedup": speedup,
        "fits": fit_table,
        "phases": phases,
        "gains": gains,
        "sweeps": sweeps,
        "sampling": sampling,
        "scaling": scaling,
        "conditions": conditions_frame(loaded),
    }
    extras = {
        "skipped_records": skipped,
        "overlapping_runs": overlaps(runs),
        "fit_summary": _clean(summary),
        "sources": {k: len(v) for k, v in sources.items()},
        "pairing": pairing,
    }
    tables.write_tables(frames, extras, out_dir)
    metrics_mod.write(metrics_path, speedup.filter(pl.col("source") == LOCAL_SOURCE).to_dicts())  # this host only
    log.info(
        "aggregated %d records (%d skipped) from %d source(s) -> %s", len(loaded), len(skipped), len(sources), out_dir
    )
    return {**frames, **extras}
