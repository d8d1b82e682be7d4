"""Machine sessions (leases: one boot of a rented machine) as a reader names them: the date it began and a letter,
'2026-12-07 A', never the boot id.

The page's names are made once from the runs table (`of`) and set for the rendering (`using`); a column's format
(`name`, `names`, `in_text`) reads them. Polars-free: `of` takes rows.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar

NOT_RECORDED = ("unknown", None, "")
_CURRENT: ContextVar[dict[str, str] | None] = ContextVar("sessions", default=None)
_ID = re.compile(r"\b[0-9a-f]{8}(?:-[0-9a-f]{4}){3}-[0-9a-f]{12}\b|\b[0-9a-f]{8}…")


def _letters(i: int) -> str:
    return chr(ord("A") + i) if i < 26 else _letters(i // 26 - 1) + chr(ord("A") + i % 26)


def of(rows: Iterable[dict]) -> dict[str, str]:
    """{lease id: 'YYYY-MM-DD A'}: sessions lettered in the order they began (their first record's start)."""
    first: dict[str, str] = {}
    for r in rows:
        lease, started = r.get("lease"), r.get("started_at") or ""
        if lease in NOT_RECORDED:
            continue
        if lease not in first or (started and started < first[lease]):
            first[lease] = started
    ordered = sorted(first, key=lambda lease: (first[lease] or "9999", lease))
    return {lease: f"{first[lease][:10] or 'undated'} {_letters(i)}" for i, lease in enumerate(ordered)}


@contextmanager
def using(names: dict[str, str]) -> Iterator[None]:
    token = _CURRENT.set(names)
    try:
        yield
    finally:
        _CURRENT.reset(token)


def name(lease: str | None) -> str:
    """A session's name on this page; 'not recorded' without one; 'another session' for one no run of the page
    names (never its id)."""
    if lease in NOT_RECORDED:
        return "not recorded"
    return (_CURRENT.get() or {}).get(lease, "another session")


def names(leases: str) -> str:
    """'id1, id2' -> '2026-12-04 A, 2026-12-06 C'."""
    return ", ".join(name(x.strip()) for x in str(leases).split(",") if x.strip())


def in_text(text: str) -> str:
    """Free text that quotes a boot id (whole, or its first 8 digits and '…') with the session's name instead."""
    known = _CURRENT.get() or {}
    by_prefix = {lease[:8]: n for lease, n in known.items()}

    def swap(m: re.Match) -> str:
        found = m.group(0)
        return known.get(found) or by_prefix.get(found[:8], "another session")

    return _ID.sub(swap, str(text))
