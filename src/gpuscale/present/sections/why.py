"""Why: where the time goes (the phases and Amdahl charts) and the fits of the speedup against size."""

from __future__ import annotations

import polars as pl

from gpuscale.present.page import Page, table

ID = "why"
NAV = "Why"
CHARTS = {  # its charts (gpuscale.words.CHART_NAMES), each with the words under it
    "amdahl": "Amdahl's law with P estimated from the fit GPU epoch = s + CPU epoch / k across models (s: seconds per "
    "epoch the GPU does not accelerate, k: how much faster it runs the rest). Each curve is one model's S(N); the "
    "marker is its measured speedup, placed at N = k·P; hollow where the source's k is undetermined (see the fits), "
    "so its place along N is not a measurement. Curves flatten at 1/(1−P): the serial share caps the speedup.",
    "phases": "Each bar splits one run's training step into waiting for data (the loader), the host-to-device copy, "
    "forward, backward and the optimizer step, as shares, from instrumented steps after training (CUDA events on "
    "the GPU), so the headline times stay clean. The tooltip gives each phase's seconds per steady epoch. The "
    "paper's claim that data transfer is 30-40% of the small CNN's GPU time is checked here. A row is a model, "
    "its device, its variant where not the paper's, and its source where several ('here': this host).",
}
TEMPLATE = """\
<section id="why">
<h2>Why: where the time goes</h2>
{% for f in figures.why %}{{ figure(f) }}{% endfor %}
<details><summary>Fits: what drives the speedup (table)</summary>
{{ data_table(fits) }}
</details>
</section>"""  # noqa: E501 (the page's markup, line for line)


def context(page: Page) -> dict:
    return {"fits": fits_table(page.tables["fits"])}


def fits_table(fits: pl.DataFrame) -> dict:
    return table(
        "fits",
        "Fits per source and variant: power laws log speedup = a + b · log size (estimate b); Amdahl GPU epoch = "
        "s + CPU epoch / k (estimate k, intercept s seconds); thread sweeps (estimate P).",
        fits,
        [
            "source",
            "variant",
            "fit",
            "points",
            "leases",
            "estimate",
            "estimate_se",
            "intercept",
            "intercept_se",
            "r2",
            "note",
        ],
    )
