"""The charts stage: Altair charts from the aggregated Polars tables, one module per chart family.

Each chart is saved as its Vega-Lite spec (for the report), as SVG, and as a standalone offline HTML page (the Vega
libraries inlined, every string escaped). One visual language on every chart of a page (style.py): a source keeps
one colour, a device another, a variant its dash and shape (gpuscale.words); axes in the reader's units (SI ticks, ×,
%); charts fill their container's width. A chart whose data do not allow it says so and draws no line. A family is
one module with `charts(tables, style, tolerance) -> {name: chart}` and a line in FAMILIES; its names are in
gpuscale.words.CHART_NAMES.
"""

from __future__ import annotations

import html
import json
import logging
from pathlib import Path

import altair as alt

from gpuscale.analyze.tables import read_tables
from gpuscale.contract import fsutil
from gpuscale.present.charts import accuracy, amdahl, phases, size, sweeps, usage
from gpuscale.present.charts.style import EXPORT_WIDTH, Style
from gpuscale.words import CHART_NAMES, chart_title, script_json

log = logging.getLogger("gpuscale.present.charts")

FAMILIES = [size, phases, amdahl, usage, accuracy, sweeps]  # one module each: charts(tables, style, tolerance)


def build(tables: dict, tolerance: float) -> dict[str, alt.Chart]:
    style = Style.of(tables)
    built = {name: chart for family in FAMILIES for name, chart in family.charts(tables, style, tolerance).items()}
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
    with fsutil.atomic_directory(out_dir) as folder:  # the set swapped in whole: an interrupted save leaves none
        for name, chart in charts.items():
            vl = spec(chart)
            fsutil.write_text(folder / f"{name}.svg", vl_convert.vegalite_to_svg(fixed_width(vl)))
            fsutil.write_text(folder / f"{name}.html", page(vl, chart_title(vl), bundle))
            fsutil.write_text(folder / f"{name}.vl.json", json.dumps(vl) + "\n")
    return [out_dir / f"{name}.{ext}" for name in charts for ext in ("vl.json", "svg", "html")]


def run(tables_dir: Path, out_dir: Path, tolerance: float) -> list[Path]:
    charts = build(read_tables(tables_dir), tolerance)
    written = save(charts, out_dir)
    log.info("wrote %d charts -> %s", len(charts), out_dir)
    return written
