"""The charts stage: Altair charts from the aggregated Polars tables.

Each chart is saved as a standalone offline HTML page (the Vega libraries inlined) and as SVG.
A chart whose data do not allow it (too few points for a fit, nothing measured) says so in its
title and draws no line. Charts built from synthetic data say so in their title.
"""

from __future__ import annotations

import logging
from pathlib import Path

import altair as alt
import numpy as np
import polars as pl

from gpuscale import aggregate, analysis, fsutil

log = logging.getLogger("gpuscale.charts")

CHART_NAMES = (
    "speedup_vs_parameters",
    "speedup_vs_flops",
    "amdahl",
    "phases",
    "epoch_seconds",
    "throughput",
    "accuracy",
    "threads",
    "batch",
    "scaling",
)
WIDTH, HEIGHT = 520, 320


def _suffix(frame: pl.DataFrame) -> str:
    flags = []
    if "synthetic" in frame.columns and frame["synthetic"].fill_null(False).any():
        flags.append("SYNTHETIC DATA: accuracies meaningless")
    if "extrapolated" in frame.columns and frame["extrapolated"].fill_null(False).any():
        flags.append("includes extrapolated times")
    return f" [{'; '.join(flags)}]" if flags else ""


def _empty(title: str, message: str) -> alt.Chart:
    return (
        alt.Chart(pl.DataFrame({"message": [message]}))
        .mark_text(size=14, color="#555")
        .encode(text="message:N")
        .properties(title=title, width=WIDTH, height=80)
    )


def _fit_lines(speedup: pl.DataFrame, fits: pl.DataFrame, column: str, fit_name: str) -> pl.DataFrame:
    rows = []
    paper = aggregate.paper_frame()
    for fit in fits.filter((pl.col("fit") == fit_name) & pl.col("ok")).iter_rows(named=True):
        if fit["source"] == aggregate.PAPER_SOURCE:
            sizes = paper[column] if column in paper.columns else None
        else:
            sizes = speedup.filter(
                (pl.col("source") == fit["source"])
                & (pl.col("variant") == fit["variant"])
                & pl.col("speedup").is_not_null()
            )[column]
        if sizes is None or sizes.len() == 0:
            continue
        for x in np.geomspace(sizes.min(), sizes.max(), 20):
            rows.append(
                {
                    "source": fit["source"],
                    "variant": fit["variant"],
                    column: float(x),
                    "speedup": float(np.exp(fit["intercept"]) * x ** fit["estimate"]),
                    "fit": f"exponent {fit['estimate']:.2f} ± {fit['estimate_se']:.2f}, R² {fit['r2']:.2f}",
                }
            )
    return pl.DataFrame(
        rows,
        schema={"source": pl.String, "variant": pl.String, column: pl.Float64, "speedup": pl.Float64, "fit": pl.String},
    )


def speedup_vs_size(
    speedup: pl.DataFrame, fits: pl.DataFrame, column: str, title: str, axis: str, with_paper: bool
) -> alt.Chart:
    measured = speedup.filter(pl.col("speedup").is_not_null()).select(
        "source",
        "variant",
        "model",
        column,
        "speedup",
        "cpu_epoch_seconds",
        "gpu_epoch_seconds",
        "gpu_name",
        "speedup_ci_low",
        "speedup_ci_high",
    )
    if with_paper:
        paper_points = aggregate.paper_frame().select(
            "source",
            pl.lit("paper").alias("variant"),
            "model",
            column,
            "speedup",
            "cpu_epoch_seconds",
            "gpu_epoch_seconds",
            pl.lit("NVIDIA GeForce RTX 3050").alias("gpu_name"),
            pl.lit(None, dtype=pl.Float64).alias("speedup_ci_low"),
            pl.lit(None, dtype=pl.Float64).alias("speedup_ci_high"),
        )
        measured = pl.concat([measured, paper_points], how="vertical_relaxed")
    title = title + _suffix(speedup)
    if measured.is_empty():
        return _empty(title, "No model measured on both CPU and GPU yet: nothing to plot.")
    x = alt.X(f"{column}:Q", scale=alt.Scale(type="log"), title=axis)
    y = alt.Y("speedup:Q", scale=alt.Scale(type="log"), title="speedup (CPU seconds / GPU seconds per epoch)")
    points = (
        alt.Chart(measured)
        .mark_point(filled=True, size=90)
        .encode(
            x=x,
            y=y,
            color=alt.Color("source:N", title="source"),
            shape=alt.Shape("variant:N"),
            tooltip=[
                "source",
                "variant",
                "model",
                alt.Tooltip(f"{column}:Q", format=","),
                alt.Tooltip("speedup:Q", format=".2f"),
                alt.Tooltip("cpu_epoch_seconds:Q", format=".2f"),
                alt.Tooltip("gpu_epoch_seconds:Q", format=".2f"),
                "gpu_name",
            ],
        )
    )
    labels = points.mark_text(dx=8, dy=-8, align="left", fontSize=11).encode(text="model:N")
    with_interval = measured.filter(pl.col("speedup_ci_low").is_not_null())
    if not with_interval.is_empty():  # 95% bootstrap interval over seeds
        labels = labels + alt.Chart(with_interval).mark_rule().encode(
            x=x, y="speedup_ci_low:Q", y2="speedup_ci_high:Q", color="source:N"
        )
    fit_name = (
        "log speedup ~ log parameters" if column == "parameters" else "log speedup ~ log training FLOPs per image"
    )
    lines = _fit_lines(speedup, fits, column, fit_name)
    layers = [points, labels]
    if not lines.is_empty():
        layers.insert(
            0,
            alt.Chart(lines)
            .mark_line(strokeDash=[5, 3])
            .encode(x=x, y=y, color="source:N", detail="variant:N", tooltip=["source", "variant", "fit"]),
        )
    else:
        title += " (no fitted line: fewer than 3 models per source)"
    return alt.layer(*layers).properties(title=title, width=WIDTH, height=HEIGHT)


def amdahl(speedup: pl.DataFrame, fits: pl.DataFrame) -> alt.Chart:
    """S(N) = 1/((1-P) + P/N) per model, P from the fit T_gpu = s + T_cpu/k; measured speedup at N = k P."""
    curves, marks = [], []
    paper = aggregate.paper_frame()
    for fit in fits.filter((pl.col("fit").str.starts_with("T_gpu")) & pl.col("ok")).iter_rows(named=True):
        frame = (
            paper
            if fit["source"] == aggregate.PAPER_SOURCE
            else speedup.filter(
                (pl.col("source") == fit["source"])
                & (pl.col("variant") == fit["variant"])
                & pl.col("speedup").is_not_null()
            )
        )
        s, k = fit["intercept"], fit["estimate"]
        k_known = not analysis.k_undetermined(k, fit["estimate_se"])
        # one curve per (source, variant, model): each variant has a fit, and so a P, of its own
        series = f"{fit['source']} / {fit['variant']}"
        for row in frame.iter_rows(named=True):
            p = analysis.parallel_fraction(s, row["cpu_epoch_seconds"])
            if not 0 < p < 1:
                continue
            group = f"{series} / {row['model']}"
            for n in np.geomspace(1, 1e4, 60):
                curves.append(
                    {
                        "group": group,
                        "series": series,
                        "model": row["model"],
                        "N": float(n),
                        "S": float(analysis.amdahl_speedup(p, n)),
                        "P": p,
                    }
                )
            marks.append(
                {
                    "group": group,
                    "series": series,
                    "model": row["model"],
                    "N": analysis.effective_units(p, k),
                    "S": row["speedup"],
                    "P": p,
                    "k_known": k_known,
                    "position": "N = k · P" if k_known else "k undetermined: N not measured",
                }
            )
    title = "Amdahl's law: speedup S(N) = 1 / ((1 − P) + P / N), P from T_gpu = s + T_cpu / k" + _suffix(speedup)
    if not curves:
        return _empty(title, "No Amdahl fit yet: it needs 3 or more models measured on both devices in one source.")
    x = alt.X("N:Q", scale=alt.Scale(type="log"), title="N, processing units (effective: N = k · P)")
    y = alt.Y("S:Q", scale=alt.Scale(type="log"), title="speedup S")
    line = (
        alt.Chart(pl.DataFrame(curves))
        .mark_line()
        .encode(
            x=x,
            y=y,
            color=alt.Color("model:N"),
            strokeDash=alt.StrokeDash("series:N", title="source / variant"),
            detail="group:N",
            tooltip=["series", "model", alt.Tooltip("P:Q", format=".4f")],
        )
    )
    # a hollow marker: its source's k is undetermined, so where it sits along N is not a measurement
    layers = [line]
    for filled in (True, False):
        subset = [m for m in marks if m["k_known"] == filled]
        if subset:
            layers.append(
                alt.Chart(pl.DataFrame(subset))
                .mark_point(filled=filled, size=110, strokeWidth=2)
                .encode(
                    x=x,
                    y=y,
                    color="model:N",
                    shape=alt.Shape("series:N", title="source / variant"),
                    tooltip=[
                        "series",
                        "model",
                        alt.Tooltip("P:Q", format=".4f"),
                        alt.Tooltip("N:Q", format=".1f"),
                        alt.Tooltip("S:Q", format=".2f", title="measured speedup"),
                        "position",
                    ],
                )
            )
    return alt.layer(*layers).properties(title=title, width=WIDTH, height=HEIGHT)


def by_device(runs: pl.DataFrame, column: str, title: str, axis: str) -> alt.Chart:
    measured = runs.filter(
        (pl.col("status") == "measured") & pl.col(column).is_not_null() & pl.col("sweep_parameter").is_null()
    )
    title = title + _suffix(runs)
    if measured.is_empty():
        return _empty(title, "No measured runs yet.")
    data = measured.select(
        "source",
        "model",
        "device",
        "variant",
        "seed",
        column,
        "parameters",
        "host",
        "gpu_name",
        "torch_threads",
        "epochs",
    ).with_columns((pl.col("source") + " · " + pl.col("variant")).alias("panel"))
    order = data.sort("parameters")["model"].unique(maintain_order=True).to_list()
    return (
        alt.Chart(data)
        .mark_bar()
        .encode(
            x=alt.X("model:N", sort=order, title="model (by parameters)"),
            xOffset="device:N",
            y=alt.Y(f"median({column}):Q", title=axis),
            color=alt.Color("device:N"),
            column=alt.Column("panel:N", title=None),
            tooltip=[
                "source",
                "model",
                "device",
                "variant",
                alt.Tooltip(f"median({column}):Q", format=".2f"),
                "host",
                "gpu_name",
                "torch_threads",
                "epochs",
            ],
        )
        .properties(title=title, width=max(160, 60 * len(order)), height=HEIGHT)
    )


def accuracy(speedup: pl.DataFrame, tolerance: float) -> alt.Chart:
    both = speedup.filter(pl.col("cpu_accuracy").is_not_null() & pl.col("gpu_accuracy").is_not_null())
    # a sampled run trained on a few steps per epoch: its accuracy is no full-run accuracy, so it is not drawn
    data = both.filter(~pl.col("extrapolated"))
    title = f"Test accuracy, CPU vs GPU (parity tolerance ±{tolerance:.3f})" + _suffix(data)  # synthetic data
    if len(both) > len(data):
        title += f" [{len(both) - len(data)} pair(s) with a sampled run left out]"
    if data.is_empty():
        return _empty(title, "No model trained in full on both devices yet (sampled runs are not compared).")
    low = float(min(data["cpu_accuracy"].min(), data["gpu_accuracy"].min())) - 0.02
    high = float(max(data["cpu_accuracy"].max(), data["gpu_accuracy"].max())) + 0.02
    scale = alt.Scale(domain=[max(low, 0), min(high, 1)])
    band = pl.DataFrame({"cpu_accuracy": [max(low, 0), min(high, 1)]}).with_columns(
        pl.col("cpu_accuracy").alias("gpu_accuracy"),
        (pl.col("cpu_accuracy") - tolerance).alias("lo"),
        (pl.col("cpu_accuracy") + tolerance).alias("hi"),
    )
    area = (
        alt.Chart(band)
        .mark_area(opacity=0.15, color="green")
        .encode(
            x=alt.X("cpu_accuracy:Q", scale=scale, title="CPU test accuracy", axis=alt.Axis(format="%")),
            y=alt.Y("lo:Q", scale=scale, title="GPU test accuracy", axis=alt.Axis(format="%")),
            y2="hi:Q",
        )
    )
    diagonal = alt.Chart(band).mark_line(color="green").encode(x="cpu_accuracy:Q", y="gpu_accuracy:Q")
    points = (
        alt.Chart(
            data.select(
                "source", "variant", "model", "cpu_accuracy", "gpu_accuracy", "accuracy_difference", "accuracy_parity"
            )
        )
        .mark_point(filled=True, size=90)
        .encode(
            x="cpu_accuracy:Q",
            y="gpu_accuracy:Q",
            color="source:N",
            shape="accuracy_parity:N",
            tooltip=[
                "source",
                "variant",
                "model",
                alt.Tooltip("cpu_accuracy:Q", format=".2%"),
                alt.Tooltip("gpu_accuracy:Q", format=".2%"),
                alt.Tooltip("accuracy_difference:Q", format="+.2%"),
                "accuracy_parity",
            ],
        )
    )
    labels = points.mark_text(dx=8, dy=-8, align="left").encode(text="model:N")
    return alt.layer(area, diagonal, points, labels).properties(title=title, width=WIDTH, height=HEIGHT)


def phases(phase_table: pl.DataFrame, runs: pl.DataFrame) -> alt.Chart:
    """Each phase's share of a training step (from separate instrumented steps), per model and device.

    Shares, not seconds: one study spans epochs of under a second and of many minutes, and on one seconds axis the
    fast runs' bars would vanish. The seconds per steady epoch are in the tooltip."""
    title = "Where a training step's time goes (share of each phase, from instrumented steps)" + _suffix(runs)
    if phase_table.is_empty():
        return _empty(title, "No phase profile in these records (train.phase_profile_steps: 0, or schema 1 records).")
    data = phase_table.group_by(["source", "model", "device", "variant", "phase"], maintain_order=True).agg(
        pl.col("seconds_per_epoch").median(),
        pl.col("fraction").median(),
        pl.col("overhead_fraction").median(),
        pl.col("seconds_per_step").median(),
    )
    order = list(aggregate.PHASE_ORDER)
    data = data.with_columns(
        (pl.col("source") + " · " + pl.col("variant")).alias("panel"),
        (pl.col("model") + " / " + pl.col("device")).alias("run"),
        pl.col("phase").replace_strict({p: i for i, p in enumerate(order)}).alias("phase_order"),
    )
    return (
        alt.Chart(data)
        .mark_bar()
        .encode(
            y=alt.Y("run:N", title="model / device"),
            x=alt.X(
                "seconds_per_epoch:Q", title="share of a training step", stack="normalize", axis=alt.Axis(format="%")
            ),
            color=alt.Color("phase:N", sort=order, title="phase"),
            order=alt.Order("phase_order:Q"),
            row=alt.Row("panel:N", title=None),
            tooltip=[
                "source",
                "model",
                "device",
                "phase",
                alt.Tooltip("fraction:Q", format=".1%"),
                alt.Tooltip("seconds_per_epoch:Q", format=".3f"),
                alt.Tooltip("seconds_per_step:Q", format=".5f"),
                alt.Tooltip("overhead_fraction:Q", format=".1%", title="instrumentation overhead"),
            ],
        )
        .properties(title=title, width=WIDTH, height=alt.Step(22))
        .resolve_scale(y="independent")
    )


def threads(sweeps: pl.DataFrame, fits: pl.DataFrame) -> alt.Chart:
    """CPU speedup against threads, with the Amdahl curve fitted from the same sweep."""
    data = sweeps.filter(pl.col("parameter") == "threads")
    title = "CPU thread sweep: speedup over the fewest threads, with Amdahl's law fitted (T = a + b / N)" + _suffix(
        data
    )
    if data.is_empty():
        return _empty(title, "No CPU thread sweep in these records (sweeps.cpu_threads is empty).")
    curves = []
    for (source, model, _variant), frame in data.group_by(["source", "model", "variant"], maintain_order=True):
        fit = analysis.thread_fit(frame["value"], frame["epoch_seconds"])
        if not fit["ok"]:
            continue
        a, b, n0 = fit["intercept"], fit["slope"], frame["value"].min()
        for n in np.geomspace(n0, max(frame["value"].max(), n0 * 2), 40):
            curves.append(
                {
                    "source": source,
                    "model": model,
                    "value": float(n),
                    "speedup_vs_baseline": (a + b / n0) / (a + b / n),
                    "fit": f"P = {fit['parallel_fraction']:.3f} ± {fit['parallel_fraction_se']:.3f}",
                }
            )
    x = alt.X("value:Q", scale=alt.Scale(type="log", base=2), title="CPU threads")
    y = alt.Y("speedup_vs_baseline:Q", title="speedup over the fewest threads")
    points = (
        alt.Chart(data)
        .mark_point(filled=True, size=80)
        .encode(
            x=x,
            y=y,
            color="model:N",
            shape="source:N",
            # faded: torch threads + DataLoader workers outnumbered the logical cores, so they competed for them
            opacity=alt.condition("datum.oversubscribed", alt.value(0.35), alt.value(1.0)),
            tooltip=[
                "source",
                "model",
                "variant",
                "value",
                alt.Tooltip("epoch_seconds:Q", format=".2f"),
                alt.Tooltip("speedup_vs_baseline:Q", format=".2f"),
                "oversubscribed",
            ],
        )
    )
    layers = [points]
    if curves:
        layers.append(
            alt.Chart(pl.DataFrame(curves))
            .mark_line(strokeDash=[4, 3])
            .encode(x=x, y=y, color="model:N", detail="source:N", tooltip=["source", "model", "fit"])
        )
    else:
        title += " (no fit: fewer than 3 thread counts)"
    return alt.layer(*layers).properties(title=title, width=WIDTH, height=HEIGHT)


def batch(sweeps: pl.DataFrame) -> alt.Chart:
    data = sweeps.filter(pl.col("parameter") == "batch")
    title = "GPU batch-size sweep: training images per second" + _suffix(data)
    if data.is_empty():
        return _empty(title, "No GPU batch-size sweep in these records (sweeps.gpu_batch_sizes is empty).")
    return (
        alt.Chart(data)
        .mark_line(point=True)
        .encode(
            x=alt.X("value:Q", scale=alt.Scale(type="log", base=2), title="batch size"),
            y=alt.Y("images_per_second:Q", title="images per second (training)"),
            color="model:N",
            strokeDash="source:N",
            tooltip=[
                "source",
                "model",
                "device",
                "variant",
                "value",
                alt.Tooltip("images_per_second:Q", format=",.0f"),
                alt.Tooltip("epoch_seconds:Q", format=".2f"),
            ],
        )
        .properties(title=title, width=WIDTH, height=HEIGHT)
    )


def scaling(table: pl.DataFrame) -> alt.Chart:
    """Data-parallel speedup against the number of processes (GPUs), with the ideal line speedup = N."""
    title = "Data-parallel scaling: speedup over one device (steady epoch)" + _suffix(table)
    data = table.filter(pl.col("speedup").is_not_null())
    if data.is_empty():
        return _empty(title, "No data-parallel runs (cuda-ddpN, cpu-ddpN devices) with a one-device run to compare.")
    counts = sorted({1, *data["world_size"].to_list()})
    ideal = (
        alt.Chart(pl.DataFrame({"world_size": counts, "speedup": [float(n) for n in counts]}))
        .mark_line(strokeDash=[4, 4], color="gray")
        .encode(x="world_size:Q", y="speedup:Q")
    )
    points = (
        alt.Chart(data)
        .mark_line(point=True)
        .encode(
            x=alt.X("world_size:Q", title="processes (GPUs for cuda-ddpN)", scale=alt.Scale(domain=[1, max(counts)])),
            y=alt.Y("speedup:Q", title="speedup over one device"),
            color="model:N",
            strokeDash="source:N",
            shape="base_device:N",
            tooltip=[
                "source",
                "model",
                "variant",
                "device",
                "global_batch_size",
                alt.Tooltip("speedup:Q", format=".2f"),
                alt.Tooltip("efficiency:Q", format=".0%"),
                alt.Tooltip("epoch_seconds:Q", format=".2f"),
            ],
        )
    )
    return (ideal + points).properties(title=title, width=WIDTH, height=HEIGHT)


def build(tables: dict, tolerance: float) -> dict[str, alt.Chart]:
    speedup, fits, runs = tables["speedup"], tables["fits"], tables["runs"]
    return {
        "speedup_vs_parameters": speedup_vs_size(
            speedup, fits, "parameters", "GPU speedup vs parameters (log-log)", "parameters", with_paper=True
        ),
        "speedup_vs_flops": speedup_vs_size(
            speedup,
            fits,
            "train_flops_per_image",
            "GPU speedup vs training FLOPs per image (log-log)",
            "training FLOPs per image (forward + backward)",
            with_paper=False,
        ),
        "amdahl": amdahl(speedup, fits),
        "phases": phases(tables["phases"], runs),
        "epoch_seconds": by_device(
            runs,
            "epoch_seconds_mean",
            "Seconds per training epoch by model and device",
            "seconds per epoch (mean over epochs, median over seeds)",
        ),
        "throughput": by_device(
            runs, "train_images_per_second", "Training throughput by model and device", "images per second (training)"
        ),
        "accuracy": accuracy(speedup, tolerance),
        "threads": threads(tables["sweeps"], fits),
        "batch": batch(tables["sweeps"]),
        "scaling": scaling(tables["scaling"]),
    }


def save(charts: dict[str, alt.Chart], out_dir: Path) -> list[Path]:
    """<name>.html (standalone, offline), <name>.svg (slides, papers), <name>.vl.json (the spec, for the report)."""
    out_dir = Path(out_dir)
    written = []
    for name, chart in charts.items():
        chart = chart.configure_legend(labelLimit=360, titleLimit=360)
        fsutil.write_text(out_dir / f"{name}.vl.json", chart.to_json(indent=None) + "\n")
        written.append(out_dir / f"{name}.vl.json")
        for fmt in ("html", "svg"):
            path = out_dir / f"{name}.{fmt}"
            with fsutil.atomic_path(path, suffix=f".{fmt}") as tmp:
                chart.save(str(tmp), format=fmt, **({"inline": True} if fmt == "html" else {}))
            written.append(path)
    return written


def run(tables_dir: Path, out_dir: Path, tolerance: float) -> list[Path]:
    charts = build(aggregate.read_tables(tables_dir), tolerance)
    written = save(charts, out_dir)
    log.info("wrote %d charts -> %s", len(charts), out_dir)
    return written
