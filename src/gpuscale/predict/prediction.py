"""The predict stage: probe records + model facts + reference records -> prediction tables (torch-free).

Writes, under results/predict/ (each table as .csv to read and .json for the report):
- host: predicted CPU and GPU epoch seconds and the speedup (with its band) of every registry model on
  this host, from its probe records (refined by reference records of the same host, if any);
- validation: leave-one-model-out on each reference study, one row per (model, device, variant) and per
  speedup; validation_summary: median and worst absolute error per device and variant, against targets;
- constants: every constant of every calibration used (probe-only, and fitted on each reference study);
- paper: what the paper's three published points imply about its hardware, beside the reference host;
- skipped: each bad record (run or probe) of a reference or validation folder, left out with a warning: its source,
  file and why (the report's conditions list it); a bad probe of the user's own stops the stage instead.
`tables()` reads them back, ready to render.
"""

from __future__ import annotations

import csv
import io
import json
import logging
import math
from dataclasses import replace
from importlib import resources
from pathlib import Path

from gpuscale import devices, words
from gpuscale.analyze import paper
from gpuscale.contract import fsutil, recordcheck, recordset
from gpuscale.contract import record as record_mod
from gpuscale.predict import checks, transfer
from gpuscale.predict import costmodel as cm

log = logging.getLogger("gpuscale.predict")

TABLES = ("host", "validation", "validation_summary", "constants", "paper", "transfer", "transfer_summary", "skipped")
MEDIAN_TARGET_PERCENT = 15.0
WORST_TARGET_PERCENT = 35.0
GPU_DEVICES = devices.GPU_KINDS  # the kinds that are GPUs (gpuscale.devices), read when asked


def load_records(folder: Path) -> list[dict]:
    """The run records under `folder` (contract.record.files: not the probe records beside them)."""
    return [record_mod.load(p) for p in record_mod.files(folder)]


def load_probes(paths: list[Path]) -> dict[str, dict]:
    """Probe records by device, each read as data from outside (gpuscale.contract.recordcheck: a regular file,
    finite figures, each key once) and checked against contract/schemas/probe-record.schema.json (torch-free)."""
    import jsonschema

    schema = json.loads(resources.files("gpuscale").joinpath("contract/schemas/probe-record.schema.json").read_text())
    probes = {}
    for path in paths:
        try:
            probe = recordcheck.read_json(Path(path), "probe record", recordcheck.PROBE_MAX_BYTES)
        except recordcheck.BadValue as err:
            raise cm.CostModelError(str(err)) from None
        if not isinstance(probe, dict) or probe.get("kind") != "gpuscale.probe":
            raise cm.CostModelError(f"{path}: not a probe record")
        error = jsonschema.exceptions.best_match(jsonschema.Draft7Validator(schema).iter_errors(probe))
        if error is not None:
            where = ".".join(str(p) for p in error.absolute_path) or "(top level)"
            raise cm.CostModelError(f"{path}: {where}: {error.message}")
        probes[probe["device"]] = probe
    return probes


def _skip(skipped: list[dict], source: str, path: Path, reason: str) -> None:
    """List a bad record of a reference folder once (a folder is read more than once), with one warning."""
    if all(s["path"] != str(path) for s in skipped):
        log.warning("skipped a bad record of %s: %s", source, reason)
        skipped.append({"source": source, "path": str(path), "reason": reason})


def source_of(folder: Path | str) -> str:
    """A reference folder as the aggregate stage names it among the sources ('reference: <folder name>')."""
    return f"reference: {Path(folder).name}"


def _read_reference(folder: Path | str, skipped: list[dict], source: str) -> list[tuple[Path, dict]]:
    """(path, record) of a reference or validation folder's run records, read as the aggregate stage reads them
    (gpuscale.contract.recordset): the folder is data from outside that the user did not make, so a bad record is
    skipped and listed in `skipped`, not a stop, and both stages skip the same files."""
    return recordset.read_lenient(
        source, record_mod.files(Path(folder)), lambda path, why: _skip(skipped, source, path, why)
    )


def reference_records(folder: Path | str, skipped: list[dict], source: str | None = None) -> list[dict]:
    """The good run records under a reference or validation folder (bad ones skipped and listed)."""
    return [rec for _, rec in _read_reference(folder, skipped, source or source_of(folder))]


def reference_probes(paths: list[Path], skipped: list[dict], source: str) -> dict[str, dict]:
    """A reference folder's probe records by device; a bad one is skipped and listed, as a bad run record is."""
    out = {}
    for path in paths:
        try:
            out.update(load_probes([path]))
        except cm.CostModelError as err:
            _skip(skipped, source, Path(path), str(err))
    return out


def reference_leases(folder: Path | str, skipped: list[dict]) -> list[transfer.Lease]:
    """The leases of a reference folder (gpuscale.predict.transfer.leases_of), its bad records skipped and listed.
    The folder is read once as a whole, so a record is checked against all of its folder's, not its lease's only."""
    source = source_of(folder)
    read = [(path.resolve(), rec) for path, rec in _read_reference(folder, skipped, source)]  # each path once

    def records_of(unit: Path) -> list[dict]:
        unit = Path(unit).resolve()
        return [rec for path, rec in read if unit in path.parents]

    return transfer.leases_of(folder, records_of, lambda paths: reference_probes(paths, skipped, source))


def _facts(records: list[dict], facts: dict[str, cm.ModelFacts]) -> dict[str, cm.ModelFacts]:
    merged = {r["model"]["name"]: cm.facts_from_record(r) for r in records if r.get("model")}
    merged.update(facts)  # modelfacts.json wins: it knows kinds and layers
    return merged


def _round(row: dict) -> dict:
    return {k: (round(v, 6) if isinstance(v, float) and math.isfinite(v) else v) for k, v in row.items()}


def host_predictions(
    probes: dict[str, dict],
    facts: dict[str, cm.ModelFacts],
    models: list[str],
    references: dict[str, list[dict]],
    images: int,
    batch_size: int,
    leases: list[transfer.Lease] | None = None,
) -> tuple[list[dict], list[dict]]:
    """Per registry model and probed device: predicted epoch; per model: speedup cpu / gpu. And the constants.

    Where leases of this host (fingerprint) with probes made the same way hold measured records, each device is
    predicted by transfer (this lease's probe sets the level, those leases' records the shape: predict/transfer.py);
    otherwise from the probe alone. Records never set this lease's level."""
    calibrations = host_calibrations(probes, facts, references)
    shapes = host_shapes(probes, facts, leases or [])
    rows = []
    for model in models:
        if model in facts:
            rows += _model_predictions(model, facts[model], calibrations, images, batch_size, probes, shapes)
    constants = [{"fitted_on": "this host's probe", **c.constants()} for c in calibrations.values()]
    return rows, constants


def host_shapes(
    probes: dict[str, dict], facts: dict[str, cm.ModelFacts], leases: list[transfer.Lease]
) -> dict[str, transfer.Shape]:
    """Per probed device: the shape of the leases of the same host whose probe was made the same way, where they
    measured enough models (transfer.enough; else none: the probe alone)."""
    shapes = {}
    for device, probe in probes.items():
        if probe.get("status") != "measured":
            continue
        fingerprint = probe["environment"].get("host_fingerprint")
        lease = (probe.get("conditions") or {}).get("lease")
        same_host = [
            x
            for x in leases
            if device in x.probes
            and x.probes[device]["environment"].get("host_fingerprint") == fingerprint
            and (lease in (None, "unknown") or (x.probes[device].get("conditions") or {}).get("lease") != lease)
        ]
        calibration = transfer.compatible(probe, same_host, device)
        if calibration and transfer.enough(calibration, device):
            shapes[device] = transfer.shape(calibration, facts, device)
    return shapes


def host_calibrations(
    probes: dict[str, dict], facts: dict[str, cm.ModelFacts], references: dict[str, list[dict]]
) -> dict[str, cm.Calibration]:
    """Per measured probe: its constants (the level of this lease; records of other leases never refit them)."""
    calibrations: dict[str, cm.Calibration] = {}
    for device, probe in sorted(probes.items()):
        if probe.get("status") != "measured":
            log.info("probe of %s not measured (%s): no prediction for it", device, probe.get("not_measured_reason"))
            continue
        calibrations[device] = cm.from_probe(probe)
    return calibrations


def _device_prediction(f, cal, shape, probe, images: int, batch_size: int) -> tuple[dict, str]:
    """One device's predicted epoch with its band, and how it was made: by transfer where the device has a shape
    (predict/transfer.py), else from the probe alone with the calibration's nominal error."""
    if shape is not None:
        p = transfer.predict(probe, shape, f, images, batch_size)
        by = ", by layers per op" if p["target"] == "layers per op" else ""  # the line the shape follows (transfer)
        return p, f"this lease's probe x the shape of {len(shape.leases)} leases ({p['shape']}{by})"
    return transfer.probe_alone(probe, f, images, batch_size), cal.source  # as leave-one-lease-out prices it


def _model_predictions(
    model: str,
    f: cm.ModelFacts,
    calibrations: dict[str, cm.Calibration],
    images: int,
    batch_size: int,
    probes: dict[str, dict],
    shapes: dict[str, transfer.Shape],
) -> list[dict]:
    """One model's predicted epoch per calibrated device (by transfer where the device has a shape, else from the
    probe alone), and its speedup where a CPU and a GPU are calibrated."""
    rows, per_device = [], {}
    for device, cal in calibrations.items():
        p, how = _device_prediction(f, cal, shapes.get(device), probes[device], images, batch_size)
        per_device[device] = p
        rows.append(
            {
                "model": model,
                "device": device,
                "variant": "paper",
                "quantity": "epoch_seconds",
                "predicted": p["epoch_seconds"],
                "low": p["low"],
                "high": p["high"],
                "bound": p["bound"],
                "calibration": how,
                "label": "prediction",
            }
        )
    gpu = next((d for d in per_device if d.split("-")[0] in GPU_DEVICES), None)
    if "cpu" in per_device and gpu:
        cpu_row, gpu_row = rows[list(per_device).index("cpu")], rows[list(per_device).index(gpu)]
        if shapes.get("cpu") or shapes.get(gpu):
            s = transfer.speedup(per_device["cpu"], per_device[gpu])
            value, low, high = s["speedup"], s["low"], s["high"]
        else:
            s = cm.speedup(per_device["cpu"], per_device[gpu], calibrations["cpu"], calibrations[gpu])
            value, low, high = s["speedup"], s["speedup_low"], s["speedup_high"]
        rows.append(
            {
                "model": model,
                "device": f"speedup ({gpu} over cpu)",
                "variant": "paper",
                "quantity": "speedup",
                "predicted": value,
                "low": low,
                "high": high,
                "bound": per_device[gpu]["bound"],
                "calibration": f"{cpu_row['calibration']} / {gpu_row['calibration']}",
                "label": "prediction",
            }
        )
    return rows


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
                "source": f"{o.source}{words.PROBE_ONLY}",
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
    source = f"{name}{words.ON_LAYER_TABLE}"
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
        mine = _facts(records, facts)
        folder_probes = (probes or {}).get(name) or {}
        held_out = checks.leave_one_model_out(obs, mine)
        for s in checks.summarize(held_out, MEDIAN_TARGET_PERCENT, WORST_TARGET_PERCENT):
            summary.append({"source": name, **s})
        rows += held_out + _held_out_on_layer_table(name, obs, mine, probes or {}, summary)
        if folder_probes:
            alone = probe_only(obs, mine, folder_probes)
            rows += alone
            for s in checks.summarize(alone, MEDIAN_TARGET_PERCENT, WORST_TARGET_PERCENT):
                summary.append({"source": f"{name}{words.PROBE_ONLY}", **s})
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
    folder = words.split_check(summary["source"])[0]
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


def write_table(out: Path, name: str, rows: list[dict]) -> None:
    rows = [_round(r) for r in rows]
    fsutil.write_json(out / f"{name}.json", rows)
    columns: list[str] = []
    for r in rows:
        columns += [k for k in r if k not in columns]
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=columns, lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    fsutil.write_text(out / f"{name}.csv", buffer.getvalue())


def run(
    probe_paths: list[Path],
    reference_folders: list[str],
    out: Path,
    models: list[str],
    images: int = 50_000,
    batch_size: int = 128,
    facts_path: Path | None = None,
    validation_folders: list[str] | None = None,
) -> dict[str, list[dict]]:
    """The prediction tables. The cost model is checked on the reference folders and on validation_folders
    (record folders that are not shown as sources: e.g. one machine lease's runs with its probes)."""
    facts = cm.load_facts(facts_path)
    if not facts:
        log.warning(
            "no model facts file (%s): the records' total FLOPs stand in (no layer counts, no FLOPs by kind)",
            facts_path or cm.FACTS_FILE,
        )
    skipped: list[dict] = []
    references = {str(folder): reference_records(folder, skipped) for folder in reference_folders}
    reference_facts = _facts([r for rs in references.values() for r in rs], facts)
    probes = load_probes(probe_paths)
    checked = list(dict.fromkeys([*map(str, reference_folders), *map(str, validation_folders or [])]))
    for folder in checked:
        if not Path(folder).is_dir():
            raise cm.CostModelError(
                f"{folder}: no such folder (report.reference / predict.validate_on); restore it or take it out"
            )
    leases = [lease for folder in checked for lease in reference_leases(folder, skipped)]
    host, host_constants = host_predictions(probes, reference_facts, models, references, images, batch_size, leases)
    checked_records = {folder: references.get(folder) or reference_records(folder, skipped) for folder in checked}
    folder_probes = {
        folder: reference_probes(sorted((Path(folder) / "probe").glob("*.json")), skipped, source_of(folder))
        for folder in checked
    }
    rows, summary, ref_constants = validation(checked_records, facts, folder_probes)
    paper_constants = [
        {"fitted_on": "the paper's three points", **c.constants()} for c in paper_cost_model(reference_facts).values()
    ]
    result = {
        "host": host,
        "validation": rows,
        "validation_summary": summary,
        "constants": host_constants + ref_constants + paper_constants,
        "paper": paper_implications(references, reference_facts),
        # each lease held out, then each lease and each model (as a user's own model on a lease never measured)
        "transfer": [
            _round(r) for unseen in (False, True) for r in transfer.leave_one_lease_out(leases, reference_facts, unseen)
        ],
    }
    result["transfer_summary"] = [_round(r) for r in transfer.summarize(result["transfer"])]
    result["skipped"] = skipped
    _write_all(out, result, summary)
    return result


def _write_all(out: Path, result: dict[str, list[dict]], summary: list[dict]) -> None:
    """Every table into `out`, swapped in whole, and the validation summary's lines in the log."""
    with fsutil.atomic_directory(out) as folder:  # the set swapped in whole: a half-written one is never read
        for name, table in result.items():
            write_table(folder, name, table)
    for s in summary:
        log.info(
            "%s %s %s: median %.1f%%, worst %.1f%% (%s)",
            s["source"],
            s["device"],
            s["variant"],
            s["median_abs_error_percent"],
            s["worst_abs_error_percent"],
            s["worst_model"],
        )


def tables(folder: Path | str = "results/predict") -> dict[str, list[dict]]:
    """The prediction tables as lists of rows, ready to render; a missing table is an empty list."""
    folder = Path(folder)
    return {
        name: json.loads((folder / f"{name}.json").read_text()) if (folder / f"{name}.json").exists() else []
        for name in TABLES
    }


def host_beside_reference(folder: Path | str = "results/predict") -> list[dict]:
    """One row per registry model: this host's predicted epochs and speedup (band included), beside each
    reference study's measured ones (the validation rows' `measured`). Columns: model, then
    predicted_{cpu,gpu}_epoch_seconds, predicted_speedup, predicted_speedup_low/high, bound, and per reference
    `<source>: cpu_epoch_seconds`, `<source>: gpu_epoch_seconds`, `<source>: speedup` (None where not measured)."""
    got = tables(folder)
    rows: dict[str, dict] = {}
    for r in got["host"]:
        row = rows.setdefault(r["model"], {"model": r["model"]})
        if r["quantity"] == "speedup":
            row.update(
                predicted_speedup=r["predicted"],
                predicted_speedup_low=r["low"],
                predicted_speedup_high=r["high"],
                bound=r["bound"],
            )
        else:
            side = "cpu" if r["device"] == "cpu" else "gpu"
            row[f"predicted_{side}_epoch_seconds"] = r["predicted"]
    for r in got["validation"]:
        if r["variant"] != "paper" or r["model"] not in rows:
            continue
        name = {"cpu": "cpu_epoch_seconds", "speedup": "speedup"}.get(r["device"], "gpu_epoch_seconds")
        rows[r["model"]][f"{r['source']}: {name}"] = r["measured"]
    return list(rows.values())
