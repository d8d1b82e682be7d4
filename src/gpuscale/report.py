"""The report stage: one self-contained HTML page (reports/index.html) that works offline.

It answers first (key results, computed from the tables), then explains (charts, the headline table, why), then
proves (checks, every run, environment, provenance; collapsed). The Vega libraries are inlined once; each chart is
its Vega-Lite spec from the charts stage; every table is drawn by one template macro with its words from
gpuscale.words and can be downloaded as CSV built in the page. Everything goes through Jinja2 with autoescaping and
embedded JSON through words.script_json, so text from params, records or file names cannot inject markup.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import math
import os
import statistics
from pathlib import Path

import jinja2
import polars as pl
from markupsafe import Markup

from gpuscale import words
from gpuscale.analyze import paper
from gpuscale.contract import conditions as machine
from gpuscale.contract import fsutil
from gpuscale.contract.settings import Params
from gpuscale.predict import costmodel
from gpuscale.predict import prediction as predict
from gpuscale.predict.prediction import MEDIAN_TARGET_PERCENT as MEDIAN_TARGET
from gpuscale.predict.prediction import WORST_TARGET_PERCENT as WORST_TARGET
from gpuscale.tables import (
    FIT_FLOPS,
    FIT_PARAMETERS,
    KEY_COLUMNS,
    LOCAL_SOURCE,
    PAPER_SOURCE,
    TABLES,
    r2_by_fit,
    read_tables,
)
from gpuscale.tables import verdict as fit_verdict

DATA_FILES = ("templates/report.html.j2",)  # package data this module reads (gpuscale.deps)
log = logging.getLogger("gpuscale.report")

HEADLINE_DEFINITION = (
    "Speedup = CPU time / GPU time over the whole run, first epoch included (median over seeds), as the paper "
    "timed it and as a user waits; the steady speedup (first epoch left out) is shown where it differs by a quarter."
)
WEAK_R2 = 0.5  # below it, a size's power law does not 'decide' the speedup: the key results say so
STEADY_DIFFERS = 1.25  # show the steady speedup where it differs from the whole-run one by this factor or more

CHART_HELP = {
    "speedup_vs_parameters": "Each point is one model: CPU time over GPU time, against its parameter count, both axes "
    "logarithmic; a vertical bar is the 95% bootstrap interval over seeds. A line is a power law fitted per source "
    "and variant (solid: paper variant, dashed: tuned); the paper's three models are grey.",
    "speedup_vs_flops": "The same speedups against the compute one training image needs (forward + backward FLOPs). "
    "The closer the points lie to their line, the better this size predicts the speedup: compare the R² in the "
    "subtitle with the parameters chart.",
    "amdahl": "Amdahl's law with P estimated from the fit GPU epoch = s + CPU epoch / k across models (s: seconds per "
    "epoch the GPU does not accelerate, k: how much faster it runs the rest). Each curve is one model's S(N); the "
    "marker is its measured speedup, placed at N = k·P; hollow where the source's k is undetermined (see the fits), "
    "so its place along N is not a measurement. Curves flatten at 1/(1−P): the serial share caps the speedup.",
    "phases": "Each bar splits one run's training step into waiting for data (the loader), the host-to-device copy, "
    "forward, backward and the optimizer step, as shares, from instrumented steps after training (CUDA events on "
    "the GPU), so the headline times stay clean. The tooltip gives each phase's seconds per steady epoch. The "
    "paper's claim that data transfer is 30-40% of the small CNN's GPU time is checked here.",
    "threads": "CPU thread sweep: each point is one run with N threads, its steady epoch against the run with the "
    "fewest threads. The dashed curve is Amdahl's law fitted by the aggregation stage to the same points (epoch = "
    "a + b / N, P = b / (a + b)): a measured parallel share with a real N. A faded point is a run whose torch threads "
    "plus loader workers outnumbered the logical cores (the fit still uses it).",
    "batch": "GPU batch-size sweep: training images per second against batch size. Where a line flattens the GPU "
    "(or the input pipeline feeding it) is saturated.",
    "epoch_seconds": "Mean seconds per training epoch (evaluation excluded), median over seeds, one row per model and "
    "variant, coloured by device; the gap between a row's two points is its speedup.",
    "throughput": "Training images per second over the whole run, by model, variant and device.",
    "scaling": "Data-parallel runs (cuda-ddpN: N GPUs; cpu-ddpN: N CPU processes) against one device of the same "
    "kind: steady-epoch speedup against the number of processes; the dashed line is perfect scaling. Each process "
    "takes the configured batch size, so the global batch grows with N.",
    "accuracy": "Final test accuracy on the CPU against the GPU, per model. Points inside the green band agree "
    "within the tolerance (report.accuracy_tolerance); the diagonal is perfect agreement. Sampled runs are left out.",
}
SECTIONS = {  # chart -> the section it belongs to, in the order answer -> explain -> prove
    "speedup_vs_flops": "speedup",
    "speedup_vs_parameters": "speedup",
    "phases": "why",
    "amdahl": "why",
    "epoch_seconds": "usage",
    "throughput": "usage",
    "threads": "sweeps",
    "batch": "sweeps",
    "scaling": "sweeps",
    "accuracy": "checks",
}


# ---- cells ------------------------------------------------------------------------------------------------------
def _cell(column: str, value) -> str:
    """One table cell as a reader reads it: words for identifiers, units for numbers."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "—"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if column == "source":
        return words.source_short(value)
    if column in ("device", "base_device", "gpu_device"):
        return words.device(value)
    if column == "phase":
        return words.phase(value)
    if column == "fit":
        return words.fit(value)
    if column == "pairing":
        return words.PAIRING_WORDS.get(value, value)
    if column == "lease":
        return _lease_short(value)
    if column == "drift_speed_ratio":
        return words.speed_ratio(value)
    if column == "component":
        return words.sentinel_component(value) + (" (dropped)" if value in machine.DROPPED else "")
    if column in ("between_records", "own_spread"):  # (max − min) / median, as the sentinel gives its own
        return words.percent(value, 1)
    if column.endswith("_spread"):  # a log sd
        return words.spread(value)
    column = column.rpartition(": ")[2]  # '<source>: cpu_epoch_seconds' formats as its quantity
    if isinstance(value, float):
        if column.endswith("_percent"):
            return f"{value:+.1f}%".replace("-", "−") if column == "error_percent" else f"{value:.1f}%"
        if column.startswith("predicted_speedup"):
            return f"{value:.2f}×"
        if column == "train_flops_per_image":
            return words.si(value)
        if column in ("speedup", "steady_speedup", "gain", "steady_gain") or column.startswith("speedup"):
            return f"{value:.2f}×"
        if "accuracy" in column:
            return words.percent(value, 2, sign=column == "accuracy_difference")
        if "error" in column:
            return words.percent(value, 1, sign=True)
        if column in (
            "fraction",
            "efficiency",
            "overhead_fraction",
            "phase_overhead_fraction",
            "floor_meets_target_share",
        ):
            return words.percent(value, 1)
        if column == "r2":
            return f"{value:.2f}"
        if "seconds" in column or column in ("estimate", "estimate_se", "intercept", "intercept_se"):
            return f"{value:,.3g}" if abs(value) < 1 else f"{value:,.2f}"
        if "per_second" in column or "joule" in column:
            return f"{value:,.0f}"
        return f"{value:,.4g}"
    if isinstance(value, int):
        return f"{value:,}" if column not in ("seed", "sweep_value", "value") else str(value)
    return str(value)


def table(
    name: str,
    caption: str,
    frame: pl.DataFrame,
    columns: list[str] | None = None,
    links: dict[str, list[str | None]] | None = None,
) -> dict:
    """A table for the template: caption, header words, formatted cells, the CSV of the whole frame."""
    columns = columns or frame.columns
    rows = []
    for i, row in enumerate(frame.select(columns).iter_rows(named=True)):
        cells = []
        for c in columns:
            href = (links or {}).get(c, [None] * frame.height)[i]
            cells.append({"text": _cell(c, row[c]), "href": href})
        rows.append(cells)
    return {
        "name": name,
        "caption": caption,
        "header": [words.column(c) for c in columns],
        "rows": rows,
        "csv": frame.write_csv(),
    }


# ---- key results --------------------------------------------------------------------------------------------------
def _measured_sources(speedup: pl.DataFrame) -> list[str]:
    """Sources in the page's order: this host first, then reference folders."""
    found = speedup["source"].unique().to_list()
    return sorted(found, key=lambda s: (s != LOCAL_SOURCE, s))


def _variants(frame: pl.DataFrame) -> list[str]:
    return sorted(frame["variant"].unique().to_list(), key=lambda v: (v != "paper", v))


def _by_flops(frame: pl.DataFrame) -> pl.DataFrame:
    return frame.sort("train_flops_per_image", "parameters", "model", nulls_last=True)


def _several_leases(speedup: pl.DataFrame, source: str) -> bool:
    """Whether some figure of `source` was paired in two or more leases: then a one-lease interval, without the
    lease-to-lease spread, is marked '1 lease' beside its bracket."""
    return (speedup.filter(pl.col("source") == source)["leases"].max() or 0) > 1


def _chip(row: dict, several_leases: bool = False) -> dict:
    """One model's headline speedup: whole run, its interval ('1 lease' where it holds no lease-to-lease spread and
    other figures of its source do), the steady one where that differs, and its mark where CPU and GPU were not
    paired within one known lease."""
    mark = words.pairing_mark(row.get("pairing"))
    if row["speedup"] is None:
        if row.get("pairing_reason") and row["cpu_seconds"] is not None and row["gpu_seconds"] is not None:
            reason = "no same-lease pair"
        else:
            reason = "no GPU record" if row["gpu_seconds"] is None else "no CPU record"
        return {"model": row["model"], "value": "—", "mark": "", "detail": reason}
    detail = []
    if text := words.interval(*speedup_interval(row)):
        detail.append(text + (" 1 lease" if several_leases and row.get("leases") == 1 else ""))
    elif several_leases and row.get("leases") == 1:
        detail.append("1 run, 1 lease")  # no interval: one run per device, where the others have several leases
    steady = row["steady_speedup"]
    if steady and max(steady, row["speedup"]) / min(steady, row["speedup"]) >= STEADY_DIFFERS:
        detail.append(f"steady {words.times(steady)}")
    if row["extrapolated"]:
        detail.append("sampled*")
    return {"model": row["model"], "value": words.times(row["speedup"]), "mark": mark, "detail": " ".join(detail)}


def speedup_interval(row: dict) -> tuple[float | None, float | None]:
    """The interval a figure is shown with: where it was repeated (seeds, rounds or leases), the one that holds the
    spread between epochs, rounds and leases and the bootstrap over seeds (aggregate's speedup_interval_*); a single
    run per device has none."""
    repeated = row.get("speedup_ci_low") is not None or (row.get("leases") or 0) > 1 or (row.get("rounds") or 1) > 1
    if not repeated:
        return None, None
    if row.get("speedup_interval_low") is not None:
        return row["speedup_interval_low"], row["speedup_interval_high"]
    return row.get("speedup_ci_low"), row.get("speedup_ci_high")


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


# ---- predicted before measuring (gpuscale.predict's tables) ----------------------------------------------------------
PREDICTION_LABEL = "PREDICTION"


def load_predictions(folder: Path | str | None) -> dict | None:
    """The predict stage's tables (gpuscale.predict.tables) and its per-model view, or None without the folder."""
    if folder is None or not Path(folder).is_dir():
        return None
    got = predict.tables(folder)
    got["beside"] = predict.host_beside_reference(folder)
    return got


def _frame(rows: list[dict]) -> pl.DataFrame:
    return pl.DataFrame(rows, infer_schema_length=None) if rows else pl.DataFrame()


def measured_here(runs: pl.DataFrame | None) -> dict[str, dict]:
    """This study's own measured epochs (paper variant, no sweeps) per model, for the prediction beside them:
    {model: {"this study: cpu_epoch_seconds": s, ..., "train_flops_per_image": f}}; the steady median where a
    run has steady epochs, else its mean epoch (a one-epoch check)."""
    if runs is None or runs.is_empty():
        return {}
    mine = runs.filter(
        (pl.col("source") == "this host")
        & (pl.col("status") == "measured")
        & (pl.col("variant") == "paper")
        & pl.col("sweep_parameter").is_null()
    )
    out: dict[str, dict] = {}
    for r in mine.to_dicts():
        side = "cpu" if r["device"] == "cpu" else "gpu"
        seconds = r["steady_epoch_seconds_median"] or r["epoch_seconds_mean"]
        row = out.setdefault(r["model"], {"train_flops_per_image": r["train_flops_per_image"]})
        row.setdefault(f"this study: {side}_epoch_seconds", []).append(seconds)
    return {
        model: {k: (statistics.median(v) if isinstance(v, list) else v) for k, v in row.items()}
        for model, row in out.items()
    }


def predicted_host_table(pred: dict, runs: pl.DataFrame | None = None) -> dict | None:
    """This host's predicted epochs and speedups per model (the registry's and the study's own), beside what this
    study measured and each reference study's measurements."""
    flops = {name: f.train_flops_per_image for name, f in costmodel.load_facts().items()}
    here = measured_here(runs)
    rows = [
        {**r, **here.get(r["model"], {}), "train_flops_per_image": flops.get(r["model"])}
        for r in pred["beside"]
        if any(k.startswith("predicted_") for k in r)
    ]
    for r in rows:
        r["train_flops_per_image"] = r["train_flops_per_image"] or here.get(r["model"], {}).get("train_flops_per_image")
    if not rows:
        return None
    rows.sort(key=lambda r: (r["train_flops_per_image"] is None, r["train_flops_per_image"] or 0, r["model"]))
    first = [
        "model",
        "train_flops_per_image",
        "predicted_cpu_epoch_seconds",
        "predicted_gpu_epoch_seconds",
        "predicted_speedup",
    ]
    band = ["predicted_speedup_low", "predicted_speedup_high", "bound"]
    measured = sorted({k for r in rows for k in r if ": " in k}, key=lambda k: (not k.startswith("this study"), k))
    frame = _frame([{c: r.get(c) for c in first + band + measured} for r in rows])
    columns = [c for c in first + band + measured if c in frame.columns and not frame[c].is_null().all()]
    return table(
        "predicted_host",
        f"{PREDICTION_LABEL}S for this host (from its probe records, not measured), beside what this study "
        "measured (its own models included) and what the reference studies measured on theirs",
        frame,
        columns,
    )


def _by_check(rows: list[dict]) -> list[dict]:
    """Validation rows with their source split into the study folder and the check (words.check_of)."""
    out = []
    for r in rows:
        study, check = words.check_of(r["source"])
        out.append({"study": study, "check": check, **{k: v for k, v in r.items() if k != "source"}})
    return out


def validation_summary_table(pred: dict) -> dict | None:
    rows = pred["validation_summary"]
    if not rows:
        return None
    columns = [c for c in SPEEDUP_CHECK_COLUMNS if c not in ("meets_target", "floor_meets_target_share")]
    columns.insert(columns.index("variant"), "device")
    rows = [{c: r.get(c) for c in columns} for r in _by_check(rows)]
    return table(
        "validation_summary",
        "The cost model's checks per device: the CPU epoch, the GPU epoch and the speedup, each beside its noise "
        "floor (the speedup's targets and the share of repeats meeting them: the table above)",
        _frame(rows),
        columns,
    )


SPEEDUP_CHECK_COLUMNS = [
    "study",
    "check",
    "variant",
    "models",
    "median_abs_error_percent",
    "worst_abs_error_percent",
    "worst_model",
    "meets_target",
    "floor_median_percent",
    "floor_worst_percent",
    "floor_meets_target_share",
]


def speedup_checks_table(pred: dict) -> dict | None:
    """The speedup's errors, one row per check, beside the noise floor: what a perfect model would score against
    the same measurements. Where the floor is a lower bound (sampled runs priced at the full-epoch spread), says so."""
    rows = [r for r in pred["validation_summary"] if r["device"] == "speedup"]
    if not rows:
        return None
    # meets_target as words, in the cells and in the table's CSV alike
    out = [
        {**{c: r.get(c) for c in SPEEDUP_CHECK_COLUMNS}, "meets_target": "yes" if r["meets_target"] else "no"}
        for r in _by_check(rows)
    ]
    lower = any(r.get("floor_basis") == "lower bound" for r in rows)
    return table(
        "speedup_checks",
        f"The predicted speedup, check by check (targets: median error at most {MEDIAN_TARGET:.0f}%, worst at most "
        f"{WORST_TARGET:.0f}%), beside the noise floor: what a perfect model would score against the same "
        "measurements, given how much they move between repeats"
        + (" (for sampled runs a lower bound)" if lower else ""),
        _frame(out),
        SPEEDUP_CHECK_COLUMNS,
    )


def validation_rows_table(pred: dict) -> dict | None:
    rows = pred["validation"]
    if not rows:
        return None
    columns = [
        "study",
        "check",
        "model",
        "device",
        "variant",
        "predicted",
        "measured",
        "error_percent",
        "bound",
        "calibration",
    ]
    return table(
        "validation",
        "Every checked prediction against its measurement (epochs in seconds, the speedup as a ratio)",
        _frame(_by_check(rows)),
        columns,
    )


def paper_table(pred: dict) -> dict | None:
    rows = pred["paper"]
    if not rows:
        return None
    return table("paper_rates", "The paper's three points and the reference host's, as training rates", _frame(rows))


def validation_verdicts(pred: dict) -> dict[str, list[str]]:
    """targets: over every check, how many meet the speedup's targets, the best of them, and where the measurements
    themselves are too noisy to test the targets (the speedup table gives each check);
    misses: the predictions beyond the worst-case target on each device."""
    out, misses_out = [], []
    speedups = [s for s in pred["validation_summary"] if s["device"] == "speedup"]
    if speedups:
        out.append(_overall_verdict(speedups))
    misses = [r for r in pred["validation"] if r["variant"] == "paper" and abs(r["error_percent"]) > WORST_TARGET]
    # one line per check (a folder's held-out fits, or its probe alone: those rows' source says so) and quantity
    by_check: dict[tuple[str, str], list[dict]] = {}
    for r in misses:
        by_check.setdefault((r["source"], r["device"]), []).append(r)
    for source in dict.fromkeys(source for source, _ in by_check):
        study, check = words.check_of(source)
        for device in ("cpu", "cuda", "speedup"):
            found = sorted(by_check.get((source, device), []), key=lambda r: -abs(r["error_percent"]))
            if found:
                listed = ", ".join(
                    f"{r['model']} {words.percent(r['error_percent'] / 100, 0, sign=True)}" for r in found
                )
                what = "speedup" if device == "speedup" else f"{words.device(device)} epoch"
                misses_out.append(
                    f"{study}, {check}: beyond {WORST_TARGET:.0f}% on the {what} (paper variant): {listed}."
                )
    return {"targets": out, "misses": misses_out}


def _overall_verdict(speedups: list[dict]) -> str:
    """One paragraph over every check's speedup: how many meet both targets; per target, how many checks meet it
    and the best; which folders' measurements are too noisy to test the targets (a perfect model would meet both
    in fewer than half the repeats)."""
    met = [s for s in speedups if s["meets_target"]]

    def named(s: dict) -> str:
        study, check = words.check_of(s["source"])
        return f"{study}, {check}" + (f", {s['variant']} variant" if s["variant"] != "paper" else "")

    def target(what: str, key: str, limit: float) -> str:
        ok = [s for s in speedups if s[key] <= limit]
        best = min(speedups, key=lambda s: s[key])
        count = f"met by {len(ok)} of {len(speedups)} checks" if ok else "met by none"
        return f"{what} ({limit:.0f}%): {count}, best {best[key]:.1f}% ({named(best)})."

    verdict = f"{len(met)} of {len(speedups)} checks meet both targets." if met else "No check meets both targets."
    noisy = [
        s for s in speedups if s.get("floor_meets_target_share") is not None and s["floor_meets_target_share"] < 0.5
    ]
    floor = ""
    if noisy:
        folders = sorted({words.check_of(s["source"])[0] for s in noisy})
        listed = folders[0] if len(folders) == 1 else f"{', '.join(folders[:-1])} and {folders[-1]}"
        shares = [s["floor_meets_target_share"] for s in noisy]
        low, high = min(shares), max(shares)
        span = words.percent(low, 0) if low == high else f"{words.percent(low, 0)}–{words.percent(high, 0)}"
        floor = (
            f" The measurements of {listed} are too noisy to test the targets: there a perfect model "
            f"would meet both in only {span} of repeats."
        )
    median = target("Median target", "median_abs_error_percent", MEDIAN_TARGET)
    worst = target("Worst-case target", "worst_abs_error_percent", WORST_TARGET)
    return f"{verdict} {median} {worst}{floor}"


def paper_verdicts(pred: dict) -> dict[str, list[str]]:
    """What the paper's three points imply about its hardware. main: where the cost model's own form cannot give a
    paper point; rates: each source's training rate on resnet50 against its rate on resnet18, and the fits."""
    out, main = [], []
    rows = pred["paper"]
    for device in ("cpu", "cuda"):
        for source in sorted({r["source"] for r in rows if r["device"] == device}):
            by_model = {r["model"]: r for r in rows if r["source"] == source and r["device"] == device}
            if "resnet18" in by_model and "resnet50" in by_model:
                a, b = by_model["resnet18"], by_model["resnet50"]
                out.append(
                    f"{words.source_short(source)}, {words.device(device)}: resnet18 at "
                    f"{a['effective_gflops_per_second']:,.0f} GFLOP/s, resnet50 at "
                    f"{b['effective_gflops_per_second']:,.0f} ({b['rate_vs_resnet18']:.2f} of its resnet18 rate)."
                )
    for device in ("cpu", "cuda"):
        fitted = [r for r in rows if r["device"] == device and r.get("cost_model_epoch_seconds")]
        if fitted:
            listed = ", ".join(
                f"{r['model']} {r['cost_model_epoch_seconds']:.1f} s against {r['epoch_seconds']:.1f} s "
                f"({words.percent(r['cost_model_epoch_seconds'] / r['epoch_seconds'] - 1, 0, sign=True)})"
                for r in fitted
            )
            out.append(
                f"The cost model's form (fixed step cost, per-layer cost, one rate) fitted to the paper's three "
                f"{words.device(device)} points: {listed}."
            )
            worst = max(fitted, key=lambda r: abs(math.log(r["epoch_seconds"] / r["cost_model_epoch_seconds"])))
            ratio = worst["epoch_seconds"] / worst["cost_model_epoch_seconds"]
            if abs(math.log(ratio)) > math.log(1 + WORST_TARGET / 100):
                main.append(
                    f"No hardware of the cost model's form gives the paper's {words.device(device)} {worst['model']} "
                    f"epoch: it is {ratio:.1f} times what the form fits to all three points, so that one figure, "
                    "not the device, sets the paper's speedup for it."
                )
    return {"main": main, "rates": out}


def prediction_section(pred: dict | None, runs: pl.DataFrame | None = None) -> dict | None:
    """Everything the 'Predicted before measuring' section shows; None without the predict stage's tables."""
    if pred is None:
        return None
    return {
        "host": predicted_host_table(pred, runs),
        "summary": validation_summary_table(pred),
        "speedup_checks": speedup_checks_table(pred),
        "verdicts": validation_verdicts(pred),
        "targets": f"median error at most {MEDIAN_TARGET:.0f}%, worst at most {WORST_TARGET:.0f}%",
        "worst_target": f"{WORST_TARGET:.0f}%",
        "floor_draws": f"{costmodel.FLOOR_DRAWS:,}",
        "check_key": {
            check: meaning
            for check, meaning in words.CHECK_KEY.items()
            if check in {words.check_of(s["source"])[1] for s in pred["validation_summary"]}
        },
        "rows": validation_rows_table(pred),
        "paper": paper_table(pred),
        "paper_verdicts": paper_verdicts(pred),
    }


def predicted_for_host(pred: dict | None) -> str | None:
    """The key-results line for a host without measured speedups: what is predicted for it, labelled as such."""
    if not pred:
        return None
    rows = [r for r in pred["beside"] if r.get("predicted_speedup") is not None]
    if rows:
        rows = sorted(rows, key=lambda r: r["predicted_speedup"])
        papers = {p["model"] for p in paper.ROWS}
        shown = [r for i, r in enumerate(rows) if r["model"] in papers or i in (0, len(rows) - 1)]
        listed = ", ".join(f"{r['model']} {words.times(r['predicted_speedup'])}" for r in shown)
        more = f" ({len(rows)} models in Predicted before measuring)" if len(shown) < len(rows) else ""
        return f"{PREDICTION_LABEL} for this host (from its probe, not measured): GPU speedups {listed}{more}."
    cpu = [r for r in pred["beside"] if r.get("predicted_cpu_epoch_seconds") is not None]
    if cpu:
        listed = ", ".join(
            f"{r['model']} {words.seconds(r['predicted_cpu_epoch_seconds'])}"
            for r in sorted(cpu, key=lambda r: r["predicted_cpu_epoch_seconds"])[:8]
        )
        return (
            f"{PREDICTION_LABEL} for this host (from its CPU probe, not measured; the probe found no GPU): CPU "
            f"seconds per epoch {listed}" + (" and more (see Predicted before measuring)." if len(cpu) > 8 else ".")
        )
    return None


# ---- the headline table --------------------------------------------------------------------------------------------
def headline(speedup: pl.DataFrame, tolerance: float) -> dict:
    """One row per model, ordered by training FLOPs per image; the paper and every measured source/variant side by
    side; the paper's gaps 'not reported'; an accuracy that differs from the paper's beyond tolerance flagged with
    the reason the data give."""
    groups = [(s, v) for s in _measured_sources(speedup) for v in _variants(speedup.filter(pl.col("source") == s))]
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
        notes.append(f"{words.source_short(s)}, {v}: {r['pairing_reason']}")
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


# ---- measurement conditions (the machine state: leases, sentinels, drift, spreads) -------------------------------
UNKNOWN_LEASE = "unknown"
PAIRING_GROUPS = {  # the pairing notes, each kind under its own heading
    "cross": "Figures whose CPU and GPU cross leases †",
    "none": "Models without a same-lease pair (no speedup)",
    "left": "Same-lease figures that left runs out (runs in a lease without the other device)",
}
GLOSSARY = [
    (
        "lease",
        "one boot of the machine (its boot id): one rental of a cloud GPU machine. Its speed differs from the next "
        "lease's, so a speedup divides CPU and GPU timings of one lease.",
    ),
    (
        "sentinel",
        "a short fixed measurement (about 1 s on a CPU, 2 s on a GPU: memory bandwidth, the input pipeline in one "
        "process and at the loader's workers, the GPU's per-op launch cost) taken before and after every job: a "
        "witness of the machine's level, never a correction.",
    ),
    (
        "drifted",
        f"a job whose after-sentinel moved, in some component, by more than {machine.DRIFT_NOISE_FACTOR:g} times the "
        f"larger of the two sentinels' own spreads and by at least {machine.DRIFT_FLOOR:.0%} "
        "(gpuscale.contract.conditions); "
        "shown as the speed after / before (>1: faster).",
    ),
    (
        "spread",
        "of a sentinel: (max − min) / median of its repeats or records, in %; of a speedup: one standard deviation "
        "on the log scale between epochs, rounds, seeds or leases, written ×/÷ the factor it moves the figure by.",
    ),
    ("round", "one pass over the whole interleaved set of timing jobs (study.rounds); a later round repeats it."),
    (
        "sampled*",
        "a time extrapolated from a few timed steps per epoch; the extrapolation's error is in no interval (the "
        "Checks section measures it on full runs).",
    ),
]


def _lease_short(lease: str | None) -> str:
    return "not recorded" if lease in (None, UNKNOWN_LEASE) else f"{lease[:8]}…"


def _source_conditions(source: str, runs: pl.DataFrame, speedup: pl.DataFrame, conditions: pl.DataFrame) -> dict:
    """One source's leases, records without a lease or sentinel, drifted records and figures that cross leases."""
    mine = runs.filter((pl.col("source") == source) & (pl.col("status") == "measured"))
    figures = speedup.filter(pl.col("source") == source)
    leases = sorted(set(mine["lease"].to_list()) - {UNKNOWN_LEASE})
    with_sentinel = conditions.filter(pl.col("source") == source).select(KEY_COLUMNS).unique().height
    return {
        "source": source,
        "leases": leases,
        "records": mine.height,
        "unknown": mine.filter(pl.col("lease") == UNKNOWN_LEASE).height,
        "without_sentinel": mine.height - with_sentinel,
        "drifted": mine.filter(pl.col("drifted").fill_null(False)).height,
        "crossing": figures.filter(pl.col("pairing") == "cross-lease").height,
        "unpaired": figures.filter(
            pl.col("speedup").is_null() & pl.col("pairing_reason").is_not_null() & pl.col("gpu_seconds").is_not_null()
        ).height,
        "rounds": mine["round"].n_unique() or 1,
        "speedups": figures.filter(pl.col("speedup").is_not_null()).height,
        "same_lease": figures.filter(pl.col("speedup").is_not_null() & (pl.col("pairing") == "same-lease")).height,
        "not_recorded": figures.filter(pl.col("speedup").is_not_null() & (pl.col("pairing") == "unknown")).height,
    }


def _conditions_words(c: dict, brief: bool = False, named: bool = True) -> str:
    """'h200: 2 machine leases (ab12…, cd34…); 1 record(s) drifted; 2 figure(s) cross leases †' (brief: no ids;
    not named: without the source)."""
    name = words.source_short(c["source"]) if named else ""
    if not c["leases"]:
        text = f"{name}: {c['records']} records without a lease (made before schema 4)"
    else:
        text = f"{name}: {len(c['leases'])} machine lease{'s' if len(c['leases']) > 1 else ''}"
        text += "" if brief else f" ({', '.join(map(_lease_short, c['leases']))})"
        if c["unknown"]:
            text += f", {c['unknown']} record(s) without one"
    if c["without_sentinel"] and c["leases"]:
        text += f"; {c['without_sentinel']} record(s) without a sentinel"
    elif c["without_sentinel"]:
        text = text.replace("without a lease", "without a lease or sentinel")
    if c["rounds"] > 1:
        text += f"; {c['rounds']} rounds"
    if not c["leases"]:
        pass  # no lease recorded at all: the records' own words above say it, and ‡ marks every figure
    elif c["speedups"] and c["same_lease"] == c["speedups"]:
        text += f"; all {c['speedups']} speedups pair CPU and GPU within one lease"
    elif c["speedups"]:
        text += f"; {c['same_lease']} of {c['speedups']} speedups pair CPU and GPU within one lease"
    if c["crossing"]:
        text += f", {c['crossing']} figure(s) cross leases †"
    if c["not_recorded"] and c["leases"]:
        text += f", {c['not_recorded']} with the lease not recorded ‡"
    if c["drifted"]:
        text += f"; {c['drifted']} of {c['records']} jobs drifted"
    if c["unpaired"]:
        text += f"; {c['unpaired']} model(s) without a same-lease pair (no speedup)"
    return text if named else text.removeprefix(": ")


def conditions_line(tables: dict) -> str | None:
    """The first screen's line on the machine state, every source in one sentence."""
    if "conditions" not in tables or tables["runs"].is_empty():
        return None
    runs, speedup = tables["runs"], tables["speedup"]
    sources = sorted(
        runs.filter(pl.col("status") == "measured")["source"].unique().to_list(), key=lambda s: (s != LOCAL_SOURCE, s)
    )
    parts = [_conditions_words(_source_conditions(s, runs, speedup, tables["conditions"]), True) for s in sources]
    return "Machine state: " + "; ".join(parts) if parts else None


def _drift_rows(r: dict, conditions: pl.DataFrame) -> list[dict]:
    """One drifted record's components that moved beyond their noise, each with its speed ratio after / before (>1:
    faster), judged as gpuscale.contract.conditions judges them (components since dropped from the sentinel left
    out)."""
    mine = conditions.filter(*(pl.col(k).eq_missing(r[k]) for k in KEY_COLUMNS))
    sentinels = {
        when: {"components": {c["component"]: c for c in frame.iter_rows(named=True)}}
        for (when,), frame in mine.group_by(["when"])
    }
    _, ratios = machine.drift(sentinels.get("before"), sentinels.get("after"))
    rows = []
    for name, ratio in sorted(ratios.items(), key=lambda kv: -abs(math.log(kv[1]))):
        spreads = [sentinels[w]["components"][name].get("spread") or 0.0 for w in ("before", "after")]
        if abs(ratio - 1) > max(machine.DRIFT_FLOOR, machine.DRIFT_NOISE_FACTOR * max(spreads)):
            rows.append({**{k: r[k] for k in DRIFT_KEY}, "component": name, "drift_speed_ratio": ratio})
    return rows


DRIFT_KEY = ["model", "device", "source", "variant", "seed", "round", "lease"]


def drift_table(runs: pl.DataFrame, conditions: pl.DataFrame) -> dict | None:
    """Every drifted record, one row per component that moved beyond its noise."""
    drifted = runs.filter(pl.col("drifted").fill_null(False)).sort(KEY_COLUMNS)
    rows = [row for r in drifted.iter_rows(named=True) for row in _drift_rows(r, conditions)]
    if not rows:
        return None
    frame = pl.DataFrame(
        rows, schema={**dict(runs.select(DRIFT_KEY).schema), "component": pl.String, "drift_speed_ratio": pl.Float64}
    )
    columns, constant = _varying(frame, [*DRIFT_KEY, "component", "drift_speed_ratio"], DRIFT_KEY[2:6])
    return table(
        "drift",
        f"The {drifted.height} records whose machine drifted during the job: each component of the sentinel that moved "
        "beyond its noise, as the speed after the job over the speed before it (>1: the machine got faster)."
        + constant,
        frame,
        columns,
    )


def _varying(frame: pl.DataFrame, columns: list[str], context: list[str]) -> tuple[list[str], str]:
    """The columns worth a column: none empty in every row, no context column with one value in every row (named
    once in the caption instead, ' Every row: ...')."""
    kept = [c for c in columns if frame[c].null_count() < frame.height]
    same = [c for c in context if c in kept and frame.height > 1 and frame[c].n_unique() == 1]
    note = "; ".join(f"{words.column(c)} {_cell(c, frame[c][0])}" for c in same)
    return [c for c in kept if c not in same], f" Every row: {note}." if note else ""


def lease_table(runs: pl.DataFrame, conditions: pl.DataFrame) -> dict | None:
    """Per source and lease: its records, devices, when, and how many carry sentinels and drifted."""
    measured = runs.filter(pl.col("status") == "measured")
    if measured.is_empty():
        return None
    sentinels = conditions.select(KEY_COLUMNS).unique().group_by("source", "lease").len("n")
    frame = (
        measured.group_by("source", "lease")
        .agg(
            pl.len().alias("records"),
            pl.col("device").unique().sort().str.join(", ").alias("devices"),
            pl.col("started_at").min().alias("first_started"),
            pl.col("finished_at").max().alias("last_finished"),
            pl.col("drifted").fill_null(False).sum().cast(pl.Int64).alias("drifted_records"),
        )
        .join(sentinels, on=["source", "lease"], how="left")
        .with_columns(pl.col("n").fill_null(0).alias("sentinel_records"))
        .drop("n")
        .sort("source", "first_started")
    )
    return table("leases", "Each machine lease (boot id) the records were measured in.", frame)


def _sentinel_unit(component: str, largest: float | None) -> tuple[float, str, int]:
    """(divisor, unit, decimals) for every figure of one component, so that its rows read in one unit and to the same
    decimals."""
    unit = machine.unit_of(component)[0]
    divisor, unit = {
        "FLOP/s": (1e12, "TFLOP/s") if (largest or 0) >= 1e13 else (1e9, "GFLOP/s"),
        "bytes/s": (1e9, "GB/s"),
        "s/op": (1e-6, "µs/op"),
    }.get(unit, (1.0, unit))
    top = (largest or 0) / divisor
    return divisor, unit, 0 if top >= 100 else 1 if top >= 10 else 2


def _sentinel_value(scale: tuple[float, str, int], value: float | None) -> str:
    divisor, unit, decimals = scale
    return "—" if value is None else f"{value / divisor:,.{decimals}f} {unit}"


def sentinel_table(conditions: pl.DataFrame) -> dict | None:
    """Each lease's sentinel figures: per component and device, the median over its records' before-sentinels, the
    spread between those records and the sentinel's own spread over its repeats."""
    before = conditions.filter(pl.col("when") == "before")
    if before.is_empty():
        return None
    frame = (
        before.group_by("source", "lease", "device", "component")
        .agg(
            pl.len().alias("records"),
            pl.col("unit").first(),
            pl.col("value").median().alias("median"),
            ((pl.col("value").max() - pl.col("value").min()) / pl.col("value").median()).alias("between_records"),
            pl.col("spread").median().alias("own_spread"),
        )
        .sort("source", "component", "device", "lease")
    )
    order = [*machine.COMPONENTS, *machine.DROPPED]
    frame = frame.with_columns(
        pl.col("component").replace_strict(order, list(range(len(order))), default=len(order)).alias("_order")
    ).sort("_order", "source", "device", "lease")
    scale = {c: _sentinel_unit(c, frame.filter(pl.col("component") == c)["median"].max()) for c in order}
    frame = frame.with_columns(
        pl.struct("component", "median")
        .map_elements(lambda r: _sentinel_value(scale[r["component"]], r["median"]), return_dtype=pl.String)
        .alias("sentinel_value")
    ).drop("_order")
    columns = ["source", "component", "device", "lease", "records", "sentinel_value", "between_records", "own_spread"]
    return table(
        "sentinels",
        "Each lease's sentinel, taken before every job (per device: a job's threads and loader workers): a witness of "
        "the machine state, never a correction. The components kept first; those dropped from the sentinel (they "
        "tracked nothing, docs/conditions.md) last, shown as recorded.",
        frame.select(columns),
    )


SPREAD_COLUMNS = [
    "model",
    "source",
    "variant",
    "speedup",
    "pairing",
    "leases",
    "rounds",
    "epoch_spread",
    "round_spread",
    "seed_spread",
    "lease_spread",
    "speedup_ci_low",
    "speedup_ci_high",
    "speedup_interval_low",
    "speedup_interval_high",
]


def spread_table(speedup: pl.DataFrame) -> dict | None:
    """Every speedup's spreads on their own beside the bootstrap and the interval the page shows with it (none for
    a single run per device, as on the first screen); columns empty in every row left out, and the source, variant,
    pairing, leases or rounds where one value holds for every row said once in the caption."""
    frame = _by_flops(speedup.filter(pl.col("speedup").is_not_null())).sort("source", "variant", maintain_order=True)
    if frame.is_empty():
        return None
    shown = [speedup_interval(r) for r in frame.iter_rows(named=True)]
    frame = frame.with_columns(
        pl.Series("speedup_interval_low", [low for low, _ in shown], dtype=pl.Float64),
        pl.Series("speedup_interval_high", [high for _, high in shown], dtype=pl.Float64),
    )
    columns, constant = _varying(frame, SPREAD_COLUMNS, ["source", "variant", "pairing", "leases", "rounds"])
    return table(
        "spreads",
        "Each speedup's spreads on their own, each one standard deviation on the log scale, written as the factor "
        "(×/÷) it multiplies or divides the figure by, and the interval shown with the figure, which holds them and "
        "the bootstrap over seeds (none for a single run per device)." + constant,
        frame,
        columns,
    )


def conditions_section(tables: dict) -> dict:
    """The 'Measurement conditions' section: leases per source, each lease's sentinel, the figures that cross
    leases or found no same-lease pair, the records that drifted, and every spread beside the others."""
    runs, speedup, conditions = tables["runs"], tables["speedup"], tables["conditions"]
    sources = sorted(
        runs.filter(pl.col("status") == "measured")["source"].unique().to_list(), key=lambda s: (s != LOCAL_SOURCE, s)
    )
    summary = [_conditions_words(_source_conditions(s, runs, speedup, conditions)) for s in sources]
    groups: dict[str, list[str]] = {title: [] for title in PAIRING_GROUPS.values()}
    for r in speedup.filter(pl.col("pairing_reason").is_not_null()).iter_rows(named=True):
        kind = "none" if r["speedup"] is None else ("cross" if r["pairing"] == "cross-lease" else "left")
        figure = f"{words.times(r['speedup'])}{words.pairing_mark(r['pairing'])}" if r["speedup"] is not None else ""
        if kind == "left":
            figure += f" from {r['leases']} lease{'s' if r['leases'] != 1 else ''}" if r["leases"] else ""
        groups[PAIRING_GROUPS[kind]].append(
            f"{words.source_short(r['source'])}, {r['variant']}, {r['model']}: "
            + (f"{figure}; " if figure else "")
            + r["pairing_reason"]
        )
    return {
        "pairing": tables.get("pairing", "same-lease"),
        "glossary": GLOSSARY,
        "summary": summary,
        "crossing": [line for lines in groups.values() for line in lines],
        "pairing_groups": [{"title": title, "lines": lines} for title, lines in groups.items() if lines],
        "drift": drift_table(runs, conditions),
        "leases": lease_table(runs, conditions),
        "sentinels": sentinel_table(conditions),
        "spreads": spread_table(speedup),
        "marks": words.pairing_keys(speedup["pairing"].drop_nulls().to_list()),
    }


# ---- the other tables ------------------------------------------------------------------------------------------------
REPORTED_SAMPLED_STEPS = [10, 20, 40, 100]
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


def gains_table(gains: pl.DataFrame) -> dict | None:
    if gains.is_empty():
        return None
    return table(
        "gains",
        "Each device's gain from the paper variant to another, per model: over the whole run (compilation included) "
        "and over steady epochs.",
        gains.sort("source", "model", "device", "variant"),
    )


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


def scaling_table(scaling: pl.DataFrame) -> dict | None:
    if scaling.is_empty():
        return None
    return table("scaling", "Data-parallel runs against one device of the same kind.", scaling.drop("extrapolated"))


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


def _empty(vl: dict) -> str | None:
    """The message of a chart the data do not allow (charts._empty), shown as a line instead of a chart."""
    meta = vl.get("usermeta") or {}
    return meta.get("message") if meta.get("empty") else None


def _figures(specs: dict[str, dict]) -> dict[str, list[dict]]:
    """The charts for the template, by section: title, spec (as script JSON), help, or why there is none."""
    figures = {}
    for name in words.CHART_NAMES:
        spec = specs[name]
        empty = _empty(spec)
        figures.setdefault(SECTIONS[name], []).append(
            {
                "name": name,
                "title": words.chart_title(spec),
                "spec": Markup(words.script_json(spec)),
                "help": CHART_HELP[name],
                "empty": empty is not None,
                "message": empty or "",
            }
        )
    return figures


class CsvBlobs:
    """Each distinct CSV the page offers, embedded once, under an id its download buttons name: a table shown in a
    section and the same table among 'All tables as CSV' share one copy."""

    def __init__(self) -> None:
        self.ids: dict[str, str] = {}

    def ref(self, text: str) -> str:
        return self.ids.setdefault(text, f"csv-{len(self.ids)}")

    def items(self) -> list[tuple[str, str]]:
        return [(blob_id, text) for text, blob_id in self.ids.items()]


def render(
    tables: dict,
    chart_dir: Path,
    params: Params | dict,
    params_files: list[Path],
    vega_bundle: str | None = None,
    out_dir: Path | None = None,
    pred: dict | None = None,
) -> str:
    import vl_convert

    specs = {name: json.loads((Path(chart_dir) / f"{name}.vl.json").read_text()) for name in words.CHART_NAMES}
    env = jinja2.Environment(
        loader=jinja2.PackageLoader("gpuscale", "templates"),
        autoescape=jinja2.select_autoescape(default=True),
        undefined=jinja2.StrictUndefined,
    )
    template = env.get_template("report.html.j2")
    figures = _figures(specs)
    params = Params.of(params)
    tolerance = params.report.accuracy_tolerance
    sources = {words.source_short(k): v for k, v in tables.get("sources", {}).items() if v}
    data_tables = {name: tables[name].write_csv() for name in TABLES}
    return template.render(
        title=params.report.title,
        label=params.study.label,
        generated=dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        paper=paper,
        key=key_results(tables, pred),
        prediction=prediction_section(pred, tables["runs"]),
        warnings=warnings(tables),
        headline=headline(tables["speedup"], tolerance),
        conditions=conditions_section(tables),
        tolerance=tolerance,
        figures=figures,
        fits=fits_table(tables["fits"]),
        gains=gains_table(tables["gains"]),
        sampling=sampling_table(tables["sampling"]),
        sampling_summary=sampling_summary(tables["sampling"]),
        scaling=scaling_table(tables["scaling"]),
        runs=runs_table(tables["runs"], out_dir),
        environments=environments(tables["runs"]),
        provenance=provenance(tables["runs"], params_files),
        sources=sources,
        data_tables=[{"name": n, "csv": t} for n, t in data_tables.items()],
        csv_blobs=CsvBlobs(),
        script_json=lambda value: Markup(words.script_json(value)),
        vega_bundle=Markup((vega_bundle or vl_convert.javascript_bundle()).replace("</script", "<\\/script")),
    )


def run(
    tables_dir: Path,
    chart_dir: Path,
    out: Path,
    params: Params | dict,
    params_files: list[Path],
    predict_dir: Path | None = None,
) -> Path:
    """The page; with predict_dir (results/predict), its 'Predicted before measuring' section too."""
    pred = load_predictions(predict_dir)
    html = render(read_tables(tables_dir), chart_dir, params, params_files, out_dir=Path(out).parent, pred=pred)
    fsutil.write_text(out, html)
    log.info("report -> %s", out)
    return out
