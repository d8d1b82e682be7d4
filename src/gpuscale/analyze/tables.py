"""The table contract between aggregation and the charts and report: which tables there are, their
columns and types, the fit identifiers, and reading and writing them. Torch-free, and imports no stage:
gpuscale.analyze.aggregate writes through it, gpuscale.present.charts and gpuscale.present.report read through it.

Each table is written twice into one folder (results/tables): NAME.csv to read, NAME.parquet typed
for the readers; notes.json holds what is not a table. The workflow's output lists (report.smk and,
generated, dvc.yaml) come from `outputs()`, which lives without polars in gpuscale.analyze.tablefiles.
"""

from __future__ import annotations

import enum
import json
from pathlib import Path

import polars as pl

from gpuscale.analyze import paper
from gpuscale.analyze.tablefiles import NOTES, TABLES, outputs  # noqa: F401 (the names, polars-free; read here)
from gpuscale.contract import fsutil

LOCAL_SOURCE = "this host"
PAPER_SOURCE = f"paper: {paper.HARDWARE['gpu_short']} vs {paper.HARDWARE['cpu_short']}"
# The columns that name one run (a source's record key); every per-run table starts with them.
KEY_SCHEMA = {
    "source": pl.String,
    "model": pl.String,
    "device": pl.String,
    "variant": pl.String,
    "seed": pl.Int64,
    "round": pl.Int64,  # the study's round (study.rounds: the same run repeated); 1 where the record has none
    "lease": pl.String,  # the machine lease (boot id) it ran in, 'unknown' without one: a repeat in another lease is
    # another run (gpuscale.analyze.aggregate.load_all)
    "sweep_parameter": pl.String,
    "sweep_value": pl.Int64,
}
KEY_COLUMNS = list(KEY_SCHEMA)


class Fit(enum.StrEnum):
    """What a row of the fits table fits (its `fit_id`); `fit` keeps the human label."""

    SCALING_PARAMETERS = "scaling_parameters"  # log speedup ~ log parameters
    SCALING_FLOPS = "scaling_flops"  # log speedup ~ log training FLOPs per image
    AMDAHL = "amdahl"  # T_gpu = s + T_cpu / k per epoch
    THREADS = "threads"  # CPU epoch time against threads, T = a + b / N (one per model)


FIT_LABELS = {
    Fit.SCALING_PARAMETERS: "log speedup ~ log parameters",
    Fit.SCALING_FLOPS: "log speedup ~ log training FLOPs per image",
    Fit.AMDAHL: "T_gpu = s + T_cpu / k (per epoch)",
    Fit.THREADS: "CPU threads, {model}: T = a + b / N (estimate = P)",
}


RUN_SCHEMA = {
    **KEY_SCHEMA,
    "status": pl.String,
    "not_measured_reason": pl.String,
    "drifted": pl.Boolean,  # the after-sentinel moved beyond its noise; null without both sentinels
    "label": pl.String,
    "host": pl.String,
    "hostname": pl.String,
    "cpu_model": pl.String,
    "cpu_logical_cores": pl.Int64,
    "torch_threads": pl.Int64,
    "loader_workers": pl.Int64,
    "oversubscribed": pl.Boolean,
    "compile_cache": pl.String,
    "compile_cache_files_at_start": pl.Int64,
    "gpu_name": pl.String,
    "gpu_driver": pl.String,
    "torch_version": pl.String,
    "cuda_version": pl.String,
    "cudnn_version": pl.Int64,
    "git_commit": pl.String,
    "parameters": pl.Int64,
    "train_flops_per_image": pl.Int64,
    "epochs": pl.Int64,
    "batch_size": pl.Int64,
    "world_size": pl.Int64,
    "global_batch_size": pl.Int64,
    "data_source": pl.String,
    "synthetic": pl.Boolean,
    "train_images": pl.Int64,
    "test_images": pl.Int64,
    "manifest_sha256": pl.String,
    "total_train_seconds": pl.Float64,
    "epoch_seconds_mean": pl.Float64,
    "warmup_epoch_seconds": pl.Float64,
    "steady_epoch_seconds_median": pl.Float64,
    "steady_epoch_log_sd": pl.Float64,  # sd of log(steady epoch seconds) within the run: epoch-to-epoch spread
    "total_eval_seconds": pl.Float64,
    "train_images_per_second": pl.Float64,
    "steady_images_per_second": pl.Float64,
    "extrapolated": pl.Boolean,
    "final_test_accuracy": pl.Float64,
    "gpu_joules_per_epoch": pl.Float64,
    "cpu_joules_per_epoch": pl.Float64,
    "gpu_images_per_joule": pl.Float64,
    "energy_note": pl.String,
    "phase_overhead_fraction": pl.Float64,
    "started_at": pl.String,
    "finished_at": pl.String,
    "record_path": pl.String,
    "record_sha256": pl.String,
}


EPOCH_SCHEMA = {
    **KEY_SCHEMA,
    "epoch": pl.Int64,
    "warmup": pl.Boolean,
    "train_seconds": pl.Float64,
    "eval_seconds": pl.Float64,
    "images_per_second": pl.Float64,
    "train_loss": pl.Float64,
    "train_accuracy": pl.Float64,
    "test_loss": pl.Float64,
    "test_accuracy": pl.Float64,
    "learning_rate": pl.Float64,
}


PHASE_SCHEMA = {
    **KEY_SCHEMA,
    "phase": pl.String,
    "seconds_per_step": pl.Float64,
    "fraction": pl.Float64,
    "seconds_per_epoch": pl.Float64,
    "overhead_fraction": pl.Float64,
    "profile_steps": pl.Int64,
}


SAMPLING_SCHEMA = {
    **KEY_SCHEMA,
    "sampled_steps": pl.Int64,
    "warmup_steps": pl.Int64,
    "steps_per_epoch": pl.Int64,
    "epochs": pl.Int64,
    "estimated_total_seconds": pl.Float64,
    "measured_total_seconds": pl.Float64,
    "error": pl.Float64,
    "epoch_error_min": pl.Float64,
    "epoch_error_max": pl.Float64,
}


SCALING_SCHEMA = {
    "source": pl.String,
    "model": pl.String,
    "variant": pl.String,
    "device": pl.String,
    "base_device": pl.String,
    "world_size": pl.Int64,
    "global_batch_size": pl.Int64,
    "epoch_seconds": pl.Float64,
    "base_epoch_seconds": pl.Float64,
    "speedup": pl.Float64,
    "efficiency": pl.Float64,
    "extrapolated": pl.Boolean,
}


FITS_SCHEMA = {
    "source": pl.String,
    "variant": pl.String,
    "fit": pl.String,
    "ok": pl.Boolean,
    "points": pl.Int64,
    "estimate": pl.Float64,
    "estimate_se": pl.Float64,
    "intercept": pl.Float64,
    "intercept_se": pl.Float64,
    "r2": pl.Float64,
    "note": pl.String,
    "fit_id": pl.String,  # a Fit value
    "model": pl.String,  # the model of a per-model fit (threads), else null
    "leases": pl.Int64,  # the machine leases the fitted speedups were paired in (null: a lease not recorded)
}


# One row per record, sentinel (before / after the job) and component: the machine state the run was measured in.
CONDITIONS_SCHEMA = {
    **KEY_SCHEMA,
    "when": pl.String,  # before or after
    "component": pl.String,  # a gpuscale.measure.sentinel component
    "value": pl.Float64,  # in base units (images/s, FLOP/s, bytes/s, s/op)
    "unit": pl.String,
    "faster": pl.String,  # higher or lower: which way a faster machine moves the value
    "spread": pl.Float64,  # (max - min) / median over the sentinel's repeats
}

# The tables whose columns are fixed here; speedup, gains and sweeps are derived from runs by aggregate.
SCHEMAS = {
    "runs": RUN_SCHEMA,
    "epochs": EPOCH_SCHEMA,
    "fits": FITS_SCHEMA,
    "phases": PHASE_SCHEMA,
    "sampling": SAMPLING_SCHEMA,
    "scaling": SCALING_SCHEMA,
    "conditions": CONDITIONS_SCHEMA,
}


def paper_frame() -> pl.DataFrame:
    """The paper's table in the speedup table's terms (per-epoch seconds: its totals over 10 epochs)."""
    return pl.DataFrame(paper.ROWS).with_columns(
        (pl.col("cpu_seconds") / paper.EPOCHS).alias("cpu_epoch_seconds"),
        (pl.col("gpu_seconds") / paper.EPOCHS).alias("gpu_epoch_seconds"),
        pl.lit(PAPER_SOURCE).alias("source"),
    )


def write_tables(frames: dict[str, pl.DataFrame], notes: dict, out_dir: Path) -> None:
    """Every table as CSV and Parquet, and notes.json; each file replaced atomically. notes.json, which the
    charts and the report require, goes first and comes back last: an interrupted write leaves a set of tables
    no later stage takes for whole (they say to run the aggregate stage)."""
    out_dir = Path(out_dir)
    if set(frames) != set(TABLES):
        raise ValueError(f"tables: expected {', '.join(TABLES)}; got {', '.join(frames)}")
    (out_dir / NOTES).unlink(missing_ok=True)
    for name in TABLES:
        frame = frames[name]
        if name in SCHEMAS and dict(frame.schema) != SCHEMAS[name]:
            raise ValueError(f"tables: {name} does not have the columns and types gpuscale.analyze.tables declares")
        with fsutil.atomic_path(out_dir / f"{name}.csv") as tmp:
            frame.write_csv(tmp)
    for name in TABLES:
        with fsutil.atomic_path(out_dir / f"{name}.parquet") as tmp:
            frames[name].write_parquet(tmp, statistics=False)
    fsutil.write_json(out_dir / NOTES, notes)


def read_tables(out_dir: Path) -> dict:
    """The tables and notes as the aggregation stage wrote them (for charts and the report)."""
    out_dir = Path(out_dir)
    # Parquet keeps the column types (a CSV of an all-empty column would come back as text).
    tables = {name: pl.read_parquet(out_dir / f"{name}.parquet") for name in TABLES}
    tables.update(json.loads((out_dir / NOTES).read_text()))
    return tables


# Fits are found by their fit_id (Fit), never by label text.
FIT_PARAMETERS = Fit.SCALING_PARAMETERS
FIT_FLOPS = Fit.SCALING_FLOPS


def r2_by_fit(fits: pl.DataFrame, source: str, variant: str) -> dict[str, float]:
    return {
        row["fit_id"]: row["r2"]
        for row in fits.filter((pl.col("source") == source) & (pl.col("variant") == variant) & pl.col("ok")).iter_rows(
            named=True
        )
    }


def verdict(fits: pl.DataFrame, source: str, variant: str, short: bool = False) -> str:
    """'R² 0.89 against training FLOPs per image, 0.40 against parameters' for one source and variant."""
    r2 = r2_by_fit(fits, source, variant)
    if FIT_FLOPS in r2 and FIT_PARAMETERS in r2:
        if short:
            return f"R² {r2[FIT_FLOPS]:.2f} against FLOPs, {r2[FIT_PARAMETERS]:.2f} against parameters"
        return f"R² {r2[FIT_FLOPS]:.2f} against training FLOPs per image, {r2[FIT_PARAMETERS]:.2f} against parameters"
    return ""
