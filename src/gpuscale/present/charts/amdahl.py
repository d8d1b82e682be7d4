"""Amdahl's law across models: each model's S(N) from the GPU-against-CPU fit, its measured speedup marked."""

from __future__ import annotations

import math

import altair as alt
import polars as pl

from gpuscale.analyze import analysis
from gpuscale.analyze.tables import PAPER_SOURCE, Fit, paper_frame
from gpuscale.present.charts.labels import Plot, _by_importance, _labels, label_rows
from gpuscale.present.charts.style import HEIGHT, TIMES, Style, _empty, _log_domain, _title, framed, named


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
    tooltip = [
        *tooltip,
        alt.Tooltip("N:Q", format=".1f", title="N = k · P"),
        alt.Tooltip("S:Q", format=".2f", title="measured speedup (×)"),
        alt.Tooltip("position:N", title="where the marker sits"),
    ]
    for filled in (True, False):
        subset = marks_frame.filter(pl.col("k_known") == filled)
        if not subset.is_empty():
            layers.append(style.points(subset, x, y, tooltip, present, variants, filled=filled, size=90, strokeWidth=2))
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
    tooltip = [*named("source", "variant", "model"), alt.Tooltip("P:Q", format=".4f", title="parallel share P")]
    line = (
        amdahl_curve_points(alt.Chart(pl.DataFrame(curves)))
        .mark_line(strokeWidth=1.2, opacity=0.7)
        .encode(
            x=x, y=y, color=style.colour(present), strokeDash=style.dash(variants), detail="group:N", tooltip=tooltip
        )
    )
    layers = [line, *_amdahl_markers(marks, ydomain, x, y, style, present, variants, tooltip)]
    return framed(alt.layer(*layers), title, "Amdahl's law per model", HEIGHT + 60)


def charts(tables: dict, style: Style, tolerance: float) -> dict[str, alt.Chart]:
    return {"amdahl": amdahl(tables["speedup"], tables["fits"], style)}
