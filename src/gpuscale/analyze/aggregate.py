"""The aggregation stage: run records -> Polars tables, metrics and fits.

Reads every record through gpuscale.contract.record.load() (which upgrades older schema versions, so no fallbacks
across versions here); writes the tables of gpuscale.analyze.tables to results/tables
as CSV (to read) and Parquet (typed, for the charts and the report), notes.json and results/metrics.json.
Output is deterministic: rows sorted, columns in a fixed order, so rerunning on the same records changes no byte.
"""

from __future__ import annotations

import logging
import math
import os
from pathlib import Path

import polars as pl

from gpuscale.analyze import metrics as metrics_mod
from gpuscale.analyze import tables
from gpuscale.analyze.fits import fits, scaling_frame, sweeps_frame, variant_gains
from gpuscale.analyze.runs import conditions_frame, epochs_frame, phases_frame, runs_frame, sampling_frame
from gpuscale.analyze.speedup import SAME_LEASE, speedup_frame

# The table contract lives in gpuscale.analyze.tables; these names stay importable from here for one release.
from gpuscale.analyze.tables import (  # noqa: F401
    EPOCH_SCHEMA,
    FIT_LABELS,
    FITS_SCHEMA,
    KEY_COLUMNS,
    LOCAL_SOURCE,
    PAPER_SOURCE,
    PHASE_SCHEMA,
    RUN_SCHEMA,
    SAMPLING_SCHEMA,
    SCALING_SCHEMA,
    TABLES,
    Fit,
    paper_frame,
    read_tables,
)
from gpuscale.contract import record, recordset

log = logging.getLogger("gpuscale.analyze.aggregate")


class AggregateError(RuntimeError):
    """Records that cannot be aggregated; str() names the file(s)."""


def find_records(folder: Path) -> list[Path]:
    return record.files(folder)


def linked_folders(folder: Path) -> list[dict]:
    """The links to folders under a reference folder, which the record listing does not follow (a link could lead
    out of the project, or back into the folder): each one named, so its records are not silently left out."""
    found = []
    for parent, names, _ in os.walk(folder):
        found += [
            {"path": str(Path(parent, n)), "reason": "a link to a folder, not followed; copy its records in instead"}
            for n in sorted(names)
            if Path(parent, n).is_symlink()
        ]
    return found


def load_all(
    sources: dict[str, list[Path]], skip_bad: bool = False, lenient: tuple[str, ...] = ()
) -> tuple[list[tuple[str, Path, dict]], list[dict]]:
    """(source, path, record) for every listed record, and the skipped ones. A record is data from outside, read
    through gpuscale.contract.recordset (it must read, lie where its key says and not repeat a run of its lease; one
    source's runs of one key come from one host). A bad record in a `lenient` source (a reference folder) is skipped
    and listed (the report shows it); in the study's own records it stops the stage unless skip_bad."""
    loaded, skipped = [], []
    reader = recordset.RecordSet()
    for source, paths in sources.items():
        for path in paths:
            try:
                rec = reader.read(source, path)
            except recordset.BAD_RECORD as err:
                if not (skip_bad or source in lenient):
                    raise AggregateError(f"{err} (fix or remove it, or set report.skip_bad_records: true)") from None
                log.warning("skipped a bad record of %s: %s", source, err)
                skipped.append({"source": source, "path": str(path), "reason": str(err)})
                continue
            loaded.append((source, path, rec))
    return loaded, skipped


def overlaps(runs: pl.DataFrame) -> list[dict]:
    """Timing runs on one host whose [started_at, finished_at] intervals intersect (made by hand, not by the
    workflow)."""
    measured = runs.filter(pl.col("status") == "measured").select(
        "source",
        "hostname",
        "model",
        "device",
        "variant",
        "seed",
        pl.col("started_at").str.to_datetime(time_zone="UTC"),
        pl.col("finished_at").str.to_datetime(time_zone="UTC"),
    )
    found = []
    for (source, host), frame in measured.group_by(["source", "hostname"], maintain_order=True):
        items = frame.sort("started_at").to_dicts()
        for i, a in enumerate(items):
            for b in items[i + 1 :]:
                if b["started_at"] < a["finished_at"]:
                    found.append(
                        {
                            "source": source,
                            "host": host,
                            "runs": [f"{r['model']}/{r['device']}/{r['variant']}/seed{r['seed']}" for r in (a, b)],
                        }
                    )
    return found


def _clean(value):
    if isinstance(value, float) and (math.isnan(value) or math.isinf(value)):
        return None
    if isinstance(value, dict):
        return {k: _clean(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_clean(v) for v in value]
    return value


def run(
    records: list[Path],
    reference: list[str],
    out_dir: Path,
    metrics_path: Path,
    tolerance: float,
    skip_bad: bool = False,
    pairing: str = SAME_LEASE,
) -> dict:
    """Aggregate this host's records (the study's, listed) and every record under each reference folder."""
    sources = {LOCAL_SOURCE: [Path(p) for p in records]}
    linked = []
    for folder in reference:
        if not Path(folder).is_dir():
            raise AggregateError(f"report.reference: {folder} is not a folder (list folders under reference/)")
        # A reference folder is one host's measurements: never paired with this host's runs.
        sources[f"reference: {Path(folder).name}"] = find_records(Path(folder))
        linked += [{"source": f"reference: {Path(folder).name}", **entry} for entry in linked_folders(Path(folder))]
    for entry in linked:
        log.warning("skipped in %s: %s: %s", entry["source"], entry["path"], entry["reason"])
    loaded, skipped = load_all(sources, skip_bad=skip_bad, lenient=tuple(s for s in sources if s != LOCAL_SOURCE))
    skipped = linked + skipped
    runs = runs_frame(loaded)
    epochs = epochs_frame(loaded)
    speedup = speedup_frame(runs, tolerance, pairing)
    phases = phases_frame(loaded)
    gains = variant_gains(runs)
    sweeps = sweeps_frame(runs)
    sampling = sampling_frame(loaded)
    scaling = scaling_frame(runs)
    fit_table, summary = fits(speedup, sweeps)
    out_dir = Path(out_dir)
    frames = {
        "runs": runs,
        "epochs": epochs,
        "speedup": speedup,
        "fits": fit_table,
        "phases": phases,
        "gains": gains,
        "sweeps": sweeps,
        "sampling": sampling,
        "scaling": scaling,
        "conditions": conditions_frame(loaded),
    }
    extras = {
        "skipped_records": skipped,
        "overlapping_runs": overlaps(runs),
        "fit_summary": _clean(summary),
        "sources": {k: len(v) for k, v in sources.items()},
        "pairing": pairing,
    }
    tables.write_tables(frames, extras, out_dir)
    metrics_mod.write(metrics_path, speedup.filter(pl.col("source") == LOCAL_SOURCE).to_dicts())  # this host only
    log.info(
        "aggregated %d records (%d skipped) from %d source(s) -> %s", len(loaded), len(skipped), len(sources), out_dir
    )
    return {**frames, **extras}
