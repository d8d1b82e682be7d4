"""Checks: the warnings about the records, CPU/GPU accuracy parity, the sampled protocol checked on full runs."""

from __future__ import annotations

import polars as pl

from gpuscale.present.page import Page, table

ID = "checks"
NAV = "Checks"
CHARTS = {  # its charts (gpuscale.words.CHART_NAMES), each with the words under it
    "accuracy": "Final test accuracy on the CPU against the GPU, per model. Points inside the green band agree "
    "within the tolerance (report.accuracy_tolerance); the diagonal is perfect agreement. Sampled runs are left out.",
}
TEMPLATE = """\
<section id="checks">
<h2>Checks</h2>
{% if warnings %}<details><summary>Warnings ({{ warnings|length }})</summary>
<ul class="warnings">{% for w in warnings %}<li>{{ w }}</li>
{% endfor %}</ul>
</details>{% else %}<p>No warnings.</p>{% endif %}
{% for f in figures.checks %}{{ figure(f) }}{% endfor %}
{% if sampling %}<details><summary>The sampled protocol, checked on full runs</summary>
<p>Every full run clocks a few steps of each epoch (the device synchronised). From those clocks: the total the sampled
protocol (N timed steps per epoch, the first few warm-up steps timed as they are) would have given for the same
epochs, against the measured total, and the range of its error on single epochs. A large spread on single epochs
with a small total error means the host's speed wanders over seconds, not that the protocol is biased.</p>
{% if sampling_summary %}{{ data_table(sampling_summary) }}{% endif %}
<details><summary>Run by run ({{ sampling.rows|length }} rows)</summary>
{{ data_table(sampling, tall=True) }}
</details>
</details>{% endif %}
</section>"""  # noqa: E501 (the page's markup, line for line)


def context(page: Page) -> dict:
    return {
        "sampling": sampling_table(page.tables["sampling"]),
        "sampling_summary": sampling_summary(page.tables["sampling"]),
    }


REPORTED_SAMPLED_STEPS = [10, 20, 40, 100]


def sampling_table(sampling: pl.DataFrame) -> dict | None:
    """The sampled protocol checked on full runs, at the step counts its users pick most (10 to 100)."""
    frame = sampling.filter(pl.col("sampled_steps").is_in(REPORTED_SAMPLED_STEPS))
    if frame.is_empty():
        return None
    frame = frame.with_columns(
        pl.when(pl.col("sweep_parameter").is_not_null())
        .then(pl.concat_str("sweep_parameter", pl.lit("="), pl.col("sweep_value").cast(pl.String)))
        .otherwise(pl.lit(""))
        .alias("sweep")
    )
    columns = [
        "source",
        "model",
        "device",
        "variant",
        "sweep",
        "seed",
        "epochs",
        "sampled_steps",
        "estimated_total_seconds",
        "measured_total_seconds",
        "error",
        "epoch_error_min",
        "epoch_error_max",
    ]
    return table("sampling", "The sampled protocol, run by run.", frame.select(columns))


def sampling_summary(sampling: pl.DataFrame) -> dict | None:
    """The check in brief: per source, device, variant and step count, the range of the total's error over the
    study's full runs (sweep runs, of one epoch, left out)."""
    frame = sampling.filter(pl.col("sampled_steps").is_in(REPORTED_SAMPLED_STEPS) & pl.col("sweep_parameter").is_null())
    if frame.is_empty():
        return None
    frame = (
        frame.group_by("source", "device", "variant", "sampled_steps")
        .agg(
            pl.len().alias("full_runs"),
            pl.col("error").min().alias("total_error_lowest"),
            pl.col("error").max().alias("total_error_highest"),
            pl.col("epoch_error_min").min().alias("epoch_error_lowest"),
            pl.col("epoch_error_max").max().alias("epoch_error_highest"),
        )
        .sort("source", "device", "variant", "sampled_steps")
    )
    return table(
        "sampling_summary",
        "The sampled protocol in brief: the error's range over the study's full runs (sweeps left out).",
        frame,
    )


def warnings(tables: dict) -> list[str]:
    runs, speedup = tables["runs"], tables["speedup"]
    out = []
    synthetic = runs.filter(pl.col("synthetic"))
    if not synthetic.is_empty():
        out.append(
            f"{synthetic.height} run(s) used SYNTHETIC data ({', '.join(sorted(set(synthetic['source'])))}): "
            "their timings are real, their accuracies say nothing about CIFAR-10."
        )
    for r in runs.filter(pl.col("status") == "not_measured").iter_rows(named=True):
        out.append(
            f"{r['source']}: {r['model']} on {r['device']} ({r['variant']}, seed {r['seed']}) was not measured: "
            f"{r['not_measured_reason']}"
        )
    for o in tables.get("overlapping_runs", []):
        out.append(
            f"{o['source']} on {o['host']}: timing runs overlapped in time ({' and '.join(o['runs'])}); "
            "both timings may be distorted."
        )
    for r in speedup.filter(pl.col("accuracy_parity").not_()).iter_rows(named=True):
        out.append(
            f"{r['source']}: {r['model']} ({r['variant']}) accuracy differs between CPU and GPU by "
            f"{r['accuracy_difference']:+.2%}, beyond the tolerance."
        )
    for r in speedup.filter(pl.col("protocol_mismatch")).iter_rows(named=True):
        out.append(
            f"{r['source']}: {r['model']} ({r['variant']}): CPU and GPU runs differ in epochs or data size; "
            "the speedup compares seconds per epoch."
        )
    out += _host_warnings(runs)
    extrapolated = runs.filter(pl.col("extrapolated"))
    if not extrapolated.is_empty():
        out.append(f"{extrapolated.height} run(s) have extrapolated times (sampled protocol).")
    for s in tables.get("skipped_records", []):
        out.append(f"skipped record {s['path']}: {s['reason']}")
    return out


def _host_warnings(runs: pl.DataFrame) -> list[str]:
    """Per source: CPU runs whose threads and loader workers outnumber the cores; compiled runs that may have
    found a warm compile cache."""
    out = []
    crowded = runs.filter((pl.col("status") == "measured") & pl.col("oversubscribed"))
    for (source,), frame in crowded.group_by(["source"], maintain_order=True):
        r = frame.row(0, named=True)
        out.append(
            f"{source}: {frame.height} CPU run(s) gave torch more threads than the DataLoader's workers leave "
            f"free (e.g. {r['torch_threads']} threads + {r['loader_workers']} workers on {r['cpu_logical_cores']} "
            "logical cores). They compete for cores, so the CPU may train faster with fewer threads: set "
            "train.cpu_threads, or measure it with sweeps.cpu_threads."
        )
    warm = runs.filter(
        (pl.col("status") == "measured")
        & (
            (pl.col("compile_cache") == "unknown")
            | ((pl.col("compile_cache") == "shared") & (pl.col("compile_cache_files_at_start") > 0))
        )
    )
    for (source,), frame in warm.group_by(["source"], maintain_order=True):
        named = [
            f"{r['model']} on {r['device']} ({r['variant']}, seed {r['seed']})" for r in frame.iter_rows(named=True)
        ]
        runs_named = ", ".join(named[:6]) + (f" and {len(named) - 6} more" if len(named) > 6 else "")
        out.append(
            f"{source}: {frame.height} compiled run(s) may have found a warm torch.compile cache ({runs_named}): "
            "a shared cache that held files, or a record that predates the cache field. Their warm-up epoch, "
            "and so their whole-run time, can be several times shorter than a first run's; steady epochs are "
            "unaffected. Setting a variant's compile cache to cold gives every run an empty cache."
        )
    return out
