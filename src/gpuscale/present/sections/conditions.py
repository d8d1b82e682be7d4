"""Measurement conditions: the machine state (leases, sentinels, drift, spreads)."""

from __future__ import annotations

import math

import polars as pl

from gpuscale import words
from gpuscale.analyze.tables import KEY_COLUMNS, LOCAL_SOURCE
from gpuscale.contract import conditions as machine
from gpuscale.present import sessions
from gpuscale.present.columns import heading
from gpuscale.present.page import UNKNOWN_LEASE, Page, _by_flops, _cell, _lease_short, speedup_interval, table

ID = "conditions"
NAV = "Measurement conditions"
CHARTS = {}  # its charts (gpuscale.words.CHART_NAMES), each with the words under it
TEMPLATE = """\
<section id="conditions">
<h2>Measurement conditions: the machine state</h2>
<p>A speedup divides a CPU timing by a GPU timing; on a rented machine the host's speed moves from lease to lease
(boot to boot) and within one, in minutes. So CPU and GPU are paired within one lease (report.pairing:
{{ conditions.pairing }}), a sentinel before and after every job records the machine's level as a witness (never a
correction), and every figure's spread between epochs, rounds, seeds and leases is shown on its own.</p>
<details><summary>This section's words, defined exactly ({{ conditions.glossary|map(attribute=0)|join(', ') }})</summary>
<dl class="glossary">{% for term, meaning in conditions.glossary %}<div><dt>{{ term }}:</dt> <dd>{{ meaning }}</dd></div>{% endfor %}</dl></details>
<ul>{% for line in conditions.summary %}<li>{{ line }}</li>{% endfor %}</ul>
{% if conditions.skipped %}<p>Records left out of every figure ({{ conditions.skipped|length }}), each with why:</p>
<ul class="skipped">{% for line in conditions.skipped %}<li>{{ line }}</li>{% endfor %}</ul>{% endif %}
{% for g in conditions.pairing_groups %}<details><summary>{{ g.title }} ({{ g.lines|length }})</summary>
<ul>{% for line in g.lines %}<li>{{ line }}</li>{% endfor %}</ul>
</details>{% endfor %}
{% if conditions.drift %}<details><summary>Records whose machine drifted during the job (table, {{ conditions.drift.rows|length }} rows)</summary>
{{ data_table(conditions.drift, pin_first=True) }}
</details>{% endif %}
{% if conditions.spreads %}<details><summary>Spread between epochs, rounds, seeds and leases, per model (table)</summary>
{{ data_table(conditions.spreads, pin_first=True) }}
{% for m in conditions.marks %}<p class="definition">{{ m }}.</p>{% endfor %}
</details>{% endif %}
{% if conditions.leases %}<details><summary>Machine leases and their sentinels (tables)</summary>
{{ data_table(conditions.leases) }}
{% if conditions.sentinels %}{{ data_table(conditions.sentinels, tall=True) }}{% else %}<p>No record carries a sentinel
(records made before schema 4): each lease's level is not known.</p>{% endif %}
</details>{% endif %}
</section>"""  # noqa: E501 (the page's markup, line for line)


def context(page: Page) -> dict:
    return {"conditions": conditions_section(page.tables)}


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
        text += f"; all {c['speedups']} speedups within one lease"
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
    note = "; ".join(f"{heading(c)} {_cell(c, frame[c][0])}" for c in same)
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
            + sessions.in_text(r["pairing_reason"])  # analyze quotes boot ids; the page names sessions
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
        "skipped": skipped_lines(tables),
    }


def skipped_lines(tables: dict) -> list[str]:
    """One line per record the aggregation skipped (a bad record of a reference folder, or of the study's own
    under report.skip_bad_records): its file and why, as its warning said it."""
    return [
        " ".join(f"skipped record {s['path']} ({words.source_short(s['source'])}): {s['reason']}".split())
        for s in tables.get("skipped_records", [])
    ]
