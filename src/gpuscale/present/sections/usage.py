"""Hardware or the way it is used: each variant's gain per device, and the epoch and throughput charts."""

from __future__ import annotations

from gpuscale.present.page import Page, table_if_rows

ID = "usage"
NAV = "Hardware or usage"
CHARTS = {  # its charts (gpuscale.words.CHART_NAMES), each with the words under it
    "epoch_seconds": "Mean seconds per training epoch (evaluation excluded), median over seeds, one row per model and "
    "variant, coloured by device; the gap between a row's two points is its speedup.",
    "throughput": "Training images per second over the whole run, by model, variant and device.",
}
TEMPLATE = """\
<section id="usage">
<h2>Hardware or the way it is used</h2>
{% if gains %}<p>Seconds per epoch of each variant against the paper variant, per device: the paper variant's CPU/GPU
ratio is what the hardware gives run the paper's way; a device's gain is what running it another way adds on that
device alone (whole run: compilation included; steady: the epochs after the first).</p>
<details><summary>Gain of each variant per device (table, {{ gains.rows|length }} rows)</summary>
{{ data_table(gains, tall=True) }}
</details>
{% else %}<p>Only one variant measured: add <code>tuned</code> to <code>study.variants</code> to split the speedup into
hardware and usage.</p>{% endif %}
<div class="charts-2">{% for f in figures.usage %}{{ figure(f) }}{% endfor %}</div>
</section>"""  # noqa: E501 (the page's markup, line for line)


def context(page: Page) -> dict:
    gains = page.tables["gains"].sort("source", "model", "device", "variant")
    caption = (
        "Each device's gain from the paper variant to another, per model: over the whole run (compilation included) "
        "and over steady epochs."
    )
    return {"gains": table_if_rows("gains", caption, gains)}
