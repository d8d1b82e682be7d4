"""Appendix (collapsed): every run and its record, environments, provenance, the glossary, every table as CSV."""

from __future__ import annotations

import os
from pathlib import Path

import polars as pl

from gpuscale import words
from gpuscale.analyze.tables import TABLES
from gpuscale.present.page import Page, table

ID = "appendix"
NAV = "Appendix"
CHARTS = {}  # its charts (gpuscale.words.CHART_NAMES), each with the words under it
TEMPLATE = """\
<section id="appendix">
<h2>Appendix</h2>
<details><summary>Runs ({{ runs.rows|length }}): every record, each linked</summary>
{{ data_table(runs, tall=True) }}
</details>
<details><summary>Environment of each run</summary>
{{ data_table(environments, tall=True) }}
</details>
<details><summary>Provenance: params, commits, data, record checksums</summary>
<p>Project commit(s) the records came from: {% for c in provenance.commits %}<code>{{ c }}</code>{% if not loop.last %}, {% endif %}{% else %}unknown{% endfor %}</p>
<h3>Data</h3>
<ul>{% for d in provenance.data %}<li>{{ d.source }}: {{ d.data_source }}, {{ d.train_images }} train / {{ d.test_images }} test images, manifest sha256 <code>{{ d.manifest_sha256 }}</code></li>{% endfor %}</ul>
<h3>Params</h3>
{% for p in provenance.params %}<p><code>{{ p.path }}</code></p><pre>{{ p.text }}</pre>{% endfor %}
<h3>Records (sha256)</h3>
<pre>{% for r in provenance.records %}{{ r.record_sha256 }}  {{ r.record_path }}
{% endfor %}</pre>
</details>
<details id="glossary"><summary>Glossary: the project's own words, one line each (as a dotted word shows on hover)</summary>
<dl class="glossary">{% for term, meaning in glossary %}<div><dt>{{ term }}:</dt> <dd>{{ meaning }}</dd></div>{% endfor %}</dl>
</details>
<details><summary>All tables as CSV</summary>
<p>{% for t in data_tables %}<button type="button" class="csv" data-csv="{{ csv_blobs.ref(t.csv) }}" data-file="{{ t.name }}.csv">{{ t.name }}.csv</button> {% endfor %}</p>
</details>
</section>"""  # noqa: E501 (the page's markup, line for line)


def context(page: Page) -> dict:
    runs = page.tables["runs"]
    return {
        "runs": runs_table(runs, page.out_dir),
        "environments": environments(runs),
        "provenance": provenance(runs, page.params_files),
        "data_tables": [{"name": name, "csv": page.tables[name].write_csv()} for name in TABLES],
        "glossary": list(words.GLOSSARY.items()),
    }


RUN_COLUMNS = [
    "source",
    "model",
    "device",
    "variant",
    "seed",
    "round",
    "lease",
    "drifted",
    "status",
    "epochs",
    "batch_size",
    "train_images",
    "total_train_seconds",
    "warmup_epoch_seconds",
    "steady_epoch_seconds_median",
    "train_images_per_second",
    "final_test_accuracy",
    "torch_threads",
    "extrapolated",
    "record_path",
]


def _record_links(runs: pl.DataFrame, out_dir: Path | None) -> list[str | None]:
    """Each run's record, as a path relative to the page (the record itself stays where it is)."""
    if out_dir is None:
        return [None] * runs.height
    base = Path(out_dir).resolve()
    return [os.path.relpath(Path(p).resolve(), base).replace(os.sep, "/") if p else None for p in runs["record_path"]]


def runs_table(runs: pl.DataFrame, out_dir: Path | None = None) -> dict:
    frame = runs.sort("source", "model", "device", "variant", "seed")
    return table(
        "runs",
        "Every run: one row per record; the last column opens the record (JSON).",
        frame,
        RUN_COLUMNS,
        links={"record_path": _record_links(frame, out_dir)},
    )


def environments(runs: pl.DataFrame) -> dict:
    cols = [
        "source",
        "host",
        "device",
        "cpu_model",
        "cpu_logical_cores",
        "torch_threads",
        "gpu_name",
        "gpu_driver",
        "torch_version",
        "cuda_version",
        "cudnn_version",
    ]
    frame = runs.select(cols).unique().sort(["source", "host", "device", "torch_threads"], nulls_last=True)
    return table("environment", "Hardware and software of each run.", frame)


def provenance(runs: pl.DataFrame, params_files: list[Path]) -> dict:
    return {
        "params": [{"path": str(p), "text": Path(p).read_text()} for p in params_files],
        "commits": sorted({c for c in runs["git_commit"].to_list() if c}),
        "data": runs.select("source", "data_source", "manifest_sha256", "train_images", "test_images")
        .unique()
        .sort("source", "data_source", "manifest_sha256", nulls_last=True)
        .to_dicts(),
        "records": runs.select("record_path", "record_sha256").sort("record_path").to_dicts(),
    }
