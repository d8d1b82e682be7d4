"""The sweeps: CPU threads (with the fitted Amdahl curve), GPU batch size, data-parallel scaling."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

import altair as alt
import numpy as np
import polars as pl

from gpuscale.analyze.tables import Fit
from gpuscale.present.charts.labels import AT_END, Plot, _labels, label_rows
from gpuscale.present.charts.style import HEIGHT, TIMES_AXIS, Style, _empty, _log_domain, _title, framed, named


def _thread_curves(data: pl.DataFrame, fits: pl.DataFrame) -> list[dict]:
    """The fitted T(N) = a + b / N of each thread sweep, from the fits table (P = b / (a + b), so b = a P / (1 − P))."""
    curves = []
    given = {
        (row["source"], row["variant"], row["model"]): row
        for row in fits.filter((pl.col("fit_id") == Fit.THREADS) & pl.col("ok")).iter_rows(named=True)
    }
    for (source, model, variant), frame in data.group_by(["source", "model", "variant"], maintain_order=True):
        fit = given.get((source, variant, model))
        if fit is None or fit["intercept"] is None or not 0 < fit["estimate"] < 1:
            continue
        a, p = fit["intercept"], fit["estimate"]
        b = a * p / (1 - p)
        n0 = frame["value"].min()
        for n in np.geomspace(n0, max(frame["value"].max(), n0 * 2), 40):
            curves.append(
                {
                    "source": source,
                    "model": model,
                    "variant": variant,
                    "value": float(n),
                    "speedup_vs_baseline": (a + b / n0) / (a + b / n),
                    "fit": f"P = {p:.3f} ± {fit['estimate_se']:.3f}",
                }
            )
    return curves


def _end_labels(frame: pl.DataFrame, x: str, y: str, keys: list[str]) -> pl.DataFrame:
    """One label per line, at its last point."""
    return frame.sort(x).group_by(keys, maintain_order=True).last()


@dataclass(frozen=True)
class Sweep:
    """One kind of sweep chart (threads, batch size, processes): what it says and how it draws; sweep_chart draws
    them all alike (a colour per source, a line or marker per model and variant, each labelled at its end)."""

    title: str
    notes: tuple[str, ...]  # subtitle lines, before the variant key
    empty: str  # what the chart says where nothing was swept
    description: str
    axes: Callable[[pl.DataFrame], tuple[alt.X, alt.Y]] | None  # from the rows shown (domains follow the data)
    tooltip: tuple[alt.Tooltip, ...]
    joined: bool = True  # a line through each model's points; False: markers alone (a fitted curve joins them)
    faded: str | None = None  # markers alone: a Vega expression true where a marker is drawn faded


def sweep_chart(sweep: Sweep, frame: pl.DataFrame, shown: pl.DataFrame, style: Style, under=None) -> alt.Chart:
    """A sweep chart of `shown` (the rows that can be drawn, out of `frame`, whose flags the title states), with the
    layers `under(shown, x, y, present)` gives (fitted or ideal curves) beneath the data."""
    lines = [*sweep.notes, style.key(frame["variant"].unique().to_list()) if not frame.is_empty() else ""]
    title = _title(sweep.title, lines, frame)
    if shown.is_empty():
        return _empty(title, sweep.empty)
    present = shown["source"].unique().to_list()
    variants = shown["variant"].unique().to_list()
    x, y = sweep.axes(shown)
    if sweep.joined:
        marks = alt.Chart(shown).mark_line(point=True).encode(strokeDash=style.dash(variants), detail="model:N")
    else:
        faded = alt.condition(sweep.faded, alt.value(0.35), alt.value(1.0)) if sweep.faded else alt.Undefined
        marks = alt.Chart(shown).mark_point(filled=True, size=70).encode(shape=style.shape(variants), opacity=faded)
    marks = marks.encode(x=x, y=y, color=style.colour(present), tooltip=list(sweep.tooltip))
    xf, yf = x.to_dict()["field"], y.to_dict()["field"]
    ends = label_rows(_end_labels(shown, xf, yf, ["source", "model", "variant"]), xf, yf, Plot.of(x, y, HEIGHT), AT_END)
    layers = [*(under(shown, x, y, present) if under else []), marks, *_labels(ends, x, y)]
    return framed(alt.layer(*layers), title, sweep.description)


def _log2(values: pl.Series, title: str) -> alt.X:
    """A log-2 axis from the fewest to the most swept (explicit, so that labels can be placed in its pixels)."""
    domain = [float(values.min()), float(max(values.max(), values.min() * 2))]
    scale = alt.Scale(type="log", base=2, domain=domain, nice=False)
    return alt.X(f"{values.name}:Q", scale=scale, axis=alt.Axis(format="~s"), title=title)


def _from_zero(values, title: str, **axis) -> alt.Y:
    """A linear axis from 0 to just above the largest value (explicit, so that labels can be placed in its pixels)."""
    scale = alt.Scale(domain=[0.0, 1.08 * max(v for v in values if v is not None)], nice=False)
    return alt.Y(f"{values.name}:Q", scale=scale, title=title, axis=alt.Axis(**axis))


SWEEP_KEYS = tuple(named("source", "model", "variant"))


THREADS = Sweep(
    title="CPU thread sweep: speedup over the fewest threads",
    notes=(
        "dashed: Amdahl's law fitted to the same points (epoch = a + b / threads)",
        "faded: torch threads plus loader workers outnumbered the logical cores",
    ),
    empty="No CPU thread sweep in these records (sweeps.cpu_threads is empty).",
    description="CPU thread sweep",
    axes=None,  # threads(): the y axis holds the fitted curves too
    tooltip=(
        *SWEEP_KEYS,
        alt.Tooltip("value:Q", title="CPU threads"),
        alt.Tooltip("epoch_seconds:Q", format=".2f", title="seconds per epoch"),
        alt.Tooltip("speedup_vs_baseline:Q", format=".2f", title="speedup (×)"),
        alt.Tooltip("oversubscribed:N", title="threads + workers exceed cores"),
    ),
    joined=False,
    faded="datum.oversubscribed",
)


BATCH = Sweep(
    title="GPU batch-size sweep: training images per second",
    notes=("where a line flattens, the GPU (or its input pipeline) is saturated",),
    empty="No GPU batch-size sweep in these records (sweeps.gpu_batch_sizes is empty).",
    description="GPU batch-size sweep",
    axes=lambda shown: (
        _log2(shown["value"], "batch size"),
        alt.Y(
            "images_per_second:Q",
            scale=alt.Scale(type="log", domain=_log_domain(shown["images_per_second"].to_list(), 1.3), nice=False),
            axis=alt.Axis(format="~s"),
            title="images per second (training)",
        ),
    ),
    tooltip=(
        *SWEEP_KEYS,
        alt.Tooltip("value:Q", title="batch size"),
        alt.Tooltip("images_per_second:Q", format=",.0f", title="images per second"),
        alt.Tooltip("epoch_seconds:Q", format=".2f", title="seconds per epoch"),
    ),
)


SCALING = Sweep(
    title="Data-parallel scaling: speedup over one device",
    notes=("steady epochs; dashed grey: perfect scaling",),
    empty="No data-parallel runs (cuda-ddpN, cpu-ddpN devices) with a one-device run to compare.",
    description="Data-parallel scaling",
    axes=lambda shown: (
        alt.X(
            "world_size:Q",
            title="processes (GPUs for cuda-ddpN)",
            scale=alt.Scale(domain=[1, max(shown["world_size"].max(), 1)], nice=False),
        ),
        _from_zero(
            pl.concat([shown["speedup"], shown["world_size"].cast(pl.Float64)]), "speedup over one device", **TIMES_AXIS
        ),
    ),
    tooltip=(
        *SWEEP_KEYS,
        *named("device"),
        alt.Tooltip("global_batch_size:Q", title="global batch size"),
        alt.Tooltip("speedup:Q", format=".2f", title="speedup (×)"),
        alt.Tooltip("efficiency:Q", format=".0%", title="efficiency"),
        alt.Tooltip("epoch_seconds:Q", format=".2f", title="seconds per epoch"),
    ),
)


def threads(sweeps: pl.DataFrame, fits: pl.DataFrame, style: Style) -> alt.Chart:
    """CPU speedup against threads, with the Amdahl curve of the fits table (fitted once, by aggregation)."""
    shown = sweeps.filter(pl.col("parameter") == "threads")
    fitted = _thread_curves(shown, fits)

    def axes(shown) -> tuple[alt.X, alt.Y]:
        speedups = pl.concat(
            [shown["speedup_vs_baseline"], pl.Series([c["speedup_vs_baseline"] for c in fitted], dtype=pl.Float64)]
        )
        return _log2(shown["value"], "CPU threads"), _from_zero(
            speedups, "speedup over the fewest threads", **TIMES_AXIS
        )

    def curves(shown, x, y, present) -> list:
        if not fitted:
            return []
        return [
            alt.Chart(pl.DataFrame(fitted))
            .mark_line(strokeDash=[4, 3])
            .encode(
                x=x,
                y=y,
                color=style.colour(present),
                detail="model:N",
                tooltip=[*named("model"), alt.Tooltip("fit:N", title="Amdahl fit")],
            )
        ]

    return sweep_chart(replace(THREADS, axes=axes), shown, shown, style, curves)


def batch(sweeps: pl.DataFrame, style: Style) -> alt.Chart:
    """GPU training throughput against the batch size."""
    shown = sweeps.filter(pl.col("parameter") == "batch")
    return sweep_chart(BATCH, shown, shown, style)


def scaling(table: pl.DataFrame, style: Style) -> alt.Chart:
    """Data-parallel speedup against the number of processes (GPUs), with the ideal line speedup = N."""

    def ideal(shown, x, y, present) -> list:
        counts = sorted({1, *shown["world_size"].to_list()})
        frame = pl.DataFrame({"world_size": counts, "speedup": [float(n) for n in counts]})
        return [alt.Chart(frame).mark_line(strokeDash=[4, 4], color="#767676").encode(x=x, y=y)]

    return sweep_chart(SCALING, table, table.filter(pl.col("speedup").is_not_null()), style, ideal)


def charts(tables: dict, style: Style, tolerance: float) -> dict[str, alt.Chart]:
    return {
        "threads": threads(tables["sweeps"], tables["fits"], style),
        "batch": batch(tables["sweeps"], style),
        "scaling": scaling(tables["scaling"], style),
    }
