"""The speedup against model size, beside the paper (its charts only)."""

from __future__ import annotations

from gpuscale.present.page import Page

ID = "speedup"
NAV = "Speedup and size"
CHARTS = {  # its charts (gpuscale.words.CHART_NAMES), each with the words under it
    "speedup_vs_parameters": "Each point is one model: CPU time over GPU time, against its parameter count, both axes "
    "logarithmic; a vertical bar is the 95% bootstrap interval over seeds. A line is a power law fitted per source "
    "and variant (solid: paper variant, dashed: tuned); the paper's three models are grey.",
    "speedup_vs_flops": "The same speedups against the compute one training image needs (forward + backward FLOPs). "
    "The closer the points lie to their line, the better this size predicts the speedup: compare the R² in the "
    "subtitle with the parameters chart.",
}
TEMPLATE = """\
<section id="speedup">
<h2>Speedup and model size, with the paper</h2>
<div class="charts-2">{% for f in figures.speedup %}{{ figure(f) }}{% endfor %}</div>
</section>"""  # noqa: E501 (the page's markup, line for line)


def context(page: Page) -> dict:
    return {}
