"""Sweeps and scaling: the thread and batch sweeps, and data-parallel runs."""

from __future__ import annotations

from gpuscale.present.page import Page, table_if_rows

ID = "sweeps"
NAV = "Sweeps and scaling"
CHARTS = {  # its charts (gpuscale.words.CHART_NAMES), each with the words under it
    "threads": "CPU thread sweep: each point is one run with N threads, its steady epoch against the run with the "
    "fewest threads. The dashed curve is Amdahl's law fitted by the aggregation stage to the same points (epoch = "
    "a + b / N, P = b / (a + b)): a measured parallel share with a real N. A faded point is a run whose torch threads "
    "plus loader workers outnumbered the logical cores (the fit still uses it).",
    "batch": "GPU batch-size sweep: training images per second against batch size. Where a line flattens the GPU "
    "(or the input pipeline feeding it) is saturated.",
    "scaling": "Data-parallel runs (cuda-ddpN: N GPUs; cpu-ddpN: N CPU processes) against one device of the same "
    "kind: steady-epoch speedup against the number of processes; the dashed line is perfect scaling. Each process "
    "takes the configured batch size, so the global batch grows with N.",
}
TEMPLATE = """\
<section id="sweeps">
<h2>Sweeps and scaling</h2>
<div class="charts-2">{% for f in figures.sweeps %}{{ figure(f) }}{% endfor %}</div>
{% if scaling %}<details><summary>Data-parallel scaling (table)</summary>
<p>Runs on several devices of one host (cuda-ddpN: N GPUs over NCCL; cpu-ddpN: N CPU processes over gloo) against
one device of the same kind; steady epochs; efficiency = speedup / N. Each process takes the batch size, so the
global batch is N times larger (and the learning rate is not scaled).</p>
{{ data_table(scaling) }}
</details>{% endif %}
</section>"""  # noqa: E501 (the page's markup, line for line)


def context(page: Page) -> dict:
    scaling = page.tables["scaling"].drop("extrapolated")
    return {"scaling": table_if_rows("scaling", "Data-parallel runs against one device of the same kind.", scaling)}
