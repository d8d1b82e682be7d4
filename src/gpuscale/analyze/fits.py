"""The tables derived from the runs and the speedups: each variant's gain per device, data-parallel scaling, the
sweeps, and the fits (scaling and Amdahl laws per source and variant, and the CPU thread sweeps)."""

from __future__ import annotations

import polars as pl

from gpuscale.analyze import analysis
from gpuscale.analyze.speedup import UNKNOWN_LEASE
from gpuscale.analyze.tables import FIT_LABELS, FITS_SCHEMA, PAPER_SOURCE, SCALING_SCHEMA, Fit, paper_frame
from gpuscale.contract import settings as typed


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
