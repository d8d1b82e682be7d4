"""CPU against GPU test accuracy per model, inside or outside the tolerance band."""

from __future__ import annotations

import altair as alt
import polars as pl

from gpuscale.present.charts.labels import Plot, _labels, label_rows
from gpuscale.present.charts.style import HEIGHT, Style, _empty, _title, framed, named


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
    layers = [*_parity_band(band, scale, x, y), *_accuracy_points(shown, x, y, style)]
    return framed(alt.layer(*layers), title, "Test accuracy, CPU against GPU")


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
    tooltip = [
        *named("source", "variant", "model"),
        alt.Tooltip("cpu_accuracy:Q", format=".2%", title="CPU test accuracy"),
        alt.Tooltip("gpu_accuracy:Q", format=".2%", title="GPU test accuracy"),
        alt.Tooltip("accuracy_difference:Q", format="+.2%", title="GPU − CPU"),
        alt.Tooltip("agrees:N", title="within the tolerance"),
    ]
    points = style.points(frame, x, y, tooltip, present, variants, filled=True, size=80)
    placed = label_rows(frame, "cpu_accuracy", "gpu_accuracy", Plot.of(x, y, HEIGHT))
    return [points, *_labels(placed, x, y)]


def charts(tables: dict, style: Style, tolerance: float) -> dict[str, alt.Chart]:
    return {"accuracy": accuracy(tables["speedup"], tolerance, style)}
