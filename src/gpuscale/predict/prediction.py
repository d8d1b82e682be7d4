"""The predict stage: probe records + model facts + reference records -> this host's prediction tables (torch-free).

Writes, under results/predict/ (each table as .csv to read and .json for the report):
- host: predicted CPU and GPU epoch seconds and the speedup, each with its band, of every study and registry model
  on this host: each device's level from its own probe (costmodel.from_probe), and where leases of the same host
  (fingerprint) in the reference folders measured enough models, their shape and band (predict/transfer.py);
- constants: the constants each probe gave the cost model;
- skipped: each bad record (run or probe) of a reference folder, left out with a warning: its source, file and why
  (the report's conditions list it); a bad probe of the user's own stops the stage instead.
`tables()` reads them back, ready to render. How far these predictions erred on leases held out is measured in
research/prediction/ (validate.py), whose committed result the report and docs quote.
"""

from __future__ import annotations

import csv
import io
import json
import logging
import math
from importlib import resources
from pathlib import Path

from gpuscale import devices
from gpuscale.contract import fsutil, recordcheck, recordset
from gpuscale.contract import record as record_mod
from gpuscale.predict import costmodel as cm
from gpuscale.predict import transfer

log = logging.getLogger("gpuscale.predict")

TABLES = ("host", "constants", "skipped")
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
) -> dict[str, list[dict]]:
    """The prediction tables of this host: its probes priced by the cost model, each device's level from its own
    probe and, where leases of the same host in the reference folders measured enough models, their shape and
    band (predict/transfer.py). How far the method erred on held-out leases is research's to measure
    (research/prediction/validate.py), not this stage's."""
    facts = cm.load_facts(facts_path)
    if not facts:
        log.warning(
            "no model facts file (%s): the records' total FLOPs stand in (no layer counts, no FLOPs by kind)",
            facts_path or cm.FACTS_FILE,
        )
    for folder in reference_folders:
        if not Path(folder).is_dir():
            raise cm.CostModelError(f"{folder}: no such folder (report.reference); restore it or take it out")
    skipped: list[dict] = []
    references = {str(folder): reference_records(folder, skipped) for folder in reference_folders}
    reference_facts = _facts([r for rs in references.values() for r in rs], facts)
    probes = load_probes(probe_paths)
    leases = [lease for folder in reference_folders for lease in reference_leases(folder, skipped)]
    host, constants = host_predictions(probes, reference_facts, models, references, images, batch_size, leases)
    result = {"host": host, "constants": constants, "skipped": skipped}
    with fsutil.atomic_directory(out) as folder:  # the set swapped in whole: a half-written one is never read
        for name, table in result.items():
            write_table(folder, name, table)
    return result


def tables(folder: Path | str = "results/predict") -> dict[str, list[dict]]:
    """The prediction tables as lists of rows, ready to render; a missing table is an empty list."""
    folder = Path(folder)
    return {
        name: json.loads((folder / f"{name}.json").read_text()) if (folder / f"{name}.json").exists() else []
        for name in TABLES
    }


def host_by_model(host: list[dict]) -> list[dict]:
    """One row per model of the host table: predicted_{cpu,gpu}_epoch_seconds with their bands
    (predicted_{cpu,gpu}_low/high), predicted_speedup with predicted_speedup_low/high, and the GPU's bound."""
    rows: dict[str, dict] = {}
    for r in host:
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
            row[f"predicted_{side}_low"] = r["low"]
            row[f"predicted_{side}_high"] = r["high"]
            row.setdefault("bound", r["bound"])
    return list(rows.values())
