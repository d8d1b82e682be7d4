"""The charts' one visual language: a source keeps one colour, a device another, a variant its dash and shape
(gpuscale.words); titles wrapped for a phone; axes in the reader's units; an empty chart that says why. What every
family shares: the frame of its charts (framed), its points (Style.points), the tooltips naming a mark (named)."""

from __future__ import annotations

import math
import textwrap
from dataclasses import dataclass

import altair as alt
import polars as pl

from gpuscale import words
from gpuscale.analyze.tables import LOCAL_SOURCE, PAPER_SOURCE

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
        return self._by_variant(alt.StrokeDash, 0, present)

    def shape(self, present=None) -> alt.Shape:
        return self._by_variant(alt.Shape, 1, present)

    def _by_variant(self, channel, part: int, present):
        """A channel by variant in its page-wide dash (part 0) or shape (part 1)."""
        shown = self._variants(present)
        return channel(
            "variant:N",
            title="variant",
            scale=alt.Scale(domain=shown, range=[self.variants[v][part] for v in shown]),
            legend=None,  # in words, in the subtitle (Style.key)
        )

    def points(self, frame: pl.DataFrame, x, y, tooltip: list, present, variants, **mark) -> alt.Chart:
        """The frame's points in the page's language: a source's colour and a variant's shape, with the tooltip."""
        return (
            alt.Chart(frame)
            .mark_point(**mark)
            .encode(x=x, y=y, color=self.colour(present), shape=self.shape(variants), tooltip=tooltip)
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


def named(*fields: str) -> list[alt.Tooltip]:
    """The tooltips that say what a mark stands for (source, variant, model, device...), titled without '_words'."""
    return [alt.Tooltip(f"{field}:N", title=field.removesuffix("_words")) for field in fields]


def framed(chart, title: alt.Title, description: str, height: int = HEIGHT) -> alt.Chart:
    """A family's chart in the page's frame: its title, the container's width, a height, the words a screen reader
    says for it."""
    return chart.properties(title=title, width="container", height=height, description=description)


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
