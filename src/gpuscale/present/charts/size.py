"""The speedup against model size (parameters, training FLOPs per image): points with their intervals, each
source's power-law fit, the paper's three models, labels placed beside the points."""

from __future__ import annotations

import altair as alt
import numpy as np
import polars as pl

from gpuscale import words
from gpuscale.analyze.tables import FIT_FLOPS, FIT_PARAMETERS, PAPER_SOURCE, paper_frame, verdict
from gpuscale.present import columns
from gpuscale.present.charts.labels import Plot, _by_importance, _labels, label_rows
from gpuscale.present.charts.style import HEIGHT, TIMES, Style, _empty, _log_domain, _mapped, _title, framed, named


def _fit_lines(speedup: pl.DataFrame, fits: pl.DataFrame, column: str, fit_name: str) -> pl.DataFrame:
    rows = []
    paper = paper_frame()
    for fit in fits.filter((pl.col("fit_id") == fit_name) & pl.col("ok")).iter_rows(named=True):
        if fit["source"] == PAPER_SOURCE:
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


def _paper_points(speedup: pl.DataFrame) -> pl.DataFrame:
    """The paper's three models, with the training FLOPs of our registry's model of the same name."""
    flops = dict(
        speedup.filter(pl.col("train_flops_per_image").is_not_null())
        .select("model", "train_flops_per_image")
        .unique("model")
        .iter_rows()
    )
    return paper_frame().select(
        "source",
        pl.lit("paper").alias("variant"),
        "model",
        "parameters",
        pl.col("model").replace_strict(flops, default=None, return_dtype=pl.Int64).alias("train_flops_per_image"),
        "speedup",
        "cpu_epoch_seconds",
        "gpu_epoch_seconds",
        pl.lit(None, dtype=pl.Float64).alias("speedup_ci_low"),
        pl.lit(None, dtype=pl.Float64).alias("speedup_ci_high"),
        pl.lit(None, dtype=pl.Float64).alias("speedup_interval_low"),
        pl.lit(None, dtype=pl.Float64).alias("speedup_interval_high"),
        pl.lit(None, dtype=pl.String).alias("pairing"),
        pl.lit(None, dtype=pl.Int64).alias("leases"),
    )


def _size_points(speedup: pl.DataFrame, column: str) -> pl.DataFrame:
    """The measured speedups and the paper's, each with its size in `column`; the interval with every spread only
    where the page shows one (a figure repeated in seeds, rounds or leases: report.speedup_interval's rule)."""
    repeated = (
        pl.col("speedup_ci_low").is_not_null()
        | (pl.col("leases").fill_null(0) > 1)
        | (pl.col("rounds").fill_null(1) > 1)
    )
    measured = (
        speedup.filter(pl.col("speedup").is_not_null())
        .with_columns(
            pl.when(repeated).then(pl.col(c)).otherwise(None).alias(c)
            for c in ("speedup_interval_low", "speedup_interval_high")
        )
        .select(
            "source",
            "variant",
            "model",
            "parameters",
            "train_flops_per_image",
            "speedup",
            "cpu_epoch_seconds",
            "gpu_epoch_seconds",
            "speedup_ci_low",
            "speedup_ci_high",
            "speedup_interval_low",
            "speedup_interval_high",
            "pairing",
            "leases",
        )
    )
    return pl.concat([measured, _paper_points(speedup)], how="vertical_relaxed").filter(pl.col(column).is_not_null())


CROSSING_RING = 260  # the ring around a point whose CPU and GPU were timed in different machine leases


def _pairing_subtitles(measured: pl.DataFrame) -> list[str]:
    """The marks' key, where a point carries one: ringed and † where CPU and GPU crossed leases; ‡ where a lease
    was not recorded (the tooltip says which)."""
    found = measured["pairing"].drop_nulls().to_list()
    lines = []
    if "cross-lease" in found:
        lines.append("ringed †: CPU and GPU timed in different machine leases")
    if "unknown" in found:
        lines.append(f"‡ lease not recorded for {found.count('unknown')} point(s) (see the tooltip)")
    return lines


def _crossing_rings(measured: pl.DataFrame, x, y, column: str) -> list:
    crossing = measured.filter(pl.col("pairing") == "cross-lease")
    if crossing.is_empty():
        return []
    return [
        alt.Chart(crossing)
        .mark_point(shape="circle", filled=False, size=CROSSING_RING, strokeWidth=1.5, color="#222222")
        .encode(x=x, y=y, tooltip=_size_tooltip(column))
    ]


def _size_subtitles(speedup: pl.DataFrame, fits: pl.DataFrame, lines: pl.DataFrame) -> list[str]:
    """Each source and variant's verdict (R² against FLOPs and parameters), and the sources without a line."""
    groups = speedup.select("source", "variant").unique(maintain_order=True)
    several = groups["source"].n_unique() > 1
    subtitles = [
        f"{words.source_short(s) + ', ' if several else ''}{v}: {text}"
        for (s, v) in groups.iter_rows()
        if (text := verdict(fits, s, v, short=True))
    ]
    unfitted = sorted(
        {words.source_short(s) for s in speedup.filter(pl.col("speedup").is_not_null())["source"].unique().to_list()}
        - {words.source_short(s) for s in lines["source"].unique().to_list()}
    )
    if unfitted:
        subtitles.append(f"no fitted line for {', '.join(unfitted)}: fewer than 3 models measured on both devices")
    return subtitles


def _size_axes(measured: pl.DataFrame, column: str, axis: str) -> tuple[alt.X, alt.Y, list, list]:
    """Log axes around the points (the intervals included); and their domains."""
    xdomain = _log_domain(measured[column].to_list(), 1.6)
    ydomain = _log_domain([*measured["speedup"].to_list(), *measured["speedup_ci_low"].to_list()], 1.3)
    ydomain[1] = max([ydomain[1], *(v * 1.1 for v in measured["speedup_ci_high"].to_list() if v)])
    x = alt.X(
        f"{column}:Q",
        scale=alt.Scale(type="log", domain=xdomain, nice=False),
        axis=alt.Axis(format="~s", grid=False),
        title=axis,
    )
    y = alt.Y(
        "speedup:Q",
        scale=alt.Scale(type="log", domain=ydomain, nice=False),
        axis=alt.Axis(labelExpr=TIMES),
        title="speedup (CPU time / GPU time)",
    )
    return x, y, xdomain, ydomain


def _size_tooltip(column: str) -> list[alt.Tooltip]:
    return [
        *named("source_words", "variant", "model"),
        alt.Tooltip(f"{column}:Q", format=".3~s", title=columns.heading(column)),
        alt.Tooltip("speedup:Q", format=".2f", title="speedup (×)"),
        alt.Tooltip("speedup_ci_low:Q", format=".2f", title="95% interval low (×)"),
        alt.Tooltip("speedup_ci_high:Q", format=".2f", title="95% interval high (×)"),
        alt.Tooltip("speedup_interval_low:Q", format=".2f", title="with every spread, low (×)"),
        alt.Tooltip("speedup_interval_high:Q", format=".2f", title="with every spread, high (×)"),
        alt.Tooltip("pairing_words:N", title="CPU and GPU paired"),
        alt.Tooltip("leases:Q", title="machine leases"),
        alt.Tooltip("cpu_epoch_seconds:Q", format=".2f", title="CPU seconds per epoch"),
        alt.Tooltip("gpu_epoch_seconds:Q", format=".2f", title="GPU seconds per epoch"),
    ]


def _size_lines(measured, lines, x, y, style: Style, present, variants) -> list:
    """The fitted power laws and the 95% bootstrap intervals over seeds, under the points."""
    layers = []
    if not lines.is_empty():
        layers.append(
            alt.Chart(lines)
            .mark_line(strokeWidth=1.5, opacity=0.8)
            .encode(
                x=x,
                y=y,
                color=style.colour(present),
                strokeDash=style.dash(variants),
                tooltip=[*named("source", "variant"), alt.Tooltip("fit:N", title="power-law fit")],
            )
        )
    with_interval = measured.filter(pl.col("speedup_ci_low").is_not_null())
    if not with_interval.is_empty():  # 95% bootstrap interval over seeds
        layers.append(
            alt.Chart(with_interval)
            .mark_rule(strokeWidth=1.5)
            .encode(x=x, y="speedup_ci_low:Q", y2="speedup_ci_high:Q", color=style.colour(present))
        )
    return layers


def speedup_vs_size(
    speedup: pl.DataFrame, fits: pl.DataFrame, column: str, title: str, axis: str, style: Style
) -> alt.Chart:
    """Speedup against a size (parameters or training FLOPs per image), log-log, with each source's power law."""
    measured = _size_points(speedup, column)
    lines = _fit_lines(speedup, fits, column, FIT_PARAMETERS if column == "parameters" else FIT_FLOPS)
    subtitles = _size_subtitles(speedup, fits, lines)
    subtitles.append(style.key(measured["variant"].unique().to_list()))
    subtitles += _pairing_subtitles(measured)
    chart_title = _title(title, subtitles, speedup)
    if measured.is_empty():
        return _empty(chart_title, "No model measured on both CPU and GPU yet: nothing to plot.")
    x, y, xdomain, ydomain = _size_axes(measured, column, axis)
    measured = measured.sort(column)
    present = measured["source"].unique().to_list()
    variants = measured["variant"].unique().to_list()
    measured = measured.with_columns(
        _mapped(measured, "source", words.source_short).alias("source_words"),
        _mapped(measured, "pairing", lambda p: words.PAIRING_WORDS.get(p, p)).alias("pairing_words"),
    )
    labels = label_rows(
        _by_importance(measured, column), column, "speedup", Plot(tuple(xdomain), tuple(ydomain), HEIGHT)
    )
    points = style.points(measured, x, y, _size_tooltip(column), present, variants, filled=True, size=80, opacity=0.9)
    layers = [
        *_size_lines(measured, lines, x, y, style, present, variants),
        *_crossing_rings(measured, x, y, column),
        points,
        *_labels(labels, x, y),
    ]
    return framed(alt.layer(*layers), chart_title, title)


def charts(tables: dict, style: Style, tolerance: float) -> dict[str, alt.Chart]:
    speedup, fits = tables["speedup"], tables["fits"]
    return {
        "speedup_vs_flops": speedup_vs_size(
            speedup,
            fits,
            "train_flops_per_image",
            "Speedup vs training FLOPs per image",
            "training FLOPs per image",
            style,
        ),
        "speedup_vs_parameters": speedup_vs_size(
            speedup, fits, "parameters", "Speedup vs parameters", "parameters", style
        ),
    }
