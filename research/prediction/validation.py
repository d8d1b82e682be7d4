"""How far the prediction errs, measured on the shipped reference folders (research: the product never imports it).

- leave_one_lease_out: each machine lease's `paper` epochs and speedups predicted from its own probes and the other
  leases' records only, as the predict stage (gpuscale.predict.prediction) would predict that lease; with unseen=True
  each model is also left out of the other leases' records, as a user's own model is predicted; `summarize` pools
  them per device and lease, over all leases and over the leases probed as the tool probes today.
- validation: within each study folder, leave-one-model-out on constants fitted to the records (checks.py), each
  model predicted from the folder's probes alone, and the CPU held out on a layer table; each check beside its noise
  floor (what a perfect model would score, given how far the measurements move between repeats).
- paper_implications / paper_cost_model: what the paper's three published points imply about its hardware.

research/prediction/validate.py runs them and writes results/validation.json and .md, which the report and
docs/prediction.md quote. Torch-free.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import replace
from pathlib import Path

from gpuscale.analyze import paper
from gpuscale.predict import costmodel as cm
from gpuscale.predict import transfer
from gpuscale.predict.transfer import Lease
from research.prediction import checks

MEDIAN_TARGET_PERCENT = 15.0
WORST_TARGET_PERCENT = 35.0
# the checks of a study folder, as suffixes of its rows' source (a plain folder name is the held-out check)
ON_LAYER_TABLE = " (held out, layer table)"
PROBE_ONLY = " (probe only)"
CHECKS = {"": "held out", ON_LAYER_TABLE: "held out, CPU on the layer table", PROBE_ONLY: "probes alone"}


def split_check(source: str) -> tuple[str, str]:
    """A validation row's source as (folder, check name)."""
    for suffix in (ON_LAYER_TABLE, PROBE_ONLY):
        if source.endswith(suffix):
            return source.removesuffix(suffix), CHECKS[suffix]
    return source, CHECKS[""]


# the summary's groups beside each lease: every lease, and the leases whose probes the tool would make the same way now
ALL_LEASES = "all leases"
PROBED_AS_TODAY = "probed as today"
# the same groups where each model was also left out of every other lease's records (leave_one_lease_out(unseen=True)):
# a model no lease measured, as a user's own model is on a lease never measured
UNSEEN = " (the model unmeasured too)"


def leave_one_lease_out(leases: list[Lease], facts: dict[str, cm.ModelFacts], unseen: bool = False) -> list[dict]:
    """Each lease's measured `paper` epochs and speedups predicted from its own probes and the other leases'
    records only, as the predict stage would predict that lease: by transfer where the other leases' probes of the
    device were made the same way (compatible) and measured enough models (enough), else from its probe alone. A
    lease whose probe no other lease's matches is left out (no lease of that kind to check against). unseen: each
    model is also left out of the other leases' records, as a model no lease measured (a user's own) is predicted.
    Rows: lease, model, device (cpu, cuda, speedup), predicted, low, high, measured, error_percent, inside (the
    measured value within the band), shape (model|device|probe), calibration leases, unseen."""
    rows = []
    for target in leases:
        others = [lease for lease in leases if lease.name != target.name]
        per_model: dict[str, dict[str, dict]] = {}
        for o in target.observations:
            if o.model not in facts or o.device not in target.probes:
                continue
            calibration = transfer.compatible(target, others, o.device)
            if unseen:
                calibration = [without(lease, o.model) for lease in calibration]
            if not calibration:
                continue
            batch = math.ceil(o.images / o.steps)
            if transfer.enough(calibration, o.device):
                got = transfer.predict(
                    target.probes[o.device],
                    transfer.shape(calibration, facts, o.device),
                    facts[o.model],
                    o.images,
                    batch,
                )
            else:
                got = transfer.probe_alone(target.probes[o.device], facts[o.model], o.images, batch)
                calibration = []
            got["measured"] = o.epoch_seconds
            per_model.setdefault(o.model, {})[o.device] = got
            rows.append(
                _row(
                    target,
                    o.model,
                    o.device,
                    got["epoch_seconds"],
                    got["low"],
                    got["high"],
                    o.epoch_seconds,
                    got["shape"],
                    calibration,
                    unseen,
                )
            )
        for model, devices in sorted(per_model.items()):
            gpu = next((d for d in devices if d != "cpu"), None)
            if "cpu" in devices and gpu:
                s = transfer.speedup(devices["cpu"], devices[gpu])
                measured = devices["cpu"]["measured"] / devices[gpu]["measured"]
                shapes = {devices["cpu"]["shape"], devices[gpu]["shape"]}
                basis = "model" if shapes == {"model"} else "probe" if "probe" in shapes else "device"
                row = _row(target, model, "speedup", s["speedup"], s["low"], s["high"], measured, basis, others, unseen)
                rows.append(row)
    return rows


def without(lease: Lease, model: str) -> Lease:
    """The lease as if it had never measured `model`."""
    return replace(lease, observations=[o for o in lease.observations if o.model != model])


def _row(target: Lease, model, device, predicted, low, high, measured, basis, calibration, unseen=False) -> dict:
    return {
        "lease": target.name,
        "model": model,
        "device": device,
        "predicted": predicted,
        "low": low,
        "high": high,
        "measured": measured,
        "error_percent": checks.percent_error(predicted, measured),
        "inside": bool(low <= measured <= high),
        "shape": basis,
        "calibration": ",".join(Path(lease.name).name for lease in calibration),
        "probed_as_today": target.probed_as_today(),
        "unseen": unseen,
    }


def summarize(rows: list[dict]) -> list[dict]:
    """Per device (cpu, cuda, speedup) and per lease, all leases and (where some leases' probes were made before a
    fix and some not) the leases probed as today: models, median and worst absolute error, the worst model, and
    how often the measured value fell inside the band. Rows of unseen models (leave_one_lease_out(unseen=True))
    make the same two pooled groups, named with UNSEEN, and no per-lease ones."""
    out = []
    groups: dict[tuple, list[dict]] = {}
    for unseen in (False, True):
        some = [r for r in rows if bool(r.get("unseen")) == unseen]
        tag = UNSEEN if unseen else ""
        for r in some:
            groups.setdefault((r["device"], ALL_LEASES + tag), []).append(r)
            if not unseen:
                groups.setdefault((r["device"], r["lease"]), []).append(r)
        today = [r for r in some if r.get("probed_as_today")]
        if today and len(today) < len(some):
            for r in today:
                groups.setdefault((r["device"], PROBED_AS_TODAY + tag), []).append(r)
    order = {ALL_LEASES: 0, PROBED_AS_TODAY: 1, ALL_LEASES + UNSEEN: 2, PROBED_AS_TODAY + UNSEEN: 3}
    for (device, lease), rs in sorted(groups.items(), key=lambda kv: (kv[0][0], order.get(kv[0][1], 4), kv[0][1])):
        errors = [abs(r["error_percent"]) for r in rs]
        worst = max(rs, key=lambda r: abs(r["error_percent"]))
        out.append(
            {
                "device": device,
                "lease": lease,
                "models": len(rs),
                "median_abs_error_percent": statistics.median(errors),
                "worst_abs_error_percent": max(errors),
                "worst_model": f"{worst['model']} ({Path(worst['lease']).name})",
                "coverage_percent": 100.0 * sum(r["inside"] for r in rs) / len(rs),
            }
        )
    return out


def probe_only(obs: list[cm.Observation], facts: dict[str, cm.ModelFacts], probes: dict[str, dict]) -> list[dict]:
    """Each measured `paper` model predicted from the study's own probe records alone (no records fitted)."""
    cals = {d: cm.from_probe(p) for d, p in probes.items() if p.get("status") == "measured"}
    rows, by_key = [], {(o.model, o.device): o for o in obs if o.variant == "paper"}
    for (model, device), o in sorted(by_key.items()):
        if device not in cals:
            continue
        p = cm.predict_epoch(cals[device], facts[model], o.images, math.ceil(o.images / o.steps))
        rows.append(
            {
                "source": f"{o.source}{PROBE_ONLY}",
                "model": model,
                "device": device,
                "variant": "paper",
                "quantity": "epoch_seconds",
                "predicted": p["epoch_seconds"],
                "measured": o.epoch_seconds,
                "error_percent": checks.percent_error(p["epoch_seconds"], o.epoch_seconds),
                "bound": p["bound"],
                "calibration": "probe",
            }
        )
    for model in sorted({m for m, _ in by_key}):
        cpu = next((r for r in rows if r["model"] == model and r["device"] == "cpu"), None)
        gpu = next((r for r in rows if r["model"] == model and r["device"] == "cuda"), None)
        if cpu and gpu:
            predicted, measured = cpu["predicted"] / gpu["predicted"], cpu["measured"] / gpu["measured"]
            rows.append(
                {
                    **gpu,
                    "device": "speedup",
                    "quantity": "speedup",
                    "predicted": predicted,
                    "measured": measured,
                    "error_percent": checks.percent_error(predicted, measured),
                }
            )
    return rows


def _table_prior(name: str, obs: list[cm.Observation], probes: dict[str, dict[str, dict]]) -> cm.Calibration | None:
    """The CPU probe whose layer table prices a folder, as constants naming where it was made (table_from): the
    folder's own, else (first in the checked order) another checked folder's CPU probe made on the same host
    (fingerprint) as the folder's CPU records; None where neither has one. The table measures isolated layers, not
    any folder's runs, so a probe of the same host from another machine lease may price a folder whose own lease
    had no probe (the table's scale is fitted to the folder's records)."""
    hosts = {o.host_fingerprint for o in obs if o.device == "cpu" and o.host_fingerprint}
    candidates = [(name, (probes.get(name) or {}).get("cpu"))]
    candidates += [
        (other, probe)
        for other, folder_probes in probes.items()
        if other != name
        and (probe := (folder_probes or {}).get("cpu"))
        and probe["environment"].get("host_fingerprint") in hosts
    ]
    for table_from, probe in candidates:
        if probe and probe.get("status") == "measured":
            prior = cm.from_probe(probe)
            if prior.table_seconds_per_image:
                return replace(prior, table_from=table_from)
    return None


def _held_out_on_layer_table(
    name: str, obs: list[cm.Observation], facts: dict[str, cm.ModelFacts], probes: dict, summary: list[dict]
) -> list[dict]:
    """Leave-one-model-out again, the CPU's constants fitted on a CPU probe's layer table of the same host (fixed
    step and the table's scale) instead of FLOPs by kind: a check of its own, '(held out, layer table)'. The
    calibration column names the folder whose probe the table came from."""
    prior = _table_prior(name, obs, probes)
    if prior is None or not obs:
        return []
    source = f"{name}{ON_LAYER_TABLE}"
    paper = [o for o in obs if o.variant == "paper"]  # the table prices `paper` steps; other variants: as held out
    rows = [{**r, "source": source} for r in checks.leave_one_model_out(paper, facts, {("cpu", "paper"): prior})]
    for s in checks.summarize(rows, MEDIAN_TARGET_PERCENT, WORST_TARGET_PERCENT):
        summary.append({"source": source, **s})
    return rows


def validation(
    references: dict[str, list[dict]], facts: dict[str, cm.ModelFacts], probes: dict[str, dict] | None = None
) -> tuple[list, list, list]:
    """Leave-one-model-out per reference study; and, where the study ships probe records (<folder>/probe/
    <device>.json, made on its host), every model predicted from those probes alone and, where the CPU's probe
    has a layer table (or another checked folder has a CPU probe of the same host with one), held out again with the
    CPU fitted on that table. Each check is summarised under its own source."""
    rows, summary, constants, observed = [], [], [], {}
    for name, records in references.items():
        obs = cm.observations(records, name)
        observed.update({(name, o.model, o.device, o.variant): o for o in obs})
        mine = {r["model"]["name"]: cm.facts_from_record(r) for r in records if r.get("model")} | facts
        folder_probes = (probes or {}).get(name) or {}
        held_out = checks.leave_one_model_out(obs, mine)
        for s in checks.summarize(held_out, MEDIAN_TARGET_PERCENT, WORST_TARGET_PERCENT):
            summary.append({"source": name, **s})
        rows += held_out + _held_out_on_layer_table(name, obs, mine, probes or {}, summary)
        if folder_probes:
            alone = probe_only(obs, mine, folder_probes)
            rows += alone
            for s in checks.summarize(alone, MEDIAN_TARGET_PERCENT, WORST_TARGET_PERCENT):
                summary.append({"source": f"{name}{PROBE_ONLY}", **s})
        for device, variant in sorted({(o.device, o.variant) for o in obs}):
            group = [o for o in obs if o.device == device and o.variant == variant]
            cal = cm.fit(group, mine, None, device, variant)
            constants.append({"fitted_on": f"{name} (all models)", **cal.constants()})
    spreads = checks.measured_spreads(references)
    for s in summary:
        s.update(_floor(s, rows, observed, spreads))
    return rows, summary, constants


def _floor(summary: dict, rows: list[dict], observed: dict, spreads: dict) -> dict:
    """What a perfect model would score in this summary's check: its rows' measurements, each as noisy as its
    host's runs move between repeats (checks.measured_spreads; a speedup carries both epochs' noise). `floor_basis`:
    'measured', 'lower bound' (a sampled run priced at the full-epoch spread) or 'unknown' (no floor)."""
    folder = split_check(summary["source"])[0]
    sds, bases = [], set()
    for r in rows:
        if (r["source"], r["device"], r["variant"]) != (summary["source"], summary["device"], summary["variant"]):
            continue
        devices = ("cpu", "cuda") if r["device"] == "speedup" else (r["device"],)
        variance = 0.0
        for device in devices:
            o = observed.get((folder, r["model"], device, r["variant"]))
            spread, basis = checks.spread_for(o, spreads) if o else (None, "unknown")
            bases.add(basis)
            if spread is not None:
                variance += spread.observation_log_sd(o) ** 2
        sds.append(math.sqrt(variance))
    basis = "unknown" if "unknown" in bases or not bases else ("lower bound" if "lower bound" in bases else "measured")
    floor = checks.noise_floor(sds if basis != "unknown" else [], MEDIAN_TARGET_PERCENT, WORST_TARGET_PERCENT)
    return {**floor, "floor_basis": basis}


def paper_implications(references: dict[str, list[dict]], facts: dict[str, cm.ModelFacts]) -> list[dict]:
    """Effective training FLOP/s and images/s of the paper's CPU and GPU per model, beside each reference host."""
    rows = []
    for row in paper.ROWS:
        model = row["model"]
        f = facts.get(model)
        if f is None:
            continue
        for device, seconds in (("cpu", row["cpu_seconds"]), ("cuda", row["gpu_seconds"])):
            epoch = seconds / paper.EPOCHS
            rows.append(
                {
                    "model": model,
                    "device": device,
                    "source": f"paper ({paper.HARDWARE['cpu_short' if device == 'cpu' else 'gpu_short']})",
                    "epoch_seconds": epoch,
                    "images_per_second": 50_000 / epoch,
                    "effective_gflops_per_second": f.train_flops_per_image * 50_000 / epoch / 1e9,
                }
            )
        for name, records in references.items():
            for o in cm.observations(records, name):
                if o.model == model and o.variant == "paper" and o.device in ("cpu", "cuda"):
                    rows.append(
                        {
                            "model": model,
                            "device": o.device,
                            "source": name,
                            "epoch_seconds": o.epoch_seconds,
                            "images_per_second": o.images / o.epoch_seconds,
                            "effective_gflops_per_second": f.train_flops_per_image * o.images / o.epoch_seconds / 1e9,
                        }
                    )
    # Each source's rate on a model relative to its rate on resnet18: a CPU that keeps its rate shows 1.0.
    base = {(r["source"], r["device"]): r["effective_gflops_per_second"] for r in rows if r["model"] == "resnet18"}
    for r in rows:
        ref = base.get((r["source"], r["device"]))
        r["rate_vs_resnet18"] = r["effective_gflops_per_second"] / ref if ref else None
        r["cost_model_epoch_seconds"] = None
    paper_fits = paper_cost_model(facts)
    for r in rows:
        fitted = paper_fits.get(r["device"])
        if fitted and r["source"].startswith("paper"):
            cal = fitted
            r["cost_model_epoch_seconds"] = cm.predict_epoch(cal, facts[r["model"]], 50_000, 128)["epoch_seconds"]
    return rows


def paper_cost_model(facts: dict[str, cm.ModelFacts]) -> dict[str, cm.Calibration]:
    """The cost model's constants (fixed, per-layer, one rate; non-negative) fitted to the paper's three points
    per device, where the model facts give layer counts: how close any hardware of the model's form comes."""
    fits = {}
    for device, column in (("cpu", "cpu_seconds"), ("cuda", "gpu_seconds")):
        obs = [
            cm.Observation("paper", None, r["model"], device, "paper", r[column] / paper.EPOCHS, 50_000, 391, 0.0, 1)
            for r in paper.ROWS
            if r["model"] in facts and facts[r["model"]].layers
        ]
        if len(obs) == len(paper.ROWS):
            fixed, layer, rates = cm._fit_constants(obs, facts, None)
            fits[device] = cm.Calibration(
                device, "paper", "paper's three points", fixed, layer, rates, None, models=tuple(o.model for o in obs)
            )
    return fits


# ----------------------------------------------------------------------------- the whole check, as validate.py runs it

# The shipped lease folders by card: a lease is held out against the other leases of its own card (the predict
# stage takes a shape only from leases of this host, so a card never calibrates another)
CARDS = {
    "H200": [
        "research/reference-archive/h200-2026-12-03-lease",
        "research/reference-archive/h200-2026-12-03-lease2",
        "research/reference-archive/h200-2026-12-03-lease3",
        "reference/h200-2026-12-04",
    ],
    "H100": ["reference/h100-2026-12-05"],
}
PAPER_BESIDE = "reference/h200-2026-12-04"  # the reference study the paper's points are shown beside


def run(cards: dict[str, list[str]] | None = None, facts: dict[str, cm.ModelFacts] | None = None) -> dict:
    """Every check on the folders of each card: leave one lease out (seen and unseen models) per card, pooled;
    leave one model out and the probe alone per folder; the paper's points. Rows of the lease check carry `card`."""
    from gpuscale.predict import prediction as predict

    cards = cards or CARDS
    facts = facts if facts is not None else cm.load_facts()
    skipped: list[dict] = []
    lease_rows, alone = [], []
    for card, folders in cards.items():
        leases = [lease for folder in folders for lease in predict.reference_leases(folder, skipped)]
        for unseen in (False, True):
            lease_rows += [{"card": card, **r} for r in leave_one_lease_out(leases, facts, unseen)]
        alone += [{"card": card, **r} for r in probe_alone_rows(leases, facts)]
    folders = [folder for group in cards.values() for folder in group]
    records = {folder: predict.reference_records(folder, skipped) for folder in folders}
    probes = {
        folder: predict.reference_probes(sorted((Path(folder) / "probe").glob("*.json")), skipped, folder)
        for folder in folders
    }
    rows, summary, constants = validation(records, facts, probes)
    lease_summary = [
        {"card": card, **s} for card in cards for s in summarize([r for r in lease_rows if r["card"] == card])
    ]
    return {
        "cards": cards,
        "transfer": lease_rows,
        "transfer_summary": lease_summary,
        "probe_alone": alone,
        "validation": rows,
        "validation_summary": summary,
        "constants": constants,
        "paper": paper_implications({f: records[f] for f in folders if f == PAPER_BESIDE}, facts),
        "skipped": skipped,
    }


def probe_alone_rows(leases: list[Lease], facts: dict[str, cm.ModelFacts]) -> list[dict]:
    """Each lease's measured `paper` epochs and speedups from its own probes alone (transfer.probe_alone: no
    record of any lease read), with the band the predict stage gives then: what a host no reference lease
    calibrates gets. Rows as leave_one_lease_out's (shape 'probe')."""
    rows = []
    for target in leases:
        per_model: dict[str, dict[str, dict]] = {}
        for o in target.observations:
            if o.model not in facts or o.device not in target.probes:
                continue
            got = transfer.probe_alone(target.probes[o.device], facts[o.model], o.images, math.ceil(o.images / o.steps))
            got["measured"] = o.epoch_seconds
            per_model.setdefault(o.model, {})[o.device] = got
            rows.append(
                _row(
                    target,
                    o.model,
                    o.device,
                    got["epoch_seconds"],
                    got["low"],
                    got["high"],
                    o.epoch_seconds,
                    "probe",
                    [],
                )
            )
        for model, devices in sorted(per_model.items()):
            gpu = next((d for d in devices if d != "cpu"), None)
            if "cpu" in devices and gpu:
                s = transfer.speedup(devices["cpu"], devices[gpu])  # the two epochs' log errors in quadrature
                e = math.hypot(devices["cpu"]["log_error"], devices[gpu]["log_error"])
                low, high = s["speedup"] * math.exp(-e), s["speedup"] * math.exp(e)  # as costmodel.speedup's band
                measured = devices["cpu"]["measured"] / devices[gpu]["measured"]
                rows.append(_row(target, model, "speedup", s["speedup"], low, high, measured, "probe", []))
    return rows


def headline(result: dict) -> list[dict]:
    """The figures the report and docs quote: per card, the speedup and each device's epoch on leases held out,
    for models another lease measured and for a model no lease measured (a user's own): how many, the median and
    worst absolute error, and how often the measured value fell inside the 90% band. Then the same from the probe
    alone (no lease of the host to calibrate it, as on a new user's machine), inside the probe alone's nominal band
    (probe_alone_rows)."""
    out = []
    for s in result["transfer_summary"]:
        if s["lease"] not in (ALL_LEASES, ALL_LEASES + UNSEEN):
            continue
        model = "unmeasured" if s["lease"].endswith(UNSEEN) else "measured on another lease"
        out.append(_headline_row(s["card"], s["device"], model, s["models"], s))
    alone = result.get("probe_alone") or []
    for card in dict.fromkeys(r["card"] for r in alone):
        for s in summarize([r for r in alone if r["card"] == card]):
            if s["lease"] == ALL_LEASES:
                out.append(_headline_row(card, s["device"], "probe alone (no lease of the host)", s["models"], s))
    return out


def _headline_row(card: str, device: str, model: str, count: int, s: dict) -> dict:
    return {
        "card": card,
        "quantity": "speedup" if device == "speedup" else f"{device} epoch",
        "model": model,
        "predictions": count,
        "median_abs_error_percent": round(s["median_abs_error_percent"], 1),
        "worst_abs_error_percent": round(s["worst_abs_error_percent"], 1),
        "inside_band_percent": round(s["coverage_percent"], 0),
    }
