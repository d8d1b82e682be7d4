"""The first screen where this host has records of its own: what was measured here, how far to trust it, and each
measured epoch outside the band this host's prediction gave it (results/predict/host.*); the reference follows."""

from __future__ import annotations

import statistics

import polars as pl

from gpuscale import words
from gpuscale.analyze.tables import LOCAL_SOURCE, PAPER_SOURCE
from gpuscale.present.columns import Column, secs
from gpuscale.present.page import Page, _by_flops, _variants, speedup_interval, table
from gpuscale.present.sections.key import host_beside_reference

ID = "host"
NAV = "This host"
CHARTS = {}  # its charts (gpuscale.words.CHART_NAMES), each with the words under it
TEMPLATE = """\
<section id="host" class="key" aria-labelledby="host-title">
<h2 id="host-title">{{ host.title }}</h2>
<p class="lead">{{ host.measured|gloss }}</p>
{{ data_table(host.table, pin_first=True) }}
{% if host.misses %}<div class="misses" role="alert"><strong>{{ host.misses|length }} measured epoch{{ "s" if host.misses|length > 1 }} outside {{ "their" if host.misses|length > 1 else "its" }} predicted band:</strong>
<ul>{% for m in host.misses %}<li>{{ m|gloss }}</li>{% endfor %}</ul></div>
{% elif host.predicted_line %}<p>{{ host.predicted_line|gloss }}</p>{% endif %}
<p><strong>How far to trust it:</strong> {% for t in host.trust %}{{ t|gloss }}{% if not loop.last %} {% endif %}{% endfor %}</p>
{% if host.beside %}<details><summary>This host's CPU beside the reference's, in images per second</summary>
<ul>{% for line in host.beside %}<li>{{ line|gloss }}</li>{% endfor %}</ul></details>{% endif %}
<p class="definition">{{ host.definition|gloss }} Words of this report: <a href="#glossary">glossary</a>.</p>
</section>"""  # noqa: E501 (the page's markup, line for line)

MAX_REFERENCES = 2  # reference GPUs beside a CPU-only host: more would not fit a phone's width


def context(page: Page) -> dict | None:
    runs = page.tables["runs"]
    if runs.is_empty() or runs.filter(_local_measured()).is_empty():
        return None
    return {"host": this_host(page.tables, page.pred, page.params.data.train_size or PREDICTED_IMAGES)}


PREDICTED_IMAGES = 50_000  # the predict stage's images per epoch without data.train_size (commands.predict)


def _local_measured() -> pl.Expr:
    return (
        (pl.col("source") == LOCAL_SOURCE)
        & (pl.col("status") == "measured")
        & pl.col("sweep_parameter").is_null()
        & (pl.col("world_size") == 1)
    )


def _median(values) -> float | None:
    found = [v for v in values if v is not None]
    return statistics.median(found) if found else None


def _steady(runs: pl.DataFrame, model: str, gpu: bool) -> tuple[float | None, int | None]:
    """A model's measured epoch on one side as the prediction prices it (the steady median, else the mean of a
    one-epoch run; median over runs) and the images it trained per epoch."""
    side = (pl.col("device") != "cpu") if gpu else (pl.col("device") == "cpu")
    mine = runs.filter((pl.col("model") == model) & side)
    seconds = [r["steady_epoch_seconds_median"] or r["epoch_seconds_mean"] for r in mine.iter_rows(named=True)]
    images = mine["train_images"].drop_nulls()
    return _median(seconds), (int(images.median()) if len(images) else None)


def _predicted(pred: dict | None) -> dict[tuple[str, str], dict]:
    """(model, 'cpu' | 'gpu') -> the predict stage's host row (model, device, quantity, predicted, low, high)."""
    out = {}
    for r in (pred or {}).get("host") or []:
        if r.get("quantity") == "epoch_seconds" and r.get("variant", "paper") == "paper":
            out[(r["model"], "cpu" if r["device"] == "cpu" else "gpu")] = r
    return out


def _miss(model: str, side: str, measured: float, images: int | None, p: dict, predicted_images: int) -> str | None:
    """The words for a measured epoch outside its band (the band scaled to the images trained here), else None."""
    scale = images / predicted_images if images else 1.0
    low, high, value = p["low"] * scale, p["high"] * scale, p["predicted"] * scale
    if low <= measured <= high:
        return None
    how = "slower" if measured > high else "faster"
    scaled = f", scaled to the {images:,} images an epoch trained here" if scale != 1.0 else ""
    return (
        f"{model}, {'CPU' if side == 'cpu' else 'GPU'}: measured {words.seconds(measured)} an epoch, predicted "
        f"{words.seconds(value)} (band {words.seconds(low)}–{words.seconds(high)}{scaled}): {measured / value:.1f} "
        f"times the prediction, {how} than the band allows. The cost model does not describe this machine here "
        "(its probe and its training runs disagree); trust the measurement."
    )


def this_host(tables: dict, pred: dict | None, predicted_images: int = PREDICTED_IMAGES) -> dict:
    """Everything the host's first screen says, computed from the tables and the predict stage's host rows."""
    runs = tables["runs"].filter(_local_measured())
    speedup = tables["speedup"]
    local = speedup.filter(pl.col("source") == LOCAL_SOURCE)
    variant = "paper" if "paper" in runs["variant"].to_list() else _variants(runs)[0]
    runs = runs.filter(pl.col("variant") == variant)
    rows = {r["model"]: r for r in local.filter(pl.col("variant") == variant).iter_rows(named=True)}
    has_gpu = not runs.filter(pl.col("device") != "cpu").is_empty()
    references = _references(speedup)[:MAX_REFERENCES] if not has_gpu else []
    predicted = _predicted(pred)
    models = _by_flops(runs.unique("model", keep="first", maintain_order=True))["model"].to_list()
    frame_rows, misses, checked = [], [], 0
    for model in models:
        r = rows.get(model) or {}
        out = {"model": model}
        marks = {}
        for side in ("cpu", "gpu") if has_gpu else ("cpu",):
            steady, images = _steady(runs, model, side == "gpu")
            shown = r.get(f"{side}_epoch_seconds") or steady
            out[f"{side}_epoch"] = shown
            p = predicted.get((model, side))
            if p and steady is not None:
                checked += 1
                if miss := _miss(model, side, steady, images, p, predicted_images):
                    misses.append(miss)
                    marks[f"{side}_epoch"] = " ⚠ outside its band"
        if has_gpu:
            low, high = speedup_interval(r) if r else (None, None)
            out["speedup"] = r.get("speedup")
            out["interval"] = words.interval(low, high) or None
        for ref in references:
            ref_gpu = _reference_gpu_epoch(speedup, tables["runs"], ref, model, variant, runs)
            out[f"{ref}: gpu"] = ref_gpu
            out[f"{ref}: ratio"] = out["cpu_epoch"] / ref_gpu if ref_gpu and out["cpu_epoch"] else None
        out["_marks"] = marks
        frame_rows.append(out)
    return {
        "title": "This host: what was measured here",
        "measured": _measured_words(runs, has_gpu, models),
        "table": _table(frame_rows, has_gpu, references),
        "misses": misses,
        "predicted_line": (
            f"Every measured epoch ({checked}) falls inside the band this host's prediction gave it."
            if checked
            else "This host's prediction covers none of the models measured here."
            if predicted
            else "No prediction for this host (no probe records): nothing to check its measurements against."
        ),
        "trust": _trust(runs, local.filter(pl.col("variant") == variant), has_gpu),
        "beside": host_beside_reference(speedup, tables["runs"]),
        "definition": (
            "Epochs in seconds, first epoch included, as the speedup divides them; a prediction is checked against "
            "the steady epoch."
            if has_gpu
            else "Epochs in seconds, first epoch included. No GPU here: each reference GPU's epoch for the same "
            "model (scaled to the images an epoch trains here where they differ) divides into this CPU's: a ratio "
            "of two machines, not a speedup measured on one."
        ),
    }


def _references(speedup: pl.DataFrame) -> list[str]:
    return sorted(s for s in speedup["source"].unique().to_list() if s not in (LOCAL_SOURCE, PAPER_SOURCE))


def _reference_gpu_epoch(
    speedup: pl.DataFrame, all_runs: pl.DataFrame, ref: str, model: str, variant: str, here: pl.DataFrame
) -> float | None:
    """The reference's measured GPU epoch for the model (first epoch included, as its speedup divides it), scaled
    to the images an epoch trains on this host where the two differ."""
    found = speedup.filter((pl.col("source") == ref) & (pl.col("model") == model) & (pl.col("variant") == variant))
    if found.is_empty() or found["gpu_epoch_seconds"][0] is None:
        return None
    theirs = all_runs.filter((pl.col("source") == ref) & (pl.col("model") == model) & (pl.col("device") != "cpu"))
    ours = here.filter(pl.col("model") == model)["train_images"].drop_nulls()
    images = theirs["train_images"].drop_nulls()
    scale = ours.median() / images.median() if len(ours) and len(images) else 1.0
    return found["gpu_epoch_seconds"][0] * scale


def _table(rows: list[dict], has_gpu: bool, references: list[str]) -> dict:
    columns = [Column("model", "model", fmt=str), Column("cpu_epoch", "CPU epoch", "s", secs)]
    if has_gpu:
        columns += [
            Column("gpu_epoch", "GPU epoch", "s", secs),
            Column("speedup", "speedup", "×", words.times),
            Column("interval", "interval", fmt=str),
        ]
    for ref in references:
        name = words.source_short(ref)
        columns += [
            Column(f"{ref}: gpu", f"{name} GPU epoch", "s", secs),
            Column(f"{ref}: ratio", f"CPU here ÷ {name} GPU", "×, two machines", words.times),
        ]
    keys = [c.key for c in columns]
    frame = pl.DataFrame([{k: r.get(k) for k in keys} for r in rows], schema={k: _dtype(k) for k in keys})
    got = table(
        "host",
        "Measured on this host, per model (ordered by training FLOPs per image)",
        frame,
        [c for c in columns if c.key in ("model", "cpu_epoch") or not frame[c.key].is_null().all()],
    )
    for row, cells in zip(rows, got["rows"], strict=True):  # a miss marked in its cell (the list says why)
        for key, mark in row["_marks"].items():
            cells[keys.index(key)]["text"] += mark
    return got


def _dtype(key: str):
    return pl.String if key in ("model", "interval") else pl.Float64


def _measured_words(runs: pl.DataFrame, has_gpu: bool, models: list[str]) -> str:
    """'Measured on vm (Intel Xeon · NVIDIA H100) on 2026-12-07: 6 models on its CPU and its GPU, 3 epochs of
    50,000 images each.'"""
    first = runs.row(0, named=True)
    machine = " · ".join(x for x in (first.get("cpu_model"), first.get("gpu_name") if has_gpu else None) if x)
    days = sorted({(s or "")[:10] for s in runs["started_at"].to_list() if s})
    when = (days[0] if len(days) == 1 else f"{days[0]} to {days[-1]}") if days else "an unrecorded date"
    epochs = sorted(set(runs["epochs"].drop_nulls().to_list()))
    images = sorted(set(runs["train_images"].drop_nulls().to_list()))
    each = f"{epochs[0] if len(epochs) == 1 else f'{epochs[0]}-{epochs[-1]}'} epoch{'s' if epochs[-1] > 1 else ''}"
    of = f" of {images[0]:,} images" if len(images) == 1 else ""
    synthetic = " (synthetic data)" if runs["synthetic"].any() else ""
    side = "its CPU and its GPU" if has_gpu else "its CPU only (no GPU found)"
    return (
        f"Measured on {first.get('hostname') or 'this host'} ({machine or 'hardware not recorded'}) on {when}: "
        f"{len(models)} model{'s' if len(models) > 1 else ''} on {side}, {each}{of} each{synthetic}."
    )


def _trust(runs: pl.DataFrame, speedup: pl.DataFrame, has_gpu: bool) -> list[str]:
    """How far the figures hold: repeats, the interval, machine drift and sampling, in plain words."""
    out = []
    per = runs.group_by("model", "device").len()["len"]
    repeats = int(per.min()) if len(per) else 0
    if repeats <= 1:
        out.append(
            "One run per model and device: no repeat, so no interval; a second run on a busy machine can differ by "
            "a tenth or more."
        )
    else:
        out.append(f"{repeats} or more runs per model and device; the interval holds their spread.")
    drifted = runs.filter(pl.col("drifted").fill_null(False)).height
    if drifted:
        out.append(f"{drifted} of {runs.height} jobs drifted: the machine's speed moved while they ran.")
    elif runs["drifted"].is_not_null().any():
        out.append("No job drifted: the machine's speed held during every job.")
    if runs["extrapolated"].fill_null(False).any():
        out.append("Some times are sampled*: extrapolated from a few timed steps per epoch.")
    if has_gpu and "pairing" in speedup.columns:
        paired = speedup.filter(pl.col("speedup").is_not_null())
        same = paired.filter(pl.col("pairing") == "same-lease").height
        if paired.height and same == paired.height:
            out.append("Every speedup divides a CPU and a GPU time taken in the same machine lease.")
    return out
