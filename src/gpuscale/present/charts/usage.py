"""Per model and variant, one row each, a point per device: seconds per epoch and training throughput."""

from __future__ import annotations

import re

import altair as alt
import polars as pl

from gpuscale import words
from gpuscale.analyze.tables import LOCAL_SOURCE
from gpuscale.present.charts.style import DEVICE_COLOUR, Style, _empty, _log_domain, _mapped, _title, framed, named


def _model_order(frame: pl.DataFrame) -> list[str]:
    """Models by training FLOPs per image, the order of every table and axis."""
    return (
        frame.sort("train_flops_per_image", "parameters", "model", nulls_last=True)["model"]
        .unique(maintain_order=True)
        .to_list()
    )


def _row_label(frame: pl.DataFrame, *parts: str) -> pl.Expr:
    """model · device · variant (one other than the paper's, where the chart shows several) · source (where it
    shows several, by a short tag: 'here' for this host, a reference folder's first word, e.g. 'h200'): short
    enough to be read whole beside a phone's bars."""
    exprs = [pl.col("model")]
    for part in parts:
        if part != "variant":
            exprs += [pl.lit(" · "), pl.col(part)]
        elif frame[part].n_unique() > 1:  # the paper's protocol goes without saying; another variant is named
            exprs.append(pl.when(pl.col(part) == "paper").then(pl.lit("")).otherwise(pl.lit(" · ") + pl.col(part)))
    if frame["source"].n_unique() > 1:
        exprs += [pl.lit(" · "), _mapped(frame, "source", source_tags(frame["source"].unique().to_list()).get)]
    return pl.concat_str(exprs)


def source_tags(sources: list[str]) -> dict[str, str]:
    """Each source's short tag: 'here' for this host; a reference folder's first word (h200-2026-12-04 -> h200)
    where no other source shares it, else its whole name."""
    short = {s: words.source_short(s) for s in sources}
    first = {s: re.split(r"[-_ ]", name)[0] for s, name in short.items()}
    tags = {}
    for s in sources:
        if s == LOCAL_SOURCE:
            tags[s] = "here"
        elif list(first.values()).count(first[s]) == 1:
            tags[s] = first[s]
        else:
            tags[s] = short[s]
    return tags


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
    points = (
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
                *named("source", "model", "device_words", "variant"),
                alt.Tooltip(f"{column}:Q", format=fmt, title=axis),
                alt.Tooltip("seeds:Q", title="runs (median over them)"),
                alt.Tooltip("host:N", title="host"),
            ],
        )
    )
    return framed(points, chart_title, title, max(120, 18 * len(order)))


def charts(tables: dict, style: Style, tolerance: float) -> dict[str, alt.Chart]:
    runs = tables["runs"]
    return {
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
    }
