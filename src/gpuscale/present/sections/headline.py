"""The headline table: each model's speedup and its CPU and GPU seconds per epoch, beside the paper."""

from __future__ import annotations

import polars as pl

from gpuscale import words
from gpuscale.analyze import paper
from gpuscale.analyze.tables import PAPER_SOURCE
from gpuscale.present import sessions
from gpuscale.present.page import Page, _by_flops, _chip, _measured_sources, _several_leases, _variants

ID = "table"
NAV = "Speedup per model"
CHARTS = {}  # its charts (gpuscale.words.CHART_NAMES), each with the words under it
TEMPLATE = """\
<section id="table">
<h2>Speedup per model, beside the paper</h2>
<p>The paper: {{ paper.CITATION }}; {{ paper.HARDWARE.gpu }} vs {{ paper.HARDWARE.cpu }}, {{ paper.HARDWARE.software }},
{{ paper.PROTOCOL }}. CPU and GPU are only paired within one source (one host's records). Times are seconds per
epoch, first epoch included (each column's epochs in its heading; whole runs in the CSV), from the same lease pairing
as the speedup, so that CPU / GPU is the figure above them.</p>
<div class="table-wrap" role="region" aria-label="Speedup per model" tabindex="0">
<table class="headline" id="table-headline">
<caption>GPU speedup per model (whole run), ordered by training FLOPs per image</caption>
<thead><tr><th scope="col">model</th><th scope="col">parameters</th><th scope="col">training FLOPs per image</th>
{% for h in headline.header %}<th scope="col">{{ h }}</th>{% endfor %}<th scope="col">notes</th></tr></thead>
<tbody>
{% for r in headline.rows %}<tr><th scope="row">{{ r.model }}</th><td>{{ r.parameters }}</td><td>{{ r.flops }}</td>
{% for c in r.cells %}<td><span class="speed">{{ c.value }}{% if c.mark %}<sup>{{ c.mark }}</sup>{% endif %}</span>{% for line in c.lines %}<br><small>{{ line }}</small>{% endfor %}</td>{% endfor %}
<td class="notes">{% for n in r.notes %}{{ n }}{% if not loop.last %}<br>{% endif %}{% endfor %}</td></tr>
{% endfor %}</tbody>
</table>
</div>
{% if headline.marks %}<p class="definition">{% for m in headline.marks %}{{ m }}.{% if not loop.last %} {% endif %}{% endfor %}</p>{% endif %}
<p class="download"><button type="button" class="csv" data-csv="{{ csv_blobs.ref(headline.csv) }}" data-file="speedup-per-model.csv">Download this table (CSV)</button></p>
</section>"""  # noqa: E501 (the page's markup, line for line)


def context(page: Page) -> dict:
    return {"paper": paper, "headline": headline(page.tables["speedup"], page.params.report.accuracy_tolerance)}


def headline(speedup: pl.DataFrame, tolerance: float) -> dict:
    """One row per model, ordered by training FLOPs per image; the paper and every measured source/variant side by
    side; the paper's gaps 'not reported'; an accuracy that differs from the paper's beyond tolerance flagged with
    the reason the data give."""
    groups, sparse = _columns(speedup)
    by_key = {(r["source"], r["variant"], r["model"]): r for r in speedup.to_dicts()}
    papers = {p["model"]: p for p in paper.ROWS}
    rows = []
    for m in _headline_models(speedup, papers):
        name = m["model"]
        p = papers.get(name)
        notes, cells = [], []
        for s, v in groups:
            r = by_key.get((s, v, name))
            if r is None:
                cells.append({"value": "not run", "mark": "", "lines": []})
                continue
            cells.append(_headline_cell(r, _several_leases(speedup, s)))
            notes += _headline_notes(speedup, s, v, r, p, tolerance)
        for s, v in sparse:  # a variant run on a few models only: its figure as a note, not a column of "not run"
            r = by_key.get((s, v, name))
            if r is not None:
                cell = _headline_cell(r, _several_leases(speedup, s))
                detail = [line for line in cell["lines"] if "accuracy" not in line]
                notes.append(f"{words.source_short(s)}, {v}: {cell['value']}{cell['mark']} ({'; '.join(detail)})")
                notes += _headline_notes(speedup, s, v, r, p, tolerance)
        rows.append(
            {
                "model": name,
                "parameters": words.si(m["parameters"]),
                "flops": words.si(m["train_flops_per_image"]),
                "cells": [_paper_cell(p), *cells],
                "notes": notes,
            }
        )
    header = [f"paper ({paper.HARDWARE['gpu_short']} vs {paper.HARDWARE['cpu_short']}), {paper.EPOCHS} epochs"] + [
        f"{words.source_short(s)}, {v}{_epochs_words(speedup, s, v)}" for s, v in groups
    ]
    marks = words.pairing_keys(speedup.filter(pl.col("speedup").is_not_null())["pairing"].drop_nulls().to_list())
    return {"header": header, "rows": rows, "csv": _headline_csv(speedup), "marks": marks}


def _columns(speedup: pl.DataFrame) -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
    """(source, variant) groups shown as columns, and those shown as notes on their models' rows: a source's first
    variant is always a column; another one is a note where it covers fewer than 3 models and under half of the
    source's."""
    columns, sparse = [], []
    for s in _measured_sources(speedup):
        mine = speedup.filter(pl.col("source") == s)
        models = mine["model"].n_unique()
        for i, v in enumerate(_variants(mine)):
            count = mine.filter(pl.col("variant") == v)["model"].n_unique()
            few = i > 0 and count < 3 and 2 * count < models
            (sparse if few else columns).append((s, v))
    return columns, sparse


def _epochs_words(speedup: pl.DataFrame, source: str, variant: str) -> str:
    """', 3 epochs' (or ', 1-3 epochs') for one source and variant's runs, '' where not known."""
    found = speedup.filter((pl.col("source") == source) & (pl.col("variant") == variant))["epochs"].drop_nulls()
    if found.is_empty():
        return ""
    low, high = found.min(), found.max()
    return f", {low} epoch{'s' if high > 1 else ''}" if low == high else f", {low}-{high} epochs"


def _headline_models(speedup: pl.DataFrame, papers: dict) -> list[dict]:
    """Every model measured or in the paper, with its size, ordered by training FLOPs per image."""
    return _by_flops(
        pl.concat(
            [
                speedup.select("model", "parameters", "train_flops_per_image"),
                pl.DataFrame(
                    {"model": list(papers), "parameters": [None] * len(papers)},
                    schema={"model": pl.String, "parameters": pl.Int64},
                ).with_columns(pl.lit(None, dtype=pl.Int64).alias("train_flops_per_image")),
            ],
            how="vertical_relaxed",
        )
        .group_by("model")
        .agg(pl.col("parameters").drop_nulls().first(), pl.col("train_flops_per_image").drop_nulls().first())
    ).to_dicts()


def _per_epoch(cpu: float, gpu: float) -> str:
    """Both sides' seconds per epoch, first epoch included: 'CPU 19.3 · GPU 6.02 s/epoch'."""
    return f"CPU {words.seconds(cpu)[:-2]} · GPU {words.seconds(gpu)[:-2]} s/epoch"


def _headline_cell(r: dict, several_leases: bool = False) -> dict:
    """One source and variant's cell: the speedup, both sides' seconds per epoch (from the pairing the speedup came
    from, so they divide to it; epochs differ between studies), the interval or steady speedup, the GPU accuracy."""
    chip = _chip(r, several_leases)
    lines = []
    if r["cpu_epoch_seconds"] is not None and r["gpu_epoch_seconds"] is not None:
        lines.append(_per_epoch(r["cpu_epoch_seconds"], r["gpu_epoch_seconds"]))
    elif r["cpu_epoch_seconds"] is not None or r["gpu_epoch_seconds"] is not None:  # one side measured: its time
        side, seconds = (
            ("CPU", r["cpu_epoch_seconds"]) if r["cpu_epoch_seconds"] is not None else ("GPU", r["gpu_epoch_seconds"])
        )
        lines.append(f"{side} {words.seconds(seconds)[:-2]} s/epoch")
    if chip["detail"]:
        lines.append(chip["detail"])
    if r["gpu_accuracy"] is not None and not r["gpu_extrapolated"]:
        lines.append(f"GPU accuracy {words.percent(r['gpu_accuracy'], 1)}")
    return {"value": chip["value"], "mark": chip["mark"], "lines": lines}


def _headline_notes(speedup: pl.DataFrame, s: str, v: str, r: dict, p: dict | None, tolerance: float) -> list[str]:
    """What a reader must know about one cell: accuracy off between devices or against the paper, no GPU, synthetic."""
    notes = []
    if r["accuracy_parity"] is False:
        notes.append(
            f"{words.source_short(s)}, {v}: CPU and GPU accuracy differ by "
            f"{words.percent(r['accuracy_difference'], 1, sign=True)}, beyond the tolerance"
        )
    if p and p["gpu_accuracy"] is not None and r["gpu_accuracy"] is not None and not r["gpu_extrapolated"]:
        gap = r["gpu_accuracy"] - p["gpu_accuracy"]
        if abs(gap) > tolerance:
            notes.append(
                f"{words.source_short(s)}, {v}: GPU accuracy {words.percent(r['gpu_accuracy'], 1)} against "
                f"the paper's {words.percent(p['gpu_accuracy'], 2)}"
                + _accuracy_reason(speedup, s, v, r, p["gpu_accuracy"], tolerance)
            )
    if r["gpu_seconds"] is None and r["gpu_not_measured_reason"]:
        notes.append(f"{words.source_short(s)}: GPU not measured ({r['gpu_not_measured_reason']})")
    if r.get("pairing_reason"):
        notes.append(f"{words.source_short(s)}, {v}: {sessions.in_text(r['pairing_reason'])}")
    if r["synthetic"]:
        notes.append(f"{words.source_short(s)}: synthetic data")
    return notes


def _paper_cell(p: dict | None) -> dict:
    if not p:
        return {"value": "not reported", "mark": "", "lines": []}
    return {
        "value": words.times(p["speedup"]),
        "mark": "",
        "lines": [
            _per_epoch(p["cpu_seconds"] / paper.EPOCHS, p["gpu_seconds"] / paper.EPOCHS),
            f"GPU accuracy {words.percent(p['gpu_accuracy'], 2)}"
            if p["gpu_accuracy"] is not None
            else "accuracy not reported",
        ],
    }


def _accuracy_reason(speedup, source, variant, row, target, tolerance) -> str:
    """Where the data explain an accuracy gap: a model of the same size in the same study that reaches the paper's
    accuracy (e.g. the CIFAR stem of the same ResNet)."""
    for twin in speedup.filter((pl.col("source") == source) & (pl.col("variant") == variant)).to_dicts():
        if (
            twin["model"] != row["model"]
            and twin["gpu_accuracy"] is not None
            and not twin["gpu_extrapolated"]
            and row["parameters"]
            and abs(twin["parameters"] - row["parameters"]) / row["parameters"] < 0.01
            and abs(twin["gpu_accuracy"] - target) <= tolerance
        ):
            return (
                f"; {twin['model']} (as many parameters, {words.si(twin['train_flops_per_image'])} training FLOPs "
                f"per image) reaches {words.percent(twin['gpu_accuracy'], 1)}: the paper's figure fits that "
                "architecture"
            )
    return "; the records give no reason"


def _headline_csv(speedup: pl.DataFrame) -> str:
    paper_rows = pl.DataFrame(paper.ROWS).select(
        pl.lit(PAPER_SOURCE).alias("source"),
        pl.lit("paper").alias("variant"),
        "model",
        "parameters",
        "cpu_seconds",
        "gpu_seconds",
        "speedup",
        pl.col("gpu_accuracy").cast(pl.Float64),
    )
    ours = speedup.select(
        "source",
        "variant",
        "model",
        "parameters",
        "train_flops_per_image",
        "cpu_seconds",
        "gpu_seconds",
        "speedup",
        "speedup_ci_low",
        "speedup_ci_high",
        "speedup_interval_low",
        "speedup_interval_high",
        "pairing",
        "leases",
        "steady_speedup",
        "cpu_accuracy",
        "gpu_accuracy",
        "extrapolated",
    )
    return pl.concat([paper_rows, ours], how="diagonal_relaxed").write_csv()
