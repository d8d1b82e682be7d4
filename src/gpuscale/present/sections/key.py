"""The first screen: the GPU speedups, per source and variant, and what they follow (the answer)."""

from __future__ import annotations

import math

import polars as pl

from gpuscale import words
from gpuscale.analyze import paper
from gpuscale.analyze.tables import FIT_FLOPS, FIT_PARAMETERS, LOCAL_SOURCE, PAPER_SOURCE, r2_by_fit
from gpuscale.analyze.tables import verdict as fit_verdict
from gpuscale.present.page import (
    Page,
    _by_flops,
    _chip,
    _measured_sources,
    _several_leases,
    _variants,
    speedup_interval,
)
from gpuscale.present.sections.conditions import _conditions_words, _source_conditions, conditions_line
from gpuscale.present.sections.predicted import predicted_for_host

ID = "key"
NAV = "Key results"
CHARTS = {}  # its charts (gpuscale.words.CHART_NAMES), each with the words under it
TEMPLATE = """\
<section id="key" class="key" aria-labelledby="key-title">
<h2 id="key-title">Key results: how much faster the GPU trains</h2>
{% for s in key.sources %}<div class="source">
  <div><strong>{{ s.name }}</strong>{% if s.host %} · host {{ s.host }}{% endif %}{% if s.conditions %} ·
  <a href="#conditions">{{ s.conditions|gloss }}</a>{% endif %}</div>
  {% for v in s.variants %}<div class="variant"><span class="name">{{ v.name }} variant</span>
    {% for c in v.chips %}<span class="chip">{{ c.model }} <b>{{ c.value }}{% if c.mark %}<sup>{{ c.mark }}</sup>{% endif %}</b>{% if c.detail %} <small>{{ c.detail|gloss }}</small>{% endif %}</span>
    {% endfor %}</div>
  {% endfor %}
  {% if s.findings %}<ul>{% for f in s.findings %}<li>{{ f|gloss }}</li>{% endfor %}</ul>{% endif %}
</div>
{% else %}<p>No model measured on both a CPU and a GPU yet.</p>
{% endfor %}
{% if key.host and host is not defined %}<h3>This host beside the reference</h3><ul>{% for line in key.host %}<li>{{ line|gloss }}</li>{% endfor %}</ul>{% endif %}
<p class="definition">{{ (key.definition ~ ' Models by training FLOPs per image; brackets: the spread between epochs, rounds and leases and the seed bootstrap ("1 lease": no lease-to-lease spread; "1 run, 1 lease": no interval); sampled*: a time extrapolated from a few timed steps per epoch, its error in no interval.')|gloss }}{% for m in key.marks %} {{ m|gloss }}.{% endfor %} Words: <a href="#glossary">glossary</a>.</p>
{% if warnings %}<p class="warnline">{{ warnings|length }} warning(s) about these records: see <a href="#checks">Checks</a>.</p>{% endif %}
</section>"""  # noqa: E501 (the page's markup, line for line)


def context(page: Page) -> dict:
    return {"key": key_results(page.tables, page.pred)}


HEADLINE_DEFINITION = (
    "Speedup = CPU time / GPU time over the whole run, first epoch included (median over seeds), as the paper "
    "timed it; the steady one (first epoch out) shown where it differs by a quarter."
)


WEAK_R2 = 0.5  # below it, a size's power law does not 'decide' the speedup: the key results say so


def _images(runs: pl.DataFrame, source: str, model: str) -> int | None:
    found = runs.filter((pl.col("source") == source) & (pl.col("model") == model) & (pl.col("status") == "measured"))
    return found["train_images"].max() if not found.is_empty() else None


def paper_comparison(speedup: pl.DataFrame, runs: pl.DataFrame, source: str, variant: str) -> list[str]:
    """The paper's models: our speedup against the paper's, inside or outside our interval, and where the gap lies
    (each side's training FLOP/s, from the FLOPs per image, the images per epoch and the seconds per epoch)."""
    out = []
    ours = {
        r["model"]: r for r in speedup.filter((pl.col("source") == source) & (pl.col("variant") == variant)).to_dicts()
    }
    for p in paper.ROWS:
        r = ours.get(p["model"])
        if not r or r["speedup"] is None:
            continue
        low, high = speedup_interval(r)
        ratio = r["speedup"] / p["speedup"]
        if low is not None:
            inside = low <= p["speedup"] <= high
            where = (
                "inside this study's interval"
                if inside
                else f"outside this study's interval [{low:.1f}–{high:.1f}]: {ratio:.2f} times the paper's"
            )
        else:
            inside = abs(math.log(ratio)) < math.log(1.1)
            where = f"{ratio:.2f} times the paper's (one run per device, no interval)"
        line = f"{p['model']}: {words.times(r['speedup'])} against the paper's {words.times(p['speedup'])}, {where}"
        images = _images(runs, source, p["model"])
        if not inside and images and r["train_flops_per_image"]:
            flops = r["train_flops_per_image"]
            cpu, gpu = flops * images / r["cpu_epoch_seconds"], flops * images / r["gpu_epoch_seconds"]
            # the paper trained the 50,000 CIFAR-10 images per epoch
            paper_cpu = flops * 50_000 / (p["cpu_seconds"] / paper.EPOCHS)
            paper_gpu = flops * 50_000 / (p["gpu_seconds"] / paper.EPOCHS)
            side = "CPU" if abs(math.log(cpu / paper_cpu)) > abs(math.log(gpu / paper_gpu)) else "GPU"
            line += (
                f". Training rate: this CPU {words.si(cpu, 'FLOP/s')}, the paper's {words.si(paper_cpu, 'FLOP/s')}; "
                f"this GPU {words.si(gpu, 'FLOP/s')}, the paper's {words.si(paper_gpu, 'FLOP/s')}: most of the gap is "
                f"on the {side} side"
            )
        out.append(line + ".")
    return out


def data_wait(phases: pl.DataFrame, speedup: pl.DataFrame, source: str, variant: str) -> str | None:
    """The main 'why': the share of the smallest and the largest model's GPU step spent waiting for data."""
    gpu = phases.filter(
        (pl.col("source") == source)
        & (pl.col("variant") == variant)
        & (pl.col("device") != "cpu")
        & pl.col("sweep_parameter").is_null()
    )
    if gpu.is_empty():
        return None
    shares = (
        gpu.group_by("model", "phase")
        .agg(pl.col("fraction").median())
        .pivot(on="phase", index="model", values="fraction")
        .join(speedup.select("model", "train_flops_per_image").unique("model"), on="model", how="left")
    )
    shares = _by_flops(shares.with_columns(pl.lit(0).alias("parameters")))
    if "data_wait" not in shares.columns:
        return None
    return _data_wait_text(shares.filter(pl.col("data_wait").is_not_null()), speedup, source, variant)


LOADER_BOUND = 0.5  # a GPU step that waits for data this much of its time is paced by the input pipeline


def _data_wait_text(shares: pl.DataFrame, speedup: pl.DataFrame, source: str, variant: str) -> str | None:
    """The smallest, the most loader-bound and the largest model; the conclusion follows the shares measured."""
    if shares.is_empty():
        return None
    small, large = shares.row(0, named=True), shares.row(-1, named=True)
    most = shares.sort("data_wait", descending=True).row(0, named=True)
    text = (
        f"On the GPU, {small['model']} (the least compute per image) spends {words.percent(small['data_wait'], 0)} of "
        f"a training step waiting for data"
    )
    if "host_to_device" in shares.columns and small.get("host_to_device") is not None:
        text += f" and {words.percent(small['host_to_device'], 0)} copying it to the device"
    if most["model"] not in (small["model"], large["model"]):
        text += f"; {most['model']} the most of all, {words.percent(most['data_wait'], 0)}"
    if large["model"] != small["model"]:
        text += f"; {large['model']} (the most compute) {words.percent(large['data_wait'], 0)}"
    if most["data_wait"] < LOADER_BOUND:
        return text + ": no model's GPU epoch here is paced by the input pipeline."
    gain = speedup.filter(
        (pl.col("source") == source) & (pl.col("variant") == variant) & (pl.col("model") == most["model"])
    )["speedup"].drop_nulls()
    told = f" ({most['model']}: {words.times(gain[0])})" if len(gain) else ""
    return (
        text + f": where the loader sets the pace{told}, the GPU waits, and compute per image barely moves its epoch."
    )


def host_beside_reference(speedup: pl.DataFrame, runs: pl.DataFrame) -> list[str]:
    """For a user with records of their own: this host's CPU (and GPU) against each reference study's."""
    measured = runs.filter(
        (pl.col("status") == "measured") & pl.col("sweep_parameter").is_null() & (pl.col("world_size") == 1)
    )
    local = measured.filter(pl.col("source") == LOCAL_SOURCE)
    references = sorted(s for s in measured["source"].unique().to_list() if s not in (LOCAL_SOURCE, PAPER_SOURCE))
    if local.is_empty() or not references:
        return []
    rate = (
        measured.with_columns((pl.col("device") == "cpu").alias("is_cpu"))
        .group_by("source", "model", "variant", "is_cpu")
        .agg(pl.col("train_images_per_second").median())
    )
    out = []
    local_speedups = speedup.filter((pl.col("source") == LOCAL_SOURCE) & pl.col("speedup").is_not_null())
    pairs = _by_flops(
        local.filter(pl.col("device") == "cpu").unique(["model", "variant"], keep="first", maintain_order=True)
    )
    for ref in references:
        out += _against_reference(speedup, rate, pairs, ref, local_speedups.is_empty())
    if not local_speedups.is_empty():
        listed = [
            f"{r['model']} {words.times(r['speedup'])} ({r['variant']})"
            for r in _by_flops(local_speedups).iter_rows(named=True)
        ]
        out.append(f"This host's GPU speedups: {', '.join(listed)}.")
    return out


def _images_per_second(rate: pl.DataFrame, source: str, model: str, variant: str, cpu: bool) -> float | None:
    found = rate.filter(
        (pl.col("source") == source)
        & (pl.col("model") == model)
        & (pl.col("variant") == variant)
        & (pl.col("is_cpu") == cpu)
    )
    return None if found.is_empty() else found["train_images_per_second"][0]


def _against_reference(speedup, rate, pairs: pl.DataFrame, ref: str, no_local_gpu: bool) -> list[str]:
    """This host's CPU rate against one reference study's, per model run here; without a GPU here, the reference's
    speedups for those models and how much faster its GPU would train than this CPU."""
    out = []
    name = words.source_short(ref)
    cpu_lines, gpu_lines = [], []
    for r in pairs.iter_rows(named=True):
        here = _images_per_second(rate, LOCAL_SOURCE, r["model"], r["variant"], True)
        there_cpu = _images_per_second(rate, ref, r["model"], r["variant"], True)
        there_gpu = _images_per_second(rate, ref, r["model"], r["variant"], False)
        if here and there_cpu:
            cpu_lines.append(f"{r['model']} {words.times(here / there_cpu, 2)}")
        if here and there_gpu:
            gpu_lines.append(f"{r['model']} {words.times(there_gpu / here)}")
    if cpu_lines:
        out.append(
            f"This host's CPU trains at this fraction of {name}'s CPU speed (images per second): "
            f"{', '.join(cpu_lines)}."
        )
    if no_local_gpu:
        ref_rows = _by_flops(speedup.filter((pl.col("source") == ref) & pl.col("speedup").is_not_null()))
        variant = "paper" if "paper" in ref_rows["variant"].to_list() else (_variants(ref_rows) or [None])[0]
        listed = [
            f"{r['model']} {words.times(r['speedup'])}"
            for r in ref_rows.filter(pl.col("variant") == variant).iter_rows(named=True)
            if r["model"] in set(pairs["model"].to_list())
        ]
        line = f"No GPU here: {name}'s speedups ({variant} variant) are the ones above"
        if listed:
            line += f" ({', '.join(listed)} for the models run here)"
        if gpu_lines:
            line += f"; against this CPU, its GPU would train {', '.join(gpu_lines)} faster"
        out.append(line + ".")
    return out


def key_results(tables: dict, pred: dict | None = None) -> dict:
    """Everything the first screen says, computed from the tables (no figure typed by hand); on a host without
    measured speedups of its own, what the predict stage predicts for it."""
    speedup, fits, runs = tables["speedup"], tables["fits"], tables["runs"]
    sources = []
    for source in _measured_sources(speedup):
        frame = speedup.filter(pl.col("source") == source)
        if frame["speedup"].is_null().all() and source == LOCAL_SOURCE:
            continue  # a host without a GPU: its key results are the comparison with the reference below
        variants = []
        for variant in _variants(frame):
            rows = _by_flops(frame.filter(pl.col("variant") == variant)).to_dicts()
            several = _several_leases(speedup, source)
            variants.append({"name": variant, "chips": [_chip(r, several) for r in rows]})
        baseline = "paper" if "paper" in [v["name"] for v in variants] else variants[0]["name"]
        verdict = fit_verdict(fits, source, baseline)
        findings = []
        if verdict:
            r2 = r2_by_fit(fits, source, baseline)
            follows = "training FLOPs per image" if r2[FIT_FLOPS] >= r2[FIT_PARAMETERS] else "parameters"
            models = frame.filter((pl.col("variant") == baseline) & pl.col("speedup").is_not_null()).height
            claim = f"The speedup follows {follows}"
            if max(r2[FIT_FLOPS], r2[FIT_PARAMETERS]) < WEAK_R2:
                claim = f"Neither size predicts the speedup well; {follows} does better"
            findings.append(
                f"{claim}: {fit_verdict(fits, source, baseline, short=True)} "
                f"({baseline} variant, power laws over {models} models)."
            )
        findings += paper_comparison(speedup, runs, source, baseline)
        if why := data_wait(tables["phases"], speedup, source, baseline):
            findings.append(why)
        sampled = frame.filter(pl.col("extrapolated"))
        sources.append(
            {
                "name": words.source_short(source),
                "host": (frame["host"].drop_nulls().to_list() or [""])[0],
                "variants": variants,
                "findings": findings,
                "sampled": not sampled.is_empty(),
                "conditions": _conditions_words(
                    _source_conditions(source, runs, speedup, tables["conditions"]), True, False
                )
                if "conditions" in tables
                else "",
            }
        )
    marks = words.pairing_keys(speedup.filter(pl.col("speedup").is_not_null())["pairing"].drop_nulls().to_list())
    host = host_beside_reference(speedup, runs)
    local = speedup.filter((pl.col("source") == LOCAL_SOURCE) & pl.col("speedup").is_not_null())
    if local.is_empty() and (line := predicted_for_host(pred)):
        host.append(line)
    return {
        "sources": sources,
        "host": host,
        "definition": HEADLINE_DEFINITION,
        "marks": marks,
        "conditions": conditions_line(tables),
    }
