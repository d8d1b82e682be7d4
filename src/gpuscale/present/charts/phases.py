"""Where a training step's time goes: each run's phases (data wait, copy, forward, backward, optimizer) as shares."""

from __future__ import annotations

import altair as alt
import polars as pl

from gpuscale import words
from gpuscale.contract.record import PHASES as PHASE_ORDER
from gpuscale.present.charts.style import Style, _empty, _mapped, _title, framed, named
from gpuscale.present.charts.usage import _row_label


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
    bars = (
        alt.Chart(data)
        .mark_bar()
        .encode(
            y=alt.Y("row:N", sort=rows, title=None, axis=alt.Axis(labelLimit=210)),
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
    )
    return framed(bars, title, "Where a training step's time goes", max(120, 16 * len(rows)))


PHASE_TOOLTIP = [
    *named("source", "model", "device_words", "variant", "phase_words"),
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


def charts(tables: dict, style: Style, tolerance: float) -> dict[str, alt.Chart]:
    return {"phases": phases(tables["phases"], tables["runs"])}
