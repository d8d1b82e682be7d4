"""What every section of the report shares: the page's inputs, a table as the reader reads it, a speedup's chip."""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import polars as pl

from gpuscale import words
from gpuscale.analyze.tables import LOCAL_SOURCE
from gpuscale.contract import conditions as machine
from gpuscale.contract.settings import Params


@dataclass(frozen=True)
class Page:
    """The inputs every section's context reads."""

    tables: dict
    params: Params
    pred: dict | None  # the predict stage's tables (sections.predicted.load_predictions), or None
    out_dir: Path | None  # where the page goes: records are linked relative to it
    params_files: list[Path]


STEADY_DIFFERS = 1.25  # show the steady speedup where it differs from the whole-run one by this factor or more


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


def table_if_rows(name: str, caption: str, frame: pl.DataFrame) -> dict | None:
    """`table`, or None where the frame has no rows: the section's template then leaves the table out."""
    return None if frame.is_empty() else table(name, caption, frame)


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


UNKNOWN_LEASE = "unknown"


def _lease_short(lease: str | None) -> str:
    return "not recorded" if lease in (None, UNKNOWN_LEASE) else f"{lease[:8]}…"
