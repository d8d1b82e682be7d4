"""Direct labels instead of a far-away legend: each point's label placed beside it where it overlaps nothing."""

from __future__ import annotations

import math
from dataclasses import dataclass

import altair as alt
import polars as pl

from gpuscale.analyze.tables import PAPER_SOURCE, paper_frame
from gpuscale.present.charts.style import _same_axis

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
