"""Predicted before measuring: the predict stage's tables (gpuscale.predict), its checks and the paper's points;
left out of the page without them."""

from __future__ import annotations

import math
import statistics
from pathlib import Path

import polars as pl

from gpuscale import words
from gpuscale.analyze import paper
from gpuscale.predict import checks, costmodel, transfer
from gpuscale.predict import prediction as predict
from gpuscale.predict.prediction import MEDIAN_TARGET_PERCENT as MEDIAN_TARGET
from gpuscale.predict.prediction import WORST_TARGET_PERCENT as WORST_TARGET
from gpuscale.present.page import Page, table

ID = "predicted"
NAV = "Predicted before measuring"
CHARTS = {}  # its charts (gpuscale.words.CHART_NAMES), each with the words under it
TEMPLATE = """\
<section id="predicted">
<h2>Predicted before measuring</h2>
<p>A cost model (docs/prediction.md) predicts each model's CPU and GPU epoch, and so its speedup, from a one-minute probe
of each device and the model's training FLOPs by layer kind and layer count: a <strong>prediction</strong> unless a
column says <em>measured</em>.</p>
{% if prediction.host %}<details><summary>This host: predicted for every model ({{ prediction.host.rows|length }} rows; PREDICTION)</summary>
{{ data_table(prediction.host, tall=True) }}
</details>{% else %}<p>No probe records of this host: the predict preset (<code>snakemake --cores 2 --configfile
config/predict.yaml</code>) predicts each model here in a few minutes. The checks below use the probes the study
folders ship.</p>{% endif %}
{% if prediction.transfer %}<h3>A lease never measured</h3>
<p>A machine lease has its own pace, so each lease is predicted from its own probes, with the other leases' records
setting only each model's shape (docs/prediction.md): the check a new user's machine faces.{% if
prediction.transfer_today %} Rows "probed as today" pool the leases whose probes were made as the tool makes them
now; the others' probes predate a fix.{% endif %}{% if prediction.transfer_unseen %} Rows "(the model unmeasured
too)" leave each model out of every other lease's records as well: how a model no lease has measured, such as your
own, is predicted on a new lease.{% endif %}</p>
{{ data_table(prediction.transfer, pin_first=True) }}{% endif %}
{% if prediction.verdicts.targets %}<h3>How good are the predictions?</h3>
{% for v in prediction.verdicts.targets %}<p>{{ v }}</p>{% endfor %}
{% if prediction.speedup_checks %}{{ data_table(prediction.speedup_checks, pin_first=True) }}{% endif %}
<p>The checks, on study folders of measured records (targets, for the speedup: {{ prediction.targets }}):</p>
<ul>{% for check, meaning in prediction.check_key.items() %}<li><strong>{{ check }}</strong>: {{ meaning }}</li>{% endfor %}
<li><strong>noise floor</strong>: each check's measured epochs redrawn {{ prediction.floor_draws }} times with the spread
this host's runs show between repeats (one steady epoch against the next, seeds against each other), exact predictions
scored against them: what a perfect model would typically score (an imperfect one can score below it by luck, not
often)</li></ul>{% endif %}
{% if prediction.summary %}<details><summary>Per device: the CPU and GPU epochs checked, check by check (table)</summary>
{{ data_table(prediction.summary, pin_first=True) }}
</details>
<details><summary>Where it misses: every paper-variant prediction beyond {{ prediction.worst_target }}, and every checked prediction</summary>
{% if prediction.verdicts.misses %}<ul>{% for v in prediction.verdicts.misses %}<li>{{ v }}</li>{% endfor %}</ul>{% endif %}
{% if prediction.rows %}<details><summary>Every checked prediction ({{ prediction.rows.rows|length }} rows)</summary>
{{ data_table(prediction.rows, tall=True) }}
</details>{% endif %}
</details>{% endif %}
{% if prediction.paper %}<h3>What the paper's three points imply about its hardware</h3>
{% if prediction.paper_verdicts.main %}<ul>{% for v in prediction.paper_verdicts.main %}<li>{{ v }}</li>{% endfor %}</ul>{% endif %}
<details><summary>Training rates on each model, the paper's and the reference host's, and the cost model fitted to the paper's points</summary>
<ul>{% for v in prediction.paper_verdicts.rates %}<li>{{ v }}</li>{% endfor %}</ul>
{{ data_table(prediction.paper) }}
</details>{% endif %}
</section>
"""  # noqa: E501 (the page's markup, line for line)


def context(page: Page) -> dict | None:
    section = prediction_section(page.pred, page.tables.get("runs"))
    return None if section is None else {"prediction": section}


PREDICTION_LABEL = "PREDICTION"


def load_predictions(folder: Path | str | None) -> dict | None:
    """The predict stage's tables (gpuscale.predict.prediction.tables) and its per-model view, or None without
    the folder."""
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


def transfer_table(pred: dict) -> dict | None:
    """Leave one lease out (predict/transfer.py): per device and lease, each lease predicted from its own probes
    and the other leases' records only."""
    rows = pred.get("transfer_summary") or []
    if not rows:
        return None
    frame = _frame(
        [
            {
                "device": r["device"],
                "held_out": Path(r["lease"]).name,
                "models": r["models"],
                "median_abs_error_percent": r["median_abs_error_percent"],
                "worst_abs_error_percent": r["worst_abs_error_percent"],
                "worst_model": r["worst_model"],
                "inside_band_percent": r["coverage_percent"],
            }
            for r in rows
        ]
    )
    return table(
        "transfer",
        f"Each machine lease PREDICTED from its own probes and the other leases' records only (leave one lease out; "
        f"targets for the speedup: median at most {MEDIAN_TARGET:.0f}%, worst at most {WORST_TARGET:.0f}%, "
        "the measured value inside the 90% band at least 80% of the time)",
        frame,
        list(frame.columns),
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
        "transfer": transfer_table(pred),
        "transfer_today": any(r["lease"] == transfer.PROBED_AS_TODAY for r in pred.get("transfer_summary") or []),
        "transfer_unseen": any(r["lease"].endswith(transfer.UNSEEN) for r in pred.get("transfer_summary") or []),
        "summary": validation_summary_table(pred),
        "speedup_checks": speedup_checks_table(pred),
        "verdicts": validation_verdicts(pred),
        "targets": f"median error at most {MEDIAN_TARGET:.0f}%, worst at most {WORST_TARGET:.0f}%",
        "worst_target": f"{WORST_TARGET:.0f}%",
        "floor_draws": f"{checks.FLOOR_DRAWS:,}",
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
