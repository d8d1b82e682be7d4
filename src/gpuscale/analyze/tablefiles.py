"""Which tables the aggregation writes, and their files: the names alone, without polars, so the Snakefile (its
output lists) and gpuscale.deps (dvc.yaml's) read them at parse time for free. gpuscale.analyze.tables holds the
rest of the contract (columns, types, reading and writing) and exports these names as its own."""

from __future__ import annotations

TABLES = ("runs", "epochs", "speedup", "fits", "phases", "gains", "sweeps", "sampling", "scaling", "conditions")
NOTES = "notes.json"


def outputs(folder: str = "results/tables") -> dict[str, str]:
    """Every file the aggregation writes into `folder`, by output name (NAME, NAME_parquet, notes)."""
    out = {}
    for name in TABLES:
        out[name] = f"{folder}/{name}.csv"
        out[f"{name}_parquet"] = f"{folder}/{name}.parquet"
    out["notes"] = f"{folder}/{NOTES}"
    return out
