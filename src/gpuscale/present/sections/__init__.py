"""The report's sections, one module each, and the page's order: answer (this host first, then the key results),
explain, prove (collapsed).

A section module names its `ID` (its anchor), `NAV` (its line in the contents), `CHARTS` (the charts it shows, each
with the words under it), `TEMPLATE` (its Jinja markup: it sees the page's names, the macros `data_table` and
`figure`, and what its `context` returns) and `context(page)`: the names its template reads, or None to leave the
section out of the page. Adding a section is one module here and one line in PAGE.
"""

from __future__ import annotations

from gpuscale.present.sections import (
    appendix,
    checks,
    conditions,
    headline,
    host,
    key,
    predicted,
    speedup,
    sweeps,
    usage,
    why,
)

PAGE = [
    host,
    key,
    speedup,
    headline,
    why,
    predicted,
    usage,
    sweeps,
    conditions,
    checks,
    appendix,
]
