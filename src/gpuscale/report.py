"""The report stage: one self-contained HTML page (reports/index.html) that works offline.

The Vega libraries are inlined once (vl-convert's bundle); each chart is its Vega-Lite spec from the
charts stage; tables come from great_tables; everything else goes through a Jinja2 template with
autoescaping, so text from params, records or file names cannot inject markup.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
from pathlib import Path

import jinja2
import polars as pl
from great_tables import GT, loc, style

from gpuscale import aggregate, charts, fsutil, paper

DATA_FILES = ("templates/report.html.j2",)  # package data this module reads (gpuscale.deps)
log = logging.getLogger("gpuscale.report")

CHART_HELP = {
    "speedup_vs_parameters": "Each point is one model: CPU seconds per epoch over GPU seconds per epoch, against its "
    "parameter count, both axes logarithmic; a vertical bar is the 95% bootstrap interval over seeds, where a model "
    "has several. A straight dashed line is a power law fitted per source; its slope is "
    "the exponent. The paper's three points are shown for comparison.",
    "speedup_vs_flops": "The same speedups against the compute one training image needs (forward + backward FLOPs). "
    "If speedup is driven by work per image rather than by parameter count, these points lie closer to their line.",
    "amdahl": "Amdahl's law with P estimated from the fit T_gpu = s + T_cpu / k across models (s: seconds per epoch "
    "the GPU does not accelerate, k: how much faster it runs the rest). Each curve is one model's S(N); the marker "
    "is its measured speedup, placed at N = k·P; a hollow marker means its source's k is undetermined (see the fits "
    "table), so its place along N is not a measurement. Curves flatten at 1/(1−P): the serial share caps the speedup.",
    "phases": "Where a training step's time goes: each bar splits one run's step into waiting for data (the "
    "loader), the host-to-device copy, forward, backward and the optimizer step, as shares. They come from separate "
    "instrumented steps after training (CUDA events on the GPU), so the headline times stay clean; the tooltip gives "
    "each phase's seconds per steady epoch (share × steady epoch time) and the instrumentation's own overhead. "
    "This is where the paper's claim that data transfer is 30-40% of the small CNN's GPU time can be checked: "
    "compare data wait with host-to-device copy.",
    "threads": "CPU thread sweep: each point is one run with N threads, its steady epoch time against the run with "
    "the fewest threads. The dashed curve is Amdahl's law fitted to the same points (T = a + b / N, P = b / (a + b)): "
    "a measured parallel fraction with a real N, where the GPU chart above can only infer one. A faded point is "
    "a run whose torch threads plus DataLoader workers outnumbered the logical cores: there the loader and the "
    "compute threads competed for cores, which Amdahl's law does not model (the fit still uses the point).",
    "batch": "GPU batch-size sweep: training images per second against batch size. Where the curve flattens the "
    "GPU (or the input pipeline feeding it) is saturated.",
    "epoch_seconds": "Mean seconds per training epoch (evaluation excluded), by model and device, median over seeds.",
    "throughput": "Training images per second by model and device.",
    "scaling": "Data-parallel runs (cuda-ddpN: N GPUs; cpu-ddpN: N CPU processes) against one device of the same kind: "
    "steady-epoch speedup against the number of processes; the dashed line is perfect scaling. Each "
    "process takes train.batch_size (distributed_batch: per_process), so the global batch grows with N.",
    "accuracy": "Final test accuracy on the CPU against the GPU, per model. Points inside the green band agree "
    "within the tolerance (report.accuracy_tolerance); the diagonal is perfect agreement.",
}


def _fmt_seconds(value) -> str:
    return "—" if value is None else f"{value:,.2f}"


def _interval(row: dict) -> str:
    if row.get("speedup_ci_low") is None:
        return "one seed per device" if row["speedup"] is not None else ""
    return f"{row['speedup_ci_low']:.2f}–{row['speedup_ci_high']:.2f}×"


def _accuracy(value: float | None, sampled: bool = False) -> str | None:
    """Final test accuracy as shown in the headline; a sampled run trained on a few steps per epoch, so its
    accuracy is no 10-epoch accuracy and is shown as such, not beside a full run's as if comparable."""
    if value is None:
        return None
    return f"({value:.2%} after a sampled run)" if sampled else f"{value:.2%}"


def headline(speedup: pl.DataFrame) -> str:
    """Speedup per model: the paper beside every measured source/variant."""
    rows = []
    for p in paper.ROWS:
        rows.append(
            {
                "model": p["model"],
                "source": aggregate.PAPER_SOURCE,
                "variant": "paper (as published)",
                "parameters": p["parameters"],
                "cpu s/epoch": p["cpu_seconds"] / paper.EPOCHS,
                "gpu s/epoch": p["gpu_seconds"] / paper.EPOCHS,
                "speedup": p["speedup"],
                "95% interval": "",
                "steady speedup": None,
                "cpu accuracy": _accuracy(p["cpu_accuracy"]),
                "gpu accuracy": _accuracy(p["gpu_accuracy"]),
                "note": "",
            }
        )
    for r in speedup.iter_rows(named=True):
        note = []
        if r["gpu_seconds"] is None:
            note.append(f"GPU not measured: {r['gpu_not_measured_reason'] or 'no GPU record'}")
        if r["cpu_seconds"] is None:
            note.append("CPU not measured")
        if r["synthetic"]:
            note.append("synthetic data")
        sampled = [device for device in ("cpu", "gpu") if r[f"{device}_extrapolated"]]
        if sampled:
            note.append(f"{' and '.join(d.upper() for d in sampled)} time extrapolated (sampled protocol)")
        if r["protocol_mismatch"]:
            note.append("CPU and GPU runs differ in epochs or data size")
        if r["gpu_name"]:
            note.insert(0, r["gpu_name"])
        rows.append(
            {
                "model": r["model"],
                "source": r["source"],
                "variant": r["variant"],
                "parameters": r["parameters"],
                "cpu s/epoch": r["cpu_epoch_seconds"],
                "gpu s/epoch": r["gpu_epoch_seconds"],
                "speedup": r["speedup"],
                "95% interval": _interval(r),
                "steady speedup": r["steady_speedup"],
                "cpu accuracy": _accuracy(r["cpu_accuracy"], r["cpu_extrapolated"]),
                "gpu accuracy": _accuracy(r["gpu_accuracy"], r["gpu_extrapolated"]),
                "note": "; ".join(note),
            }
        )
    order = {m["model"]: i for i, m in enumerate(paper.ROWS)}
    # models: the paper's in its order, then the rest by size; within a model, the paper's row first
    frame = (
        pl.DataFrame(rows, infer_schema_length=None)
        .with_columns(
            pl.col("model").replace_strict(order, default=99).alias("_order"),
            pl.col("parameters").min().over("model").alias("_size"),
            (pl.col("source") != aggregate.PAPER_SOURCE).alias("_measured"),
        )
        .sort(["_order", "_size", "model", "_measured", "source", "variant"])
        .drop("_order", "_size", "_measured")
    )
    table = (
        GT(frame, groupname_col="model")
        .fmt_integer(columns="parameters")
        .fmt_number(columns=["cpu s/epoch", "gpu s/epoch"], decimals=2)
        .fmt_number(columns=["speedup", "steady speedup"], decimals=2, pattern="{x}×")
        .sub_missing(columns="steady speedup", missing_text="n/a (needs 2+ epochs on both)")
        .sub_missing(missing_text="not measured")
        .tab_style(style.text(weight="bold"), loc.body(columns="speedup"))
    )
    return table.as_raw_html()


def runs_table(runs: pl.DataFrame) -> str:
    columns = [
        "source",
        "model",
        "device",
        "variant",
        "seed",
        "status",
        "epochs",
        "batch_size",
        "train_images",
        "total_train_seconds",
        "warmup_epoch_seconds",
        "steady_epoch_seconds_median",
        "train_images_per_second",
        "final_test_accuracy",
        "torch_threads",
        "data_source",
        "synthetic",
        "label",
    ]
    frame = runs.select(columns).with_columns(pl.col("label").fill_null(""))
    return (
        GT(frame)
        .fmt_number(columns=["total_train_seconds", "warmup_epoch_seconds", "steady_epoch_seconds_median"], decimals=2)
        .fmt_number(columns="train_images_per_second", decimals=0)
        .fmt_percent(columns="final_test_accuracy", decimals=2)
        .sub_missing(missing_text="—")
        .as_raw_html()
    )


def fits_table(fits: pl.DataFrame) -> str:
    frame = fits.select(
        "source", "variant", "fit", "points", "estimate", "estimate_se", "intercept", "intercept_se", "r2", "note"
    ).with_columns(pl.col("note").fill_null(""))
    return (
        GT(frame)
        .fmt_number(columns=["estimate", "estimate_se", "intercept", "intercept_se", "r2"], decimals=3)
        .sub_missing(missing_text="—")
        .as_raw_html()
    )


def gains_table(gains: pl.DataFrame) -> str | None:
    if gains.is_empty():
        return None
    return (
        GT(gains)
        .fmt_number(
            columns=["baseline_seconds", "variant_seconds", "baseline_steady_seconds", "variant_steady_seconds"],
            decimals=2,
        )
        .fmt_number(columns=["gain", "steady_gain"], decimals=2, pattern="{x}×")
        .sub_missing(missing_text="—")
        .as_raw_html()
    )


REPORTED_SAMPLED_STEPS = [10, 20, 40, 100]


def sampling_table(sampling: pl.DataFrame) -> str | None:
    """The sampled protocol checked on full runs, at the step counts its users pick most (10 to 100)."""
    frame = sampling.filter(pl.col("sampled_steps").is_in(REPORTED_SAMPLED_STEPS))
    if frame.is_empty():
        return None
    frame = frame.with_columns(
        pl.when(pl.col("sweep_parameter").is_not_null())
        .then(pl.concat_str("sweep_parameter", pl.lit("="), pl.col("sweep_value").cast(pl.String)))
        .otherwise(pl.lit(""))
        .alias("sweep")
    ).select(
        "source",
        "model",
        "device",
        "variant",
        "sweep",
        "seed",
        "epochs",
        "sampled_steps",
        "estimated_total_seconds",
        "measured_total_seconds",
        "error",
        "epoch_error_min",
        "epoch_error_max",
    )
    return (
        GT(frame)
        .fmt_number(columns=["estimated_total_seconds", "measured_total_seconds"], decimals=1)
        .fmt_percent(columns=["error", "epoch_error_min", "epoch_error_max"], decimals=1, force_sign=True)
        .as_raw_html()
    )


def sampling_summary(sampling: pl.DataFrame) -> str | None:
    """The check in brief: per source, device, variant and step count, the range of the total's error over the
    study's full runs (sweep runs, of one epoch, left out)."""
    frame = sampling.filter(pl.col("sampled_steps").is_in(REPORTED_SAMPLED_STEPS) & pl.col("sweep_parameter").is_null())
    if frame.is_empty():
        return None
    frame = (
        frame.group_by("source", "device", "variant", "sampled_steps")
        .agg(
            pl.len().alias("full runs"),
            pl.col("error").min().alias("total error, lowest"),
            pl.col("error").max().alias("total error, highest"),
            pl.col("epoch_error_min").min().alias("single epochs, lowest"),
            pl.col("epoch_error_max").max().alias("single epochs, highest"),
        )
        .sort("source", "device", "variant", "sampled_steps")
    )
    return (
        GT(frame)
        .fmt_percent(columns=[c for c in frame.columns if "error" in c or "epochs," in c], decimals=1, force_sign=True)
        .as_raw_html()
    )


def scaling_table(scaling: pl.DataFrame) -> str | None:
    if scaling.is_empty():
        return None
    return (
        GT(scaling.drop("extrapolated"))
        .fmt_number(columns=["epoch_seconds", "base_epoch_seconds"], decimals=2)
        .fmt_number(columns="speedup", decimals=2, pattern="{x}×")
        .fmt_percent(columns="efficiency", decimals=0)
        .sub_missing(missing_text="—")
        .as_raw_html()
    )


def environments(runs: pl.DataFrame) -> str:
    cols = [
        "source",
        "host",
        "device",
        "cpu_model",
        "cpu_logical_cores",
        "torch_threads",
        "gpu_name",
        "gpu_driver",
        "torch_version",
        "cuda_version",
        "cudnn_version",
    ]
    frame = runs.select(cols).unique().sort(["source", "host", "device", "torch_threads"])
    return GT(frame).sub_missing(missing_text="—").as_raw_html()


def warnings(tables: dict) -> list[str]:
    runs, speedup = tables["runs"], tables["speedup"]
    out = []
    synthetic = runs.filter(pl.col("synthetic"))
    if not synthetic.is_empty():
        out.append(
            f"{synthetic.height} run(s) used SYNTHETIC data ({', '.join(sorted(set(synthetic['source'])))}): "
            "their timings are real, their accuracies say nothing about CIFAR-10."
        )
    for r in runs.filter(pl.col("status") == "not_measured").iter_rows(named=True):
        out.append(
            f"{r['source']}: {r['model']} on {r['device']} ({r['variant']}, seed {r['seed']}) was not measured: "
            f"{r['not_measured_reason']}"
        )
    for o in tables.get("overlapping_runs", []):
        out.append(
            f"{o['source']} on {o['host']}: timing runs overlapped in time ({' and '.join(o['runs'])}); "
            "both timings may be distorted."
        )
    for r in speedup.filter(pl.col("accuracy_parity").not_()).iter_rows(named=True):
        out.append(
            f"{r['source']}: {r['model']} ({r['variant']}) accuracy differs between CPU and GPU by "
            f"{r['accuracy_difference']:+.2%}, beyond the tolerance."
        )
    for r in speedup.filter(pl.col("protocol_mismatch")).iter_rows(named=True):
        out.append(
            f"{r['source']}: {r['model']} ({r['variant']}): CPU and GPU runs differ in epochs or data size; "
            "the speedup compares seconds per epoch."
        )
    crowded = runs.filter((pl.col("status") == "measured") & pl.col("oversubscribed"))
    for (source,), frame in crowded.group_by(["source"], maintain_order=True):
        r = frame.row(0, named=True)
        out.append(
            f"{source}: {frame.height} CPU run(s) gave torch more threads than the DataLoader's workers leave "
            f"free (e.g. {r['torch_threads']} threads + {r['loader_workers']} workers on {r['cpu_logical_cores']} "
            "logical cores). They compete for cores, so the CPU may train faster with fewer threads: set "
            "train.cpu_threads, or measure it with sweeps.cpu_threads."
        )
    warm = runs.filter(
        (pl.col("status") == "measured")
        & (
            (pl.col("compile_cache") == "unknown")
            | ((pl.col("compile_cache") == "shared") & (pl.col("compile_cache_files_at_start") > 0))
        )
    )
    for (source,), frame in warm.group_by(["source"], maintain_order=True):
        named = [
            f"{r['model']} on {r['device']} ({r['variant']}, seed {r['seed']})" for r in frame.iter_rows(named=True)
        ]
        runs_named = ", ".join(named[:6]) + (f" and {len(named) - 6} more" if len(named) > 6 else "")
        out.append(
            f"{source}: {frame.height} compiled run(s) may have found a warm torch.compile cache ({runs_named}): "
            "a shared cache that held files, or a record that predates the cache field. Their warm-up epoch, "
            "and so their whole-run time, can be several times shorter than a first run's; steady epochs are "
            "unaffected. variants.<name>.compile_cache: cold gives every run an empty cache."
        )
    extrapolated = runs.filter(pl.col("extrapolated"))
    if not extrapolated.is_empty():
        out.append(f"{extrapolated.height} run(s) have extrapolated times (sampled protocol).")
    for s in tables.get("skipped_records", []):
        out.append(f"skipped record {s['path']}: {s['reason']}")
    return out


def provenance(runs: pl.DataFrame, params_files: list[Path]) -> dict:
    return {
        "params": [{"path": str(p), "text": Path(p).read_text()} for p in params_files],
        "commits": sorted({c for c in runs["git_commit"].to_list() if c}),
        "data": runs.select("source", "data_source", "manifest_sha256", "train_images", "test_images")
        .unique()
        .sort("source")
        .to_dicts(),
        "records": runs.select("record_path", "record_sha256").sort("record_path").to_dicts(),
    }


def _script_json(value) -> str:
    """JSON safe inside <script type="application/json">: no '<' can close the element."""
    return json.dumps(value).replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def render(
    tables: dict, chart_dir: Path, config: dict, params_files: list[Path], vega_bundle: str | None = None
) -> str:
    import vl_convert

    specs = {name: json.loads((Path(chart_dir) / f"{name}.vl.json").read_text()) for name in charts.CHART_NAMES}
    env = jinja2.Environment(
        loader=jinja2.PackageLoader("gpuscale", "templates"),
        autoescape=jinja2.select_autoescape(default=True),
        undefined=jinja2.StrictUndefined,
    )
    template = env.get_template("report.html.j2")
    summary = tables.get("fit_summary", {})
    return template.render(
        title=config["report"]["title"],
        label=config["study"].get("label"),
        generated=dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        paper=paper,
        warnings=warnings(tables),
        headline=jinja2.utils.markupsafe.Markup(headline(tables["speedup"])),
        verdicts=[(group, fit["verdict"]) for group, fit in summary.items()],
        fits=jinja2.utils.markupsafe.Markup(fits_table(tables["fits"])),
        gains=jinja2.utils.markupsafe.Markup(gains_table(tables["gains"]) or ""),
        sampling=jinja2.utils.markupsafe.Markup(sampling_table(tables["sampling"]) or ""),
        sampling_summary=jinja2.utils.markupsafe.Markup(sampling_summary(tables["sampling"]) or ""),
        scaling=jinja2.utils.markupsafe.Markup(scaling_table(tables["scaling"]) or ""),
        charts=[
            {"name": n, "spec": jinja2.utils.markupsafe.Markup(_script_json(specs[n])), "help": CHART_HELP[n]}
            for n in charts.CHART_NAMES
        ],
        runs=jinja2.utils.markupsafe.Markup(runs_table(tables["runs"])),
        environments=jinja2.utils.markupsafe.Markup(environments(tables["runs"])),
        provenance=provenance(tables["runs"], params_files),
        sources=tables.get("sources", {}),
        vega_bundle=jinja2.utils.markupsafe.Markup(vega_bundle or vl_convert.javascript_bundle()),
    )


def run(tables_dir: Path, chart_dir: Path, out: Path, config: dict, params_files: list[Path]) -> Path:
    html = render(aggregate.read_tables(tables_dir), chart_dir, config, params_files)
    fsutil.write_text(out, html)
    log.info("report -> %s", out)
    return out
