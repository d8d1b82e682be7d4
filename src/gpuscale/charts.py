"""The charts stage: Altair charts from the aggregated Polars tables.

Each chart is saved as its Vega-Lite spec (for the report), as SVG, and as a standalone offline HTML page (the Vega
libraries inlined, every string escaped). One visual language on every chart of a page: a source keeps one colour,
a device another, a variant its dash and shape (gpuscale.words); axes in the reader's units (SI ticks, ×, %); charts
fill their container's width. A chart whose data do not allow it says so and draws no line.
"""

from __future__ import annotations

import html
import json
import logging
import math
import textwrap
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

import altair as alt
import numpy as np
import polars as pl

from gpuscale import analysis, words
from gpuscale.contract import fsutil
from gpuscale.contract.record import PHASES as PHASE_ORDER
from gpuscale.tables import (
    FIT_FLOPS,
    FIT_PARAMETERS,
    LOCAL_SOURCE,
    PAPER_SOURCE,
    Fit,
    paper_frame,
    read_tables,
    verdict,
)
from gpuscale.words import CHART_NAMES, chart_title, script_json

log = logging.getLogger("gpuscale.charts")

HEIGHT = 340
EXPORT_WIDTH = 760  # SVG/PNG files have no container: they get this width
TIMES = "format(datum.value, '~g') + '×'"
TIMES_AXIS = {"labelExpr": TIMES}


@dataclass(frozen=True)
class Style:
    """The page's visual language: one colour per source, one per device kind, a dash and shape per variant."""

    sources: dict[str, str]
    variants: dict[str, tuple[list[int], str]]

    @classmethod
    def of(cls, tables: dict) -> Style:
        sources = {PAPER_SOURCE, *tables["runs"]["source"].to_list(), *tables["speedup"]["source"].to_list()}
        variants = {"paper", *tables["runs"]["variant"].to_list()}
        return cls(words.source_colours(sources, PAPER_SOURCE, LOCAL_SOURCE), words.variant_styles(variants))

    def colour(self, present=None, title: str = "source") -> alt.Color:
        """Colour by source; the legend lists the sources present (given), each in its page-wide colour."""
        shown = [s for s in self.sources if present is None or s in set(present)] or list(self.sources)
        return alt.Color(
            "source:N",
            title=title,
            scale=alt.Scale(domain=shown, range=[self.sources[s] for s in shown]),
            legend=alt.Legend(orient="bottom", direction="vertical"),
        )

    def key(self, present=None) -> str:
        """The variants shown, in words with their marker and dash (the charts draw no variant legend)."""
        return words.variant_key({v: self.variants[v] for v in self._variants(present)})

    def _variants(self, present) -> list[str]:
        return [v for v in self.variants if present is None or v in set(present)] or list(self.variants)

    def dash(self, present=None) -> alt.StrokeDash:
        shown = self._variants(present)
        return alt.StrokeDash(
            "variant:N",
            title="variant",
            scale=alt.Scale(domain=shown, range=[self.variants[v][0] for v in shown]),
            legend=None,  # in words, in the subtitle (Style.key)
        )

    def shape(self, present=None) -> alt.Shape:
        shown = self._variants(present)
        return alt.Shape(
            "variant:N",
            title="variant",
            scale=alt.Scale(domain=shown, range=[self.variants[v][1] for v in shown]),
            legend=None,  # in words, in the subtitle (Style.key)
        )


DEVICE_COLOUR = alt.Color(
    "device_kind:N",
    title="device",
    scale=alt.Scale(domain=["CPU", "GPU"], range=[words.DEVICE_COLOURS["cpu"], words.DEVICE_COLOURS["gpu"]]),
    legend=alt.Legend(orient="bottom"),
)


def _flags(frame: pl.DataFrame) -> list[str]:
    flags = []
    if "synthetic" in frame.columns and frame["synthetic"].fill_null(False).any():
        flags.append("SYNTHETIC DATA: accuracies meaningless")
    if "extrapolated" in frame.columns and frame["extrapolated"].fill_null(False).any():
        flags.append("includes extrapolated (sampled) times")
    return flags


TITLE_CHARS, SUBTITLE_CHARS = 32, 48  # what a line of each holds on a phone (390 px) without running off


def _title(text: str, subtitle: str | list[str] = "", frame: pl.DataFrame | None = None) -> alt.Title:
    """A title and its subtitle lines, wrapped so that no line runs off a phone's screen (Vega does not wrap)."""
    lines = [subtitle] if isinstance(subtitle, str) else list(subtitle)
    if frame is not None and (flags := _flags(frame)):
        lines.append("; ".join(flags))
    wrapped = [part for line in lines if line for part in textwrap.wrap(line, SUBTITLE_CHARS)]
    title = textwrap.wrap(text, TITLE_CHARS)
    return alt.Title(title if len(title) > 1 else text, subtitle=wrapped, anchor="start")


def _empty(title: alt.Title, message: str) -> alt.Chart:
    return (
        alt.Chart(pl.DataFrame({"message": [message]}))
        .mark_text(size=14, color="#444")
        .encode(text="message:N")
        .properties(title=title, width="container", height=80, usermeta={"empty": True, "message": message})
    )


def _same_axis(channel: alt.Y, field: str) -> alt.Y:
    """The same y channel (scale, axis, title) on another field: labels placed apart from their points."""
    return alt.Y(f"{field}:Q", **{k: v for k, v in channel.to_dict().items() if k not in ("field", "type")})


def _mapped(frame: pl.DataFrame, column: str, fn) -> pl.Expr:
    """A column's values in words (each distinct value mapped once)."""
    values = [v for v in frame[column].unique().to_list() if v is not None]
    return pl.col(column).replace_strict({v: fn(v) for v in values}, default=None, return_dtype=pl.String)


def _log_domain(values, pad: float = 1.35) -> list[float]:
    vals = [v for v in values if v is not None and v > 0 and math.isfinite(v)]
    if not vals:
        return [1, 10]
    return [min(vals) / pad, max(vals) * pad]


# The direct labels' geometry, in the plot's pixels. Text is 11 px; a wide sans-serif (DejaVu Sans, Chromium's
# fallback on Linux) averages under 0.64 em per character of a model name, and its line box is under 14 px.
LABEL_FONT_SIZE = 11
LABEL_CHAR_WIDTH = 0.64 * LABEL_FONT_SIZE
LABEL_HEIGHT = 14
LABEL_GAP = 7  # between a point's centre and its label
POINT_HALF = 5  # half the side of a point marker (size 80)
# Plot widths (px) a placement is made for: each holds from its width up to the next one, the last up to a width no
# report column reaches; Vega's `width` signal picks the placement drawn, so a phone and a wide screen both get one.
LABEL_WIDTHS = (160, 260, 380, 560, 800, 1100, 4000)


@dataclass(frozen=True)
class Plot:
    """A plot's pixel space at any width (log or linear axes): a point's x is its share of the width, its y a row."""

    xdomain: tuple[float, float]
    ydomain: tuple[float, float]
    height: float
    xlog: bool = True
    ylog: bool = True

    @classmethod
    def of(cls, x: alt.X, y: alt.Y, height: float) -> Plot:
        """The pixel space of two channels with explicit domains."""
        xs, ys = x.to_dict()["scale"], y.to_dict()["scale"]
        return cls(tuple(xs["domain"]), tuple(ys["domain"]), height, xs.get("type") == "log", ys.get("type") == "log")

    def share(self, x: float) -> float:
        return _unit(x, self.xdomain, self.xlog)

    def row(self, y: float) -> float:
        return self.height - _unit(y, self.ydomain, self.ylog) * self.height

    def y_at(self, y: float, dy: float) -> float:
        """The value dy pixels below the value y."""
        lo, hi = (math.log(v) for v in self.ydomain) if self.ylog else self.ydomain
        step = -dy * (hi - lo) / self.height
        return float(y * math.exp(step) if self.ylog else y + step)


def _unit(value: float, domain: tuple[float, float], log: bool) -> float:
    """Where a value lies along its axis, 0 at the domain's start and 1 at its end."""
    lo, hi, v = (math.log(d) for d in (*domain, value)) if log else (*domain, value)
    return (v - lo) / (hi - lo or 1)


@dataclass(frozen=True)
class Box:
    """A box whose left edge is at share * width + offset px: it moves with the plot's width; its rows do not."""

    share: float
    offset: float
    width: float
    top: float
    bottom: float

    def left(self, plot_width: float) -> float:
        return self.share * plot_width + self.offset

    def apart(self, other: Box, widths: tuple[float, float]) -> bool:
        """Clear of the other box at every plot width between the two given: one above the other, or one on the
        same side of the other at both ends (the edges move linearly with the width, so then at all between)."""
        if self.bottom <= other.top or other.bottom <= self.top:
            return True
        right = [self.left(w) >= other.left(w) + other.width for w in widths]
        left = [self.left(w) + self.width <= other.left(w) for w in widths]
        return all(right) or all(left)


def _label_box(share: float, row: float, text: str, left: bool, dy: float) -> Box:
    w = LABEL_CHAR_WIDTH * len(text)
    offset = -LABEL_GAP - w if left else LABEL_GAP
    return Box(share, offset, w, row + dy - LABEL_HEIGHT / 2, row + dy + LABEL_HEIGHT / 2)


# Where a label may sit, in the order tried: (dy in pixels, left of the point?). Beside a point: right, left, then a
# line above or below; at a line's end (the line comes in from the left): above or below on the left, then right.
BESIDE = tuple((dy, left) for dy in (0, -LABEL_HEIGHT, LABEL_HEIGHT) for left in (False, True))
AT_END = ((-0.75 * LABEL_HEIGHT, True), (0.75 * LABEL_HEIGHT, True), (0, False), (-1.75 * LABEL_HEIGHT, True))


def place_labels(points: list, plot: Plot, widths: tuple[float, float], slots=BESIDE) -> list:
    """Greedy: each label, in the order given (most important first), takes the first free slot of `slots` by its
    point, inside the plot and clear of every point and every label placed before it, at every plot width in
    `widths`; (dy in pixels, left?) or None where there is no room (the point's tooltip still names it)."""
    where = [(plot.share(x), plot.row(y)) for x, y, _ in points]
    taken = [Box(s, -POINT_HALF, 2 * POINT_HALF, r - POINT_HALF, r + POINT_HALF) for s, r in where]
    out = []
    for (share, row), (_, _, text) in zip(where, points, strict=True):
        found = None
        for dy, left in slots:
            box = _label_box(share, row, text, left, dy)
            inside = box.left(widths[0]) >= 0 and box.left(widths[0]) + box.width <= widths[0]
            inside = inside and box.top >= 0 and box.bottom <= plot.height
            if inside and all(box.apart(other, widths) for other in taken):
                found = (dy, left)
                taken.append(box)
                break
        out.append(found)
    return out


def label_rows(frame: pl.DataFrame, x: str, y: str, plot: Plot, slots=BESIDE) -> pl.DataFrame:
    """The direct labels of `frame`'s points (its rows in order of importance), placed once per range of plot widths
    of LABEL_WIDTHS: x, label_y, label_left and the widths [label_from, label_to) each placement is drawn at."""
    points = [(row[x], row[y], str(row["model"])) for row in frame.iter_rows(named=True)]
    rows = []
    for low, high in zip(LABEL_WIDTHS, LABEL_WIDTHS[1:], strict=False):
        drawn = (0 if low == LABEL_WIDTHS[0] else low, high)
        for (xv, yv, model), placed in zip(points, place_labels(points, plot, (low, high), slots), strict=True):
            if placed is not None:
                rows.append(
                    {x: xv, "label_y": plot.y_at(yv, placed[0]), "label_left": placed[1], "model": model}
                    | {"label_from": float(drawn[0]), "label_to": float(drawn[1])}
                )
    schema = {x: pl.Float64, "label_y": pl.Float64, "label_left": pl.Boolean, "model": pl.String}
    return pl.DataFrame(rows, schema=schema | {"label_from": pl.Float64, "label_to": pl.Float64})


def _by_importance(frame: pl.DataFrame, column: str) -> pl.DataFrame:
    """Points in the order their labels are placed: the paper's, then the paper's models elsewhere, then by size."""
    paper_models = paper_frame()["model"].to_list()
    return frame.sort(
        pl.col("source") != PAPER_SOURCE,
        ~pl.col("model").is_in(paper_models),
        pl.col("variant") != "paper",
        pl.col(column),
    )


def _labels(rows: pl.DataFrame, x: alt.X, y: alt.Y) -> list[alt.Chart]:
    """Direct labels at label_y, right of their point or left of it, those placed for the plot's width."""
    base = (
        alt.Chart(rows)
        .encode(x=x, y=_same_axis(y, "label_y"), text="model:N")
        .transform_filter("width >= datum.label_from && width < datum.label_to")
    )
    text = {"fontSize": LABEL_FONT_SIZE, "color": "#333"}
    return [
        base.transform_filter("!datum.label_left").mark_text(dx=LABEL_GAP, align="left", **text),
        base.transform_filter("datum.label_left").mark_text(dx=-LABEL_GAP, align="right", **text),
    ]


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
        alt.Tooltip("source_words:N", title="source"),
        alt.Tooltip("variant:N", title="variant"),
        alt.Tooltip("model:N", title="model"),
        alt.Tooltip(f"{column}:Q", format=".3~s", title=words.column(column)),
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
                tooltip=[
                    alt.Tooltip("source:N", title="source"),
                    alt.Tooltip("variant:N", title="variant"),
                    alt.Tooltip("fit:N", title="power-law fit"),
                ],
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
    points = (
        alt.Chart(measured)
        .mark_point(filled=True, size=80, opacity=0.9)
        .encode(x=x, y=y, color=style.colour(present), shape=style.shape(variants), tooltip=_size_tooltip(column))
    )
    layers = [
        *_size_lines(measured, lines, x, y, style, present, variants),
        *_crossing_rings(measured, x, y, column),
        points,
        *_labels(labels, x, y),
    ]
    return alt.layer(*layers).properties(title=chart_title, width="container", height=HEIGHT, description=title)


def _amdahl_curves(speedup: pl.DataFrame, fits: pl.DataFrame) -> tuple[list[dict], list[dict]]:
    """Per model of each Amdahl fit: its S(N) curve's points and its measured speedup's marker at N = k P."""
    curves, marks = [], []
    paper = paper_frame()
    for fit in fits.filter((pl.col("fit_id") == Fit.AMDAHL) & pl.col("ok")).iter_rows(named=True):
        frame = (
            paper
            if fit["source"] == PAPER_SOURCE
            else speedup.filter(
                (pl.col("source") == fit["source"])
                & (pl.col("variant") == fit["variant"])
                & pl.col("speedup").is_not_null()
            )
        )
        s, k = fit["intercept"], fit["estimate"]
        k_known = not analysis.k_undetermined(k, fit["estimate_se"])
        for row in frame.iter_rows(named=True):
            p = analysis.parallel_fraction(s, row["cpu_epoch_seconds"])
            if not 0 < p < 1:
                continue
            series = f"{fit['source']} / {fit['variant']}"
            key = {"source": fit["source"], "variant": fit["variant"], "series": series, "model": row["model"], "P": p}
            group = f"{fit['source']} / {fit['variant']} / {row['model']}"
            curves.append({**key, "group": group})  # drawn by the page (amdahl_curve_points)
            marks.append(
                {
                    **key,
                    "group": group,
                    "N": analysis.effective_units(p, k),
                    "S": row["speedup"],
                    "k_known": k_known,
                    "position": "N = k · P" if k_known else "k undetermined: its place along N is not measured",
                }
            )
    return curves, marks


AMDAHL_N = (1.0, 1e4)  # the N axis: one unit to ten thousand
AMDAHL_POINTS = 60  # points per curve, evenly spaced on the log axis


def amdahl_curve_points(chart: alt.Chart) -> alt.Chart:
    """Each curve's points, computed in the page from its P (a row per curve embedded, not 60): the same
    S(N) = 1 / ((1 − P) + P / N) as analysis.amdahl_speedup, at AMDAHL_POINTS values of N spaced evenly in log."""
    lo, hi = (math.log10(v) for v in AMDAHL_N)
    return (
        chart.transform_calculate(step=f"sequence(0, {AMDAHL_POINTS})")
        .transform_flatten(["step"])
        .transform_calculate(N=f"pow(10, {lo} + ({hi} - {lo}) * datum.step / {AMDAHL_POINTS - 1})")
        .transform_calculate(S="1 / ((1 - datum.P) + datum.P / datum.N)")
    )


def _amdahl_markers(marks: list[dict], ydomain: list, x, y, style: Style, present, variants, tooltip) -> list:
    """The measured speedups (filled where k is determined, hollow where not) and their labels."""
    layers = []
    marks_frame = pl.DataFrame(marks).sort("N")
    xdomain = list(AMDAHL_N)
    clamped = _by_importance(marks_frame.with_columns(pl.col("N").clip(*xdomain)), "N")
    labels = label_rows(clamped, "N", "S", Plot(tuple(xdomain), tuple(ydomain), HEIGHT + 60))
    for filled in (True, False):
        subset = marks_frame.filter(pl.col("k_known") == filled)
        if subset.is_empty():
            continue
        layers.append(
            alt.Chart(subset)
            .mark_point(filled=filled, size=90, strokeWidth=2)
            .encode(
                x=x,
                y=y,
                color=style.colour(present),
                shape=style.shape(variants),
                tooltip=[
                    *tooltip,
                    alt.Tooltip("N:Q", format=".1f", title="N = k · P"),
                    alt.Tooltip("S:Q", format=".2f", title="measured speedup (×)"),
                    alt.Tooltip("position:N", title="where the marker sits"),
                ],
            )
        )
    return layers + _labels(labels, x, y)


def amdahl(speedup: pl.DataFrame, fits: pl.DataFrame, style: Style) -> alt.Chart:
    """S(N) = 1/((1-P) + P/N) per model, P from the fit T_gpu = s + T_cpu/k; measured speedup at N = k P."""
    curves, marks = _amdahl_curves(speedup, fits)
    title = _title(
        "Amdahl's law per model: S(N) = 1 / ((1 − P) + P / N)",
        [
            "P from the fit GPU epoch = s + CPU epoch / k; the marker is the measured speedup at N = k · P",
            "hollow: the source's k is undetermined; each curve flattens at 1 / (1 − P)",
            style.key({c["variant"] for c in curves}) if curves else "",
        ],
        speedup,
    )
    if not curves:
        return _empty(title, "No Amdahl fit yet: it needs 3 or more models measured on both devices in one source.")
    ends = [float(s) for c in curves for s in analysis.amdahl_speedup(c["P"], AMDAHL_N)]  # S rises with N
    ydomain = _log_domain(ends + [m["S"] for m in marks], 1.2)
    present = {c["source"] for c in curves}
    variants = {c["variant"] for c in curves}
    x = alt.X(
        "N:Q",
        scale=alt.Scale(type="log", domain=list(AMDAHL_N), nice=False),
        axis=alt.Axis(format="~s"),
        title="N, effective units (N = k · P)",
    )
    y = alt.Y(
        "S:Q",
        scale=alt.Scale(type="log", domain=ydomain, nice=False),
        axis=alt.Axis(labelExpr=TIMES),
        title="speedup S(N)",
    )
    tooltip = [
        alt.Tooltip("source:N", title="source"),
        alt.Tooltip("variant:N", title="variant"),
        alt.Tooltip("model:N", title="model"),
        alt.Tooltip("P:Q", format=".4f", title="parallel share P"),
    ]
    line = (
        amdahl_curve_points(alt.Chart(pl.DataFrame(curves)))
        .mark_line(strokeWidth=1.2, opacity=0.7)
        .encode(
            x=x, y=y, color=style.colour(present), strokeDash=style.dash(variants), detail="group:N", tooltip=tooltip
        )
    )
    layers = [line, *_amdahl_markers(marks, ydomain, x, y, style, present, variants, tooltip)]
    return alt.layer(*layers).properties(
        title=title, width="container", height=HEIGHT + 60, description="Amdahl's law per model"
    )


def _model_order(frame: pl.DataFrame) -> list[str]:
    """Models by training FLOPs per image, the order of every table and axis."""
    return (
        frame.sort("train_flops_per_image", "parameters", "model", nulls_last=True)["model"]
        .unique(maintain_order=True)
        .to_list()
    )


def _row_label(frame: pl.DataFrame, *parts: str) -> pl.Expr:
    """model · variant (· source where the page shows several)."""
    exprs = [pl.col("model")]
    for part in parts:
        exprs += [pl.lit(" · "), pl.col(part)]
    if frame["source"].n_unique() > 1:
        exprs += [pl.lit(" · "), _mapped(frame, "source", words.source_short)]
    return pl.concat_str(exprs)


def by_device(runs: pl.DataFrame, column: str, title: str, axis: str, subtitle: str) -> alt.Chart:
    measured = runs.filter(
        (pl.col("status") == "measured")
        & pl.col(column).is_not_null()
        & pl.col("sweep_parameter").is_null()
        & (pl.col("world_size") == 1)
    )
    chart_title = _title(title, subtitle, runs)
    if measured.is_empty():
        return _empty(chart_title, "No measured runs yet.")
    data = (
        measured.group_by("source", "model", "variant", "device", maintain_order=True)
        .agg(
            pl.col(column).median(),
            pl.col("parameters").first(),
            pl.col("train_flops_per_image").first(),
            pl.col("host").first(),
            pl.len().alias("seeds"),
        )
        .with_columns(
            _mapped(measured, "device", lambda d: words.device_kind(d).upper()).alias("device_kind"),
            _mapped(measured, "device", words.device).alias("device_words"),
        )
    )
    data = data.with_columns(_row_label(data, "variant").alias("row"))
    order = (
        data.sort("train_flops_per_image", "parameters", "model", "variant", "source", nulls_last=True)["row"]
        .unique(maintain_order=True)
        .to_list()
    )
    fmt = ".3~s" if "images" in column else ".2f"
    return (
        alt.Chart(data)
        .mark_point(filled=True, size=70)
        .encode(
            y=alt.Y("row:N", sort=order, title=None, axis=alt.Axis(labelLimit=170)),
            x=alt.X(
                f"{column}:Q",
                scale=alt.Scale(type="log", domain=_log_domain(data[column].to_list(), 1.3), nice=False),
                axis=alt.Axis(format="~s"),
                title=axis,
            ),
            color=DEVICE_COLOUR,
            tooltip=[
                alt.Tooltip("source:N", title="source"),
                alt.Tooltip("model:N", title="model"),
                alt.Tooltip("device_words:N", title="device"),
                alt.Tooltip("variant:N", title="variant"),
                alt.Tooltip(f"{column}:Q", format=fmt, title=axis),
                alt.Tooltip("seeds:Q", title="runs (median over them)"),
                alt.Tooltip("host:N", title="host"),
            ],
        )
        .properties(title=chart_title, width="container", height=max(120, 18 * len(order)), description=title)
    )


def accuracy(speedup: pl.DataFrame, tolerance: float, style: Style) -> alt.Chart:
    both = speedup.filter(pl.col("cpu_accuracy").is_not_null() & pl.col("gpu_accuracy").is_not_null())
    # a sampled run trained on a few steps per epoch: its accuracy is no full-run accuracy, so it is not drawn
    shown = both.filter(~pl.col("extrapolated"))
    subtitle = [
        f"inside the green band the two agree within ±{tolerance * 100:.1f} percentage points",
        style.key(shown["variant"].unique().to_list()) if not shown.is_empty() else "",
    ]
    if len(both) > len(shown):
        subtitle.append(f"{len(both) - len(shown)} pair(s) with a sampled run left out")
    title = _title("Test accuracy, CPU against GPU", subtitle, shown)
    if shown.is_empty():
        return _empty(title, "No model trained in full on both devices yet (sampled runs are not compared).")
    low = float(min(shown["cpu_accuracy"].min(), shown["gpu_accuracy"].min())) - 0.02
    high = float(max(shown["cpu_accuracy"].max(), shown["gpu_accuracy"].max())) + 0.02
    scale = alt.Scale(domain=[max(low, 0), min(high, 1)], nice=False)
    band = pl.DataFrame({"cpu_accuracy": [max(low, 0), min(high, 1)]}).with_columns(
        pl.col("cpu_accuracy").alias("gpu_accuracy"),
        (pl.col("cpu_accuracy") - tolerance).alias("lo"),
        (pl.col("cpu_accuracy") + tolerance).alias("hi"),
    )
    x = alt.X("cpu_accuracy:Q", scale=scale, title="CPU test accuracy", axis=alt.Axis(format=".0%", tickCount=6))
    y = alt.Y("gpu_accuracy:Q", scale=scale, title="GPU test accuracy", axis=alt.Axis(format=".0%", tickCount=6))
    return alt.layer(*_parity_band(band, scale, x, y), *_accuracy_points(shown, x, y, style)).properties(
        title=title, width="container", height=HEIGHT, description="Test accuracy, CPU against GPU"
    )


def _parity_band(band: pl.DataFrame, scale, x, y) -> list:
    """The green band of agreement within the tolerance, and the diagonal."""
    area = (
        alt.Chart(band)
        .mark_area(opacity=0.15, color="green", clip=True)
        .encode(
            x=x,
            y=alt.Y("lo:Q", scale=scale, title="GPU test accuracy", axis=alt.Axis(format=".0%", tickCount=6)),
            y2="hi:Q",
        )
    )
    diagonal = alt.Chart(band).mark_line(color="green", clip=True).encode(x=x, y=y)
    return [area, diagonal]


def _accuracy_points(shown: pl.DataFrame, x, y, style: Style) -> list:
    """One point per source, variant and model, labelled with the model."""
    present = shown["source"].unique().to_list()
    variants = shown["variant"].unique().to_list()
    frame = shown.select(
        "source", "variant", "model", "cpu_accuracy", "gpu_accuracy", "accuracy_difference", "accuracy_parity"
    ).with_columns(pl.when(pl.col("accuracy_parity")).then(pl.lit("yes")).otherwise(pl.lit("no")).alias("agrees"))
    points = (
        alt.Chart(frame)
        .mark_point(filled=True, size=80)
        .encode(
            x=x,
            y=y,
            color=style.colour(present),
            shape=style.shape(variants),
            tooltip=[
                alt.Tooltip("source:N", title="source"),
                alt.Tooltip("variant:N", title="variant"),
                alt.Tooltip("model:N", title="model"),
                alt.Tooltip("cpu_accuracy:Q", format=".2%", title="CPU test accuracy"),
                alt.Tooltip("gpu_accuracy:Q", format=".2%", title="GPU test accuracy"),
                alt.Tooltip("accuracy_difference:Q", format="+.2%", title="GPU − CPU"),
                alt.Tooltip("agrees:N", title="within the tolerance"),
            ],
        )
    )
    placed = label_rows(frame, "cpu_accuracy", "gpu_accuracy", Plot.of(x, y, HEIGHT))
    return [points, *_labels(placed, x, y)]


def phases(phase_table: pl.DataFrame, runs: pl.DataFrame) -> alt.Chart:
    """Each phase's share of a training step (from separate instrumented steps), per model, device and variant.

    Shares, not seconds: one study spans epochs of under a second and of many minutes, and on one seconds axis the
    fast runs' bars would vanish. The seconds per steady epoch are in the tooltip."""
    title = _title(
        "Where a training step's time goes",
        "share of each phase, from instrumented steps after training; the clean timings stay apart",
        runs,
    )
    if phase_table.is_empty():
        return _empty(title, "No phase profile in these records (train.phase_profile_steps: 0, or schema 1 records).")
    data, rows = _phase_rows(phase_table, runs)
    return (
        alt.Chart(data)
        .mark_bar()
        .encode(
            y=alt.Y("row:N", sort=rows, title=None, axis=alt.Axis(labelLimit=170)),
            x=alt.X("seconds_per_epoch:Q", title="share of a step", stack="normalize", axis=alt.Axis(format="%")),
            color=alt.Color(
                "phase_words:N",
                title="phase",
                sort=[words.phase(p) for p in PHASE_ORDER],
                scale=alt.Scale(
                    domain=[words.phase(p) for p in PHASE_ORDER], range=[words.PHASE_COLOURS[p] for p in PHASE_ORDER]
                ),
                legend=alt.Legend(orient="bottom", columns=2),
            ),
            order=alt.Order("phase_order:Q"),
            tooltip=PHASE_TOOLTIP,
        )
        .properties(
            title=title,
            width="container",
            height=max(120, 16 * len(rows)),
            description="Where a training step's time goes",
        )
    )


PHASE_TOOLTIP = [
    alt.Tooltip("source:N", title="source"),
    alt.Tooltip("model:N", title="model"),
    alt.Tooltip("device_words:N", title="device"),
    alt.Tooltip("variant:N", title="variant"),
    alt.Tooltip("phase_words:N", title="phase"),
    alt.Tooltip("fraction:Q", format=".1%", title="share of a step"),
    alt.Tooltip("seconds_per_epoch:Q", format=".3f", title="seconds per steady epoch"),
    alt.Tooltip("seconds_per_step:Q", format=".5f", title="seconds per step"),
    alt.Tooltip("overhead_fraction:Q", format=".1%", title="instrumentation overhead"),
]


def _phase_rows(phase_table: pl.DataFrame, runs: pl.DataFrame) -> tuple[pl.DataFrame, list[str]]:
    """Each phase's median over seeds per source, model, device and variant; and the bars' order (by FLOPs)."""
    sizes = runs.select("model", "train_flops_per_image", "parameters").unique("model")
    data = (
        phase_table.filter(pl.col("sweep_parameter").is_null())
        .group_by(["source", "model", "device", "variant", "phase"], maintain_order=True)
        .agg(
            pl.col("seconds_per_epoch").median(),
            pl.col("fraction").median(),
            pl.col("overhead_fraction").median(),
            pl.col("seconds_per_step").median(),
        )
        .join(sizes, on="model", how="left")
    )
    order = list(PHASE_ORDER)
    data = data.with_columns(
        _mapped(data, "device", words.device).alias("device_words"),
        _mapped(data, "phase", words.phase).alias("phase_words"),
        pl.col("phase").replace_strict({p: i for i, p in enumerate(order)}, default=99).alias("phase_order"),
    )
    data = data.with_columns(_mapped(data, "device", lambda d: words.device_kind(d).upper()).alias("device_kind"))
    data = data.with_columns(_row_label(data, "device_kind", "variant").alias("row"))
    rows = (
        data.sort("train_flops_per_image", "parameters", "model", "variant", "device", "source", nulls_last=True)["row"]
        .unique(maintain_order=True)
        .to_list()
    )
    return data, rows


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
    return alt.layer(*layers).properties(title=title, width="container", height=HEIGHT, description=sweep.description)


def _log2(values: pl.Series, title: str) -> alt.X:
    """A log-2 axis from the fewest to the most swept (explicit, so that labels can be placed in its pixels)."""
    domain = [float(values.min()), float(max(values.max(), values.min() * 2))]
    scale = alt.Scale(type="log", base=2, domain=domain, nice=False)
    return alt.X(f"{values.name}:Q", scale=scale, axis=alt.Axis(format="~s"), title=title)


def _from_zero(values, title: str, **axis) -> alt.Y:
    """A linear axis from 0 to just above the largest value (explicit, so that labels can be placed in its pixels)."""
    scale = alt.Scale(domain=[0.0, 1.08 * max(v for v in values if v is not None)], nice=False)
    return alt.Y(f"{values.name}:Q", scale=scale, title=title, axis=alt.Axis(**axis))


SWEEP_KEYS = (
    alt.Tooltip("source:N", title="source"),
    alt.Tooltip("model:N", title="model"),
    alt.Tooltip("variant:N", title="variant"),
)
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
        alt.Tooltip("device:N", title="device"),
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
                tooltip=[alt.Tooltip("model:N", title="model"), alt.Tooltip("fit:N", title="Amdahl fit")],
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


def build(tables: dict, tolerance: float) -> dict[str, alt.Chart]:
    speedup, fits, runs = tables["speedup"], tables["fits"], tables["runs"]
    style = Style.of(tables)
    built = {
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
        "phases": phases(tables["phases"], runs),
        "amdahl": amdahl(speedup, fits, style),
        "epoch_seconds": by_device(
            runs,
            "epoch_seconds_mean",
            "Seconds per training epoch",
            "seconds per epoch",
            "mean over epochs, median over runs; evaluation excluded; log scale",
        ),
        "throughput": by_device(
            runs,
            "train_images_per_second",
            "Training throughput",
            "images per second",
            "training, whole run, first epoch included; log scale",
        ),
        "accuracy": accuracy(speedup, tolerance, style),
        "threads": threads(tables["sweeps"], fits, style),
        "batch": batch(tables["sweeps"], style),
        "scaling": scaling(tables["scaling"], style),
    }
    return {name: built[name] for name in CHART_NAMES}


THEME = {
    "font": "system-ui, -apple-system, Segoe UI, Roboto, sans-serif",
    "autosize": {"type": "fit-x", "contains": "padding"},
    "axis": {"labelFontSize": 12, "titleFontSize": 12, "labelColor": "#333", "titleColor": "#222"},
    "axisX": {"labelFlush": True, "labelOverlap": True},
    "legend": {"labelFontSize": 12, "titleFontSize": 12, "labelLimit": 360, "titleLimit": 360, "labelColor": "#333"},
    "title": {"fontSize": 15, "subtitleFontSize": 12, "subtitleColor": "#444", "color": "#222"},
    "text": {"fontSize": 11},
    "view": {"stroke": "#ddd"},
}


def spec(chart: alt.Chart) -> dict:
    """The chart's Vega-Lite spec with the page's theme."""
    out = chart.to_dict()
    out["config"] = {**THEME, **out.get("config", {})}
    out["autosize"] = THEME["autosize"]
    return out


def fixed_width(vl: dict, width: int = EXPORT_WIDTH) -> dict:
    """A spec for a file with no container (SVG, PNG): the container width replaced by a fixed one."""
    out = json.loads(json.dumps(vl))
    if out.get("width") == "container":
        out["width"] = width
    out["autosize"] = {"type": "pad"}
    return out


PAGE = """<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{title}</title>
<style>body {{ font-family: system-ui, sans-serif; margin: 1rem auto; max-width: 1100px; padding: 0 1rem; }}
#chart {{ width: 100%; }}</style>
</head>
<body>
<figure><div id="chart" role="img" aria-label="{title}"></div><figcaption>{title}</figcaption></figure>
<noscript>This chart needs JavaScript; its SVG file sits beside this page.</noscript>
<script type="application/json" id="spec">{spec}</script>
<script>{bundle}</script>
<script>
vegaEmbed("#chart", JSON.parse(document.getElementById("spec").textContent),
  {{actions: {{export: true, source: false, compiled: false, editor: false}}, renderer: "svg"}});
</script>
</body>
</html>
"""


def page(vl: dict, title: str, bundle: str) -> str:
    """A standalone offline page for one chart: every string escaped (the title as HTML, the spec as script JSON)."""
    return PAGE.format(title=html.escape(title), spec=script_json(vl), bundle=bundle.replace("</script", "<\\/script"))


def save(charts: dict[str, alt.Chart], out_dir: Path) -> list[Path]:
    """<name>.html (standalone, offline), <name>.svg (slides, papers), <name>.vl.json (the spec, for the report)."""
    import vl_convert

    out_dir = Path(out_dir)
    bundle = vl_convert.javascript_bundle()
    written = []
    for name in charts:  # the specs the report requires go first and come back last: an interrupted save
        (out_dir / f"{name}.vl.json").unlink(missing_ok=True)  # leaves charts the report says to make again
    for name, chart in charts.items():
        vl = spec(chart)
        fsutil.write_text(out_dir / f"{name}.svg", vl_convert.vegalite_to_svg(fixed_width(vl)))
        fsutil.write_text(out_dir / f"{name}.html", page(vl, chart_title(vl), bundle))
        fsutil.write_text(out_dir / f"{name}.vl.json", json.dumps(vl) + "\n")
        written += [out_dir / f"{name}.{ext}" for ext in ("vl.json", "svg", "html")]
    return written


def run(tables_dir: Path, out_dir: Path, tolerance: float) -> list[Path]:
    charts = build(read_tables(tables_dir), tolerance)
    written = save(charts, out_dir)
    log.info("wrote %d charts -> %s", len(charts), out_dir)
    return written
