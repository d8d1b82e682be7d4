"""Predicted beside measured: this host's predictions (the predict stage's host table, gpuscale.predict) beside what
this host measured, every measurement outside its band said in words, and how far to trust the method (headline
figures read from the committed research result, research/prediction/results/validation.json: the report
computes no validation). Left out of the page without the predict stage's tables."""

from __future__ import annotations

import json
import statistics
from collections.abc import Callable
from pathlib import Path

import polars as pl

from gpuscale import words
from gpuscale.analyze import paper
from gpuscale.predict import prediction as predict
from gpuscale.present.page import Page

ID = "predicted"
NAV = "Predicted beside measured"
CHARTS = {}  # its charts (gpuscale.words.CHART_NAMES), each with the words under it
TEMPLATE = """\
<section id="predicted">
<h2>Predicted beside measured</h2>
<p>A cost model (docs/prediction.md) predicts each model's CPU and GPU epoch, and so its speedup, from a one-minute probe
of each device and the model's training FLOPs by layer kind and layer count, each with a band: a
<strong>prediction</strong> unless a column says <em>measured</em>.</p>
{% if prediction.measured %}{% if prediction.misses %}<p><strong>{{ prediction.misses|length }} measurement{{ "s" if prediction.misses|length != 1 }} of this host fell outside {{ "their" if prediction.misses|length != 1 else "its" }} band:</strong></p>
<ul>{% for m in prediction.misses %}<li>{{ m }}</li>{% endfor %}</ul>
{% else %}<p>Every measurement of this host fell inside its predicted band.</p>{% endif %}
{{ data_table(prediction.measured, pin_first=True) }}{% endif %}
{% if prediction.trust %}<p><strong>How far to trust it.</strong> {{ prediction.trust }}</p>{% endif %}
{% if prediction.host %}<details><summary>Every model predicted for this host ({{ prediction.host.rows|length }} models; PREDICTION)</summary>
{{ data_table(prediction.host, tall=True, pin_first=True) }}
</details>{% else %}<p>No probe records of this host: the predict preset (<code>gpuscale use config/predict.yaml</code>, then
<code>snakemake --cores 2</code>) predicts each model here in a few minutes, and <code>gpuscale predict --model NAME</code> one
model.</p>{% endif %}
</section>
"""  # noqa: E501 (the page's markup, line for line)

PREDICTION_LABEL = "PREDICTION"
# the research result whose headline figures say how far to trust the method (research/prediction/validate.py)
VALIDATION_RESULT = Path("research") / "prediction" / "results" / "validation.json"
VALIDATION_LINK = "research/prediction/results/validation.md"


def context(page: Page) -> dict | None:
    section = prediction_section(page.pred, page.tables.get("runs"))
    return None if section is None else {"prediction": section}


def load_predictions(folder: Path | str | None) -> dict | None:
    """The predict stage's tables (gpuscale.predict.prediction.tables) and their per-model view (`beside`), or None
    without the folder."""
    if folder is None or not Path(folder).is_dir():
        return None
    got = predict.tables(folder)
    got["beside"] = predict.host_by_model(got["host"])
    return got


def validation_headline(path: Path | str | None = None) -> list[dict]:
    """The headline rows of the committed research result ([] where the file is not there: a copy of the package
    without research/)."""
    candidates = [Path(path)] if path else [VALIDATION_RESULT, Path(__file__).resolve().parents[4] / VALIDATION_RESULT]
    for candidate in candidates:
        try:
            doc = json.loads(candidate.read_text())
        except (OSError, ValueError):
            continue
        return doc.get("headline") or []
    return []


def measured_here(runs: pl.DataFrame | None) -> dict[str, dict]:
    """This study's own measured epochs (paper variant, no sweeps) per model: {model: {"cpu": s, "gpu": s}}, the
    steady median where a run has steady epochs, else its mean epoch (a one-epoch check), the median over seeds."""
    if runs is None or runs.is_empty():
        return {}
    mine = runs.filter(
        (pl.col("source") == "this host")
        & (pl.col("status") == "measured")
        & (pl.col("variant") == "paper")
        & pl.col("sweep_parameter").is_null()
    )
    out: dict[str, dict[str, list[float]]] = {}
    for r in mine.to_dicts():
        seconds = r["steady_epoch_seconds_median"] or r["epoch_seconds_mean"]
        if seconds:
            side = "cpu" if r["device"] == "cpu" else "gpu"
            out.setdefault(r["model"], {}).setdefault(side, []).append(seconds)
    return {model: {side: statistics.median(v) for side, v in sides.items()} for model, sides in out.items()}


# ----------------------------------------------------------------------------- the tables, each column declared

# (key in the row, header words with the unit, the cell's format)
Column = tuple[str, str, Callable[[dict], str]]


def _seconds(value: float | None) -> str:
    if value is None:
        return "—"
    return f"{value:,.3g}" if value < 10 else f"{value:,.1f}"


def _times(value: float | None) -> str:
    """A speedup, its unit (×) in the header or the words beside it."""
    return "—" if value is None else f"{value:.2f}" if value < 10 else f"{value:.1f}"


def _with_band(key: str, fmt: Callable[[float | None], str]) -> Callable[[dict], str]:
    def cell(row: dict) -> str:
        value, low, high = row.get(key), row.get(f"{key}_low"), row.get(f"{key}_high")
        if value is None:
            return "—"
        band = f" ({fmt(low)}–{fmt(high)})" if low is not None and high is not None else ""
        return fmt(value) + band

    return cell


def _measured(key: str, fmt: Callable[[float | None], str]) -> Callable[[dict], str]:
    def cell(row: dict) -> str:
        value = row.get(key)
        if value is None:
            return "—"
        return fmt(value) + (" (outside)" if _outside(row, key.removeprefix("measured_")) else "")

    return cell


def _outside(row: dict, side: str) -> bool:
    value, low, high = row.get(f"measured_{side}"), row.get(f"predicted_{side}_low"), row.get(f"predicted_{side}_high")
    return None not in (value, low, high) and not low <= value <= high


PREDICTED: list[Column] = [
    ("model", "model", lambda r: r["model"]),
    ("predicted_cpu", "CPU epoch, PREDICTED (s, band)", _with_band("predicted_cpu", _seconds)),
    ("predicted_gpu", "GPU epoch, PREDICTED (s, band)", _with_band("predicted_gpu", _seconds)),
    ("predicted_speedup", "speedup, PREDICTED (×, band)", _with_band("predicted_speedup", _times)),
]
BESIDE: list[Column] = [
    PREDICTED[0],
    PREDICTED[1],
    ("measured_cpu", "CPU epoch, measured (s)", _measured("measured_cpu", _seconds)),
    PREDICTED[2],
    ("measured_gpu", "GPU epoch, measured (s)", _measured("measured_gpu", _seconds)),
    PREDICTED[3],
    ("measured_speedup", "speedup, measured (×)", _measured("measured_speedup", _times)),
]


def _table(name: str, caption: str, rows: list[dict], columns: list[Column]) -> dict:
    """A table for the template (page.table's shape): each column's header and format declared with it; the CSV
    holds the numbers, bands included."""
    keys = list(dict.fromkeys(k for r in rows for k in r))
    frame = pl.DataFrame([{k: r.get(k) for k in keys} for r in rows], infer_schema_length=None)
    return {
        "name": name,
        "caption": caption,
        "header": [header for _, header, _ in columns],
        "rows": [[{"text": fmt(r), "href": None} for _, _, fmt in columns] for r in rows],
        "csv": frame.write_csv(),
    }


def _rows(pred: dict) -> list[dict]:
    """The host table per model, the band's keys named as _table's cells read them."""
    out = []
    for r in pred["beside"]:
        row = {"model": r["model"]}
        for side in ("cpu", "gpu"):
            row[f"predicted_{side}"] = r.get(f"predicted_{side}_epoch_seconds")
            row[f"predicted_{side}_low"], row[f"predicted_{side}_high"] = (
                r.get(f"predicted_{side}_low"),
                r.get(f"predicted_{side}_high"),
            )
        row["predicted_speedup"] = r.get("predicted_speedup")
        row["predicted_speedup_low"], row["predicted_speedup_high"] = (
            r.get("predicted_speedup_low"),
            r.get("predicted_speedup_high"),
        )
        row["bound"] = r.get("bound")
        out.append(row)
    return out


def beside_measured(pred: dict, runs: pl.DataFrame | None) -> list[dict]:
    """The models this host both predicted and measured: each row's predictions with their bands and the
    measurements (the speedup as this host's CPU epoch over its GPU epoch)."""
    here = measured_here(runs)
    rows = []
    for row in _rows(pred):
        got = here.get(row["model"])
        if not got:
            continue
        cpu, gpu = got.get("cpu"), got.get("gpu")
        rows.append(
            {**row, "measured_cpu": cpu, "measured_gpu": gpu, "measured_speedup": cpu / gpu if cpu and gpu else None}
        )
    return rows


def misses(rows: list[dict]) -> list[str]:
    """Each measurement outside its band, in words: what was measured, what was predicted, by how much it missed."""
    out = []
    what = {
        "cpu": ("CPU epoch", _seconds, " s"),
        "gpu": ("GPU epoch", _seconds, " s"),
        "speedup": ("speedup", _times, "×"),
    }
    for r in rows:
        for side, (name, fmt, unit) in what.items():
            if not _outside(r, side):
                continue
            measured, predicted = r[f"measured_{side}"], r[f"predicted_{side}"]
            low, high = r[f"predicted_{side}_low"], r[f"predicted_{side}_high"]
            ratio = measured / predicted
            how = f"{ratio:.1f} times the prediction" if ratio >= 1 else f"{1 / ratio:.1f} times below the prediction"
            out.append(
                f"{r['model']}, {name}: measured {fmt(measured)}{unit}, predicted {fmt(predicted)}{unit} (band "
                f"{fmt(low)}–{fmt(high)}{unit}): {how}, {'above' if measured > high else 'below'} its band."
            )
    return out


def trust(headline: list[dict], calibrations: set[str]) -> str | None:
    """How far the method erred where it was checked (the research result's headline), in one paragraph: the
    figures that apply to this host's predictions first (the probe alone, or a calibration by leases)."""
    speedups = [h for h in headline if h["quantity"] == "speedup"]
    if not speedups:
        return None

    def said(h: dict) -> str:
        return (
            f"{h['card']}: median error {h['median_abs_error_percent']:.0f}%, "
            f"worst {h['worst_abs_error_percent']:.0f}%, "
            f"inside the band {h['inside_band_percent']:.0f}% of {h['predictions']}"
        )

    alone = [h for h in speedups if h["model"].startswith("probe alone")]
    calibrated = [h for h in speedups if h["model"] == "unmeasured"]
    parts = []
    if alone:
        parts.append(
            "From the probe alone, the speedup of the reference hosts' leases: " + "; ".join(map(said, alone)) + "."
        )
    if calibrated:
        parts.append(
            "Calibrated by other leases of the same host, for a model none of them measured: "
            + "; ".join(map(said, calibrated))
            + "."
        )
    uses = "the probe alone" if calibrations <= {"probe"} else "a calibration by leases of this host"
    return (
        f"This host's predictions come from {uses}. " + " ".join(parts) + " These are server hosts' figures; a host "
        "unlike them can miss by more, which the flags above show. The tables per lease and folder: "
        f"{VALIDATION_LINK} (docs/prediction.md, 'How far it erred')."
    )


def prediction_section(pred: dict | None, runs: pl.DataFrame | None = None) -> dict | None:
    """Everything the 'Predicted beside measured' section shows; None without the predict stage's tables."""
    if pred is None:
        return None
    beside = beside_measured(pred, runs)
    every = sorted(_rows(pred), key=lambda r: (r["predicted_cpu"] is None, r["predicted_cpu"] or 0.0, r["model"]))
    calibrations = {r["calibration"].split(" ")[0] for r in pred["host"] if r["quantity"] != "speedup"}
    return {
        "measured": _table(
            "predicted_measured",
            f"{PREDICTION_LABEL}S for this host beside what it measured ('outside': beyond the band)",
            beside,
            BESIDE,
        )
        if beside
        else None,
        "misses": misses(beside),
        "trust": trust(validation_headline(), calibrations) if pred["host"] else None,
        "host": _table(
            "predicted_host",
            f"{PREDICTION_LABEL}S for this host (from its probe records, not measured), fastest CPU epoch first",
            every,
            PREDICTED,
        )
        if every
        else None,
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
        more = f" ({len(rows)} models in {NAV})" if len(shown) < len(rows) else ""
        return f"{PREDICTION_LABEL} for this host (from its probe, not measured): GPU speedups {listed}{more}."
    cpu = [r for r in pred["beside"] if r.get("predicted_cpu_epoch_seconds") is not None]
    if cpu:
        listed = ", ".join(
            f"{r['model']} {words.seconds(r['predicted_cpu_epoch_seconds'])}"
            for r in sorted(cpu, key=lambda r: r["predicted_cpu_epoch_seconds"])[:8]
        )
        return (
            f"{PREDICTION_LABEL} for this host (from its CPU probe, not measured; the probe found no GPU): CPU "
            f"seconds per epoch {listed}" + (f" and more (see {NAV})." if len(cpu) > 8 else ".")
        )
    return None
