"""What every section of the report shares: the page's inputs, a table as the reader reads it, a speedup's chip."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import polars as pl
from markupsafe import Markup, escape

from gpuscale import words
from gpuscale.analyze.tables import LOCAL_SOURCE
from gpuscale.contract.settings import Params
from gpuscale.present import columns as columns_
from gpuscale.present import sessions
from gpuscale.present.columns import Column


@dataclass(frozen=True)
class Page:
    """The inputs every section's context reads."""

    tables: dict
    params: Params
    pred: dict | None  # the predict stage's tables (sections.predicted.load_predictions), or None
    out_dir: Path | None  # where the page goes: records are linked relative to it
    params_files: list[Path]


STEADY_DIFFERS = 1.25  # show the steady speedup where it differs from the whole-run one by this factor or more


def _cell(key: str, value) -> str:
    """One table cell as a reader reads it: its column's declared format (gpuscale.present.columns)."""
    return columns_.column(key).cell(value)


def table(
    name: str,
    caption: str,
    frame: pl.DataFrame,
    columns: list[str | Column] | None = None,
    links: dict[str, list[str | None]] | None = None,
) -> dict:
    """A table for the template: caption, header words, formatted cells, the CSV of the whole frame. A column is a
    data key (its declaration in gpuscale.present.columns) or a Column declared by the caller."""
    declared = [c if isinstance(c, Column) else columns_.column(c) for c in (columns or frame.columns)]
    rows = []
    for i, row in enumerate(frame.select([c.key for c in declared]).iter_rows(named=True)):
        cells = []
        for c in declared:
            href = (links or {}).get(c.key, [None] * frame.height)[i]
            cells.append({"text": c.cell(row[c.key]), "href": href})
        rows.append(cells)
    return {
        "name": name,
        "caption": caption,
        "header": [c.heading for c in declared],
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
    """A lease as the page names it: its date and letter (present.sessions), never its boot id."""
    return sessions.name(lease)


_GLOSSED = re.compile(
    r"(?<![\w-])(" + "|".join(re.escape(w) for w, _ in words.GLOSSED) + r")(?![\w-])", flags=re.IGNORECASE
)


def gloss(text) -> Markup:
    """Text for the page (escaped) with each project term (words.GLOSSED) wrapped in an <abbr> whose title is its
    one-line meaning (words.GLOSSARY), so a reader meets no term unexplained; a boot id quoted in it becomes its
    session's name."""
    by_word = {w.lower(): term for w, term in words.GLOSSED}

    def wrap(m: re.Match) -> str:
        meaning = words.GLOSSARY[by_word[m.group(1).lower()]]
        return f'<abbr title="{escape(meaning)}">{m.group(1)}</abbr>'

    return Markup(_GLOSSED.sub(wrap, str(escape(sessions.in_text(str(text))))))
