"""The aggregation stage: run records -> Polars tables, metrics and fits.

Reads every record through gpuscale.record.load() (which upgrades older schema versions, so no fallbacks
across versions here); writes the tables of gpuscale.tables to results/tables
as CSV (to read) and Parquet (typed, for the charts and the report), notes.json and results/metrics.json.
Output is deterministic: rows sorted, columns in a fixed order, so rerunning on the same records changes no byte.
"""

from __future__ import annotations

import logging
import math
from pathlib import Path

import polars as pl

from gpuscale import analysis, tables
from gpuscale.analyze import metrics as metrics_mod
from gpuscale.contract import fsutil, record, sampling
from gpuscale.contract import settings as typed

# The table contract lives in gpuscale.tables; these names stay importable from here for one release.
from gpuscale.tables import (  # noqa: F401
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

log = logging.getLogger("gpuscale.aggregate")


class AggregateError(RuntimeError):
    """Records that cannot be aggregated; str() names the file(s)."""


def find_records(folder: Path) -> list[Path]:
    return sorted(p for p in Path(folder).rglob("*.json") if not p.name.startswith("."))


def load_all(sources: dict[str, list[Path]], skip_bad: bool = False) -> tuple[list[tuple[str, Path, dict]], list[dict]]:
    """(source, path, record) for every listed record; bad ones raise, or are listed as skipped when asked."""
    loaded, skipped = [], []
    seen: dict[tuple, Path] = {}
    for source, paths in sources.items():
        for path in paths:
            try:
                rec = record.load(path)
            except record.RecordError as err:
                if not skip_bad:
                    raise AggregateError(f"{err} (fix or remove it, or set report.skip_bad_records: true)") from None
                skipped.append({"path": str(path), "reason": str(err)})
                continue
            key = (source, *record.key(rec))
            if key in seen:
                raise AggregateError(f"two records for {'/'.join(map(str, key))}: {seen[key]} and {path}; remove one")
            seen[key] = path
            loaded.append((source, path, rec))
    return loaded, skipped


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
    """The record's key as columns; a sweep becomes sweep_parameter / sweep_value (null on study runs)."""
    sweep = rec["key"].get("sweep") or {}
    return {
        **{k: v for k, v in rec["key"].items() if k != "sweep"},
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


def epochs_frame(loaded) -> pl.DataFrame:
    rows = [
        {"source": source, **flat_key(rec), **{k: e[k] for k in EPOCH_SCHEMA if k in e}}
        for source, _, rec in loaded
        for e in rec["epochs"]
    ]
    return pl.DataFrame(rows, schema=EPOCH_SCHEMA).sort([*KEY_COLUMNS, "epoch"])


def speedup_frame(runs: pl.DataFrame, tolerance: float) -> pl.DataFrame:
    """Per (source, model, variant): CPU vs GPU seconds (median over seeds), speedups, accuracy parity.

    CPU and GPU are only ever paired within one source (one host's records), never across hosts.
    """
    out = _speedup_columns(_cpu_beside_gpu(runs), tolerance)
    intervals = [
        analysis.bootstrap_ratio_ci(c or [], g or [])
        for c, g in zip(
            out["epoch_seconds_per_seed_cpu"].to_list(), out["epoch_seconds_per_seed"].to_list(), strict=True
        )
    ]
    out = out.with_columns(
        pl.Series("speedup_ci_low", [lo for lo, _ in intervals], dtype=pl.Float64),
        pl.Series("speedup_ci_high", [hi for _, hi in intervals], dtype=pl.Float64),
    ).drop("epoch_seconds_per_seed", "epoch_seconds_per_seed_cpu")
    return out.sort(["source", "variant", "parameters", "model", "gpu_device"], nulls_last=True)


def _cpu_beside_gpu(runs: pl.DataFrame) -> pl.DataFrame:
    """Per (source, model, variant, GPU device): the GPU's medians over seeds with the CPU's (suffix _cpu)."""
    # single-device runs only: data-parallel ones (cuda-ddpN, cpu-ddpN) go to the scaling table
    measured = runs.filter(
        (pl.col("status") == "measured") & pl.col("sweep_parameter").is_null() & (pl.col("world_size") == 1)
    )
    per_device = measured.group_by(["source", "model", "variant", "device"]).agg(
        pl.col("parameters").first(),
        pl.col("train_flops_per_image").first(),
        pl.col("host").first(),
        pl.col("gpu_name").first(),
        pl.col("synthetic").any(),
        pl.col("extrapolated").any(),
        pl.len().alias("seeds"),
        pl.col("total_train_seconds").median(),
        pl.col("epoch_seconds_mean").median(),
        pl.col("steady_epoch_seconds_median").median(),
        pl.col("final_test_accuracy").median(),
        pl.col("epochs").first(),
        pl.col("train_images").first(),
        pl.col("epoch_seconds_mean").alias("epoch_seconds_per_seed"),
    )
    cpu = per_device.filter(pl.col("device") == "cpu").drop("device", "gpu_name")
    gpu = per_device.filter(pl.col("device") != "cpu")
    joined = gpu.join(cpu, on=["source", "model", "variant"], how="full", suffix="_cpu", coalesce=True)
    missing = (
        runs.filter((pl.col("status") == "not_measured") & pl.col("sweep_parameter").is_null())
        .group_by(["source", "model", "variant"])
        .agg(pl.col("not_measured_reason").first().alias("gpu_not_measured_reason"))
    )
    return joined.join(missing, on=["source", "model", "variant"], how="left")


def _speedup_columns(joined: pl.DataFrame, tolerance: float) -> pl.DataFrame:
    either_sampled = pl.col("extrapolated").fill_null(False) | pl.col("extrapolated_cpu").fill_null(False)
    return joined.select(
        "source",
        "model",
        "variant",
        pl.coalesce("parameters", "parameters_cpu").alias("parameters"),
        pl.coalesce("train_flops_per_image", "train_flops_per_image_cpu").alias("train_flops_per_image"),
        pl.coalesce("host", "host_cpu").alias("host"),
        pl.col("device").alias("gpu_device"),
        "gpu_name",
        pl.col("total_train_seconds_cpu").alias("cpu_seconds"),
        pl.col("total_train_seconds").alias("gpu_seconds"),
        pl.col("epoch_seconds_mean_cpu").alias("cpu_epoch_seconds"),
        pl.col("epoch_seconds_mean").alias("gpu_epoch_seconds"),
        pl.col("steady_epoch_seconds_median_cpu").alias("cpu_steady_epoch_seconds"),
        pl.col("steady_epoch_seconds_median").alias("gpu_steady_epoch_seconds"),
        (pl.col("epoch_seconds_mean_cpu") / pl.col("epoch_seconds_mean")).alias("speedup"),
        (pl.col("steady_epoch_seconds_median_cpu") / pl.col("steady_epoch_seconds_median")).alias("steady_speedup"),
        pl.col("final_test_accuracy_cpu").alias("cpu_accuracy"),
        pl.col("final_test_accuracy").alias("gpu_accuracy"),
        # a sampled run trained on a few steps per epoch: its accuracy is no 10-epoch accuracy, so no parity
        pl.when(either_sampled)
        .then(None)
        .otherwise(pl.col("final_test_accuracy") - pl.col("final_test_accuracy_cpu"))
        .alias("accuracy_difference"),
        ((pl.col("epochs") != pl.col("epochs_cpu")) | (pl.col("train_images") != pl.col("train_images_cpu")))
        .fill_null(False)
        .alias("protocol_mismatch"),
        (pl.col("synthetic").fill_null(False) | pl.col("synthetic_cpu").fill_null(False)).alias("synthetic"),
        either_sampled.alias("extrapolated"),
        pl.col("extrapolated_cpu").fill_null(False).alias("cpu_extrapolated"),
        pl.col("extrapolated").fill_null(False).alias("gpu_extrapolated"),
        pl.col("seeds").alias("gpu_seeds"),
        pl.col("seeds_cpu").alias("cpu_seeds"),
        "gpu_not_measured_reason",
        "epoch_seconds_per_seed",
        "epoch_seconds_per_seed_cpu",
    ).with_columns(
        (pl.col("accuracy_difference").abs() <= tolerance).alias("accuracy_parity"),
    )


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
        for predictor, fit in group_fits.items():
            rows.append(
                _fit_row(source, variant, SCALING_FITS[predictor], fit, fit.get("exponent"), fit.get("exponent_se"))
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
        )
        summary[f"{source} / {variant}"] = {
            "scaling": group_fits,
            "amdahl": amdahl,
            "verdict": analysis.compare_predictors(group_fits),
        }
    if sweeps is not None:
        rows += thread_fits(sweeps)
    return pl.DataFrame(rows, schema=FITS_SCHEMA), summary


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
) -> dict:
    """Aggregate this host's records (the study's, listed) and every record under each reference folder."""
    sources = {LOCAL_SOURCE: [Path(p) for p in records]}
    for folder in reference:
        if not Path(folder).is_dir():
            raise AggregateError(f"report.reference: {folder} is not a folder (list folders under reference/)")
        # A reference folder is one host's measurements: never paired with this host's runs.
        sources[f"reference: {Path(folder).name}"] = find_records(Path(folder))
    loaded, skipped = load_all(sources, skip_bad=skip_bad)
    runs = runs_frame(loaded)
    epochs = epochs_frame(loaded)
    speedup = speedup_frame(runs, tolerance)
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
    }
    extras = {
        "skipped_records": skipped,
        "overlapping_runs": overlaps(runs),
        "fit_summary": _clean(summary),
        "sources": {k: len(v) for k, v in sources.items()},
    }
    tables.write_tables(frames, extras, out_dir)
    metrics_mod.write(metrics_path, speedup.filter(pl.col("source") == LOCAL_SOURCE).to_dicts())  # this host only
    log.info(
        "aggregated %d records (%d skipped) from %d source(s) -> %s", len(loaded), len(skipped), len(sources), out_dir
    )
    return {**frames, **extras}
