"""Reading a set of run records as data from outside, the one way every stage reads a folder of them.

A record must read (gpuscale.contract.record.load: schema, finite figures), lie where its key says, not repeat a run
of its lease, and one source's runs of one key must come from one host. The aggregate stage and the predict stage
both read reference folders through `RecordSet.read`, so a bad record is the same file to both, skipped by both.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from gpuscale.contract import record


class IdentityError(ValueError):
    """A record that reads but lies elsewhere than its key says, repeats a run, or comes from another host."""


# what a bad record raises; a reader of data from outside catches these
BAD_RECORD = (record.RecordError, IdentityError)


@dataclass
class RecordSet:
    """The records read so far, by source: what a new record is checked against."""

    seen: dict[tuple, Path] = field(default_factory=dict)
    hosts: dict[tuple, tuple[str | None, Path]] = field(default_factory=dict)

    def read(self, source: str, path: Path | str) -> dict:
        """The record at `path`, checked against those read before it; raises one of BAD_RECORD naming the file."""
        rec = record.load(path)
        self._check(source, Path(path), rec)
        return rec

    def _check(self, source: str, path: Path, rec: dict) -> None:
        wrong_place = record.misplaced(path, rec)
        if wrong_place:
            raise IdentityError(wrong_place)
        key = (source, rec["conditions"]["lease"], *record.key(rec))
        if key in self.seen:
            raise IdentityError(f"two records for {'/'.join(map(str, key))}: {self.seen[key]} and {path}; remove one")
        fingerprint = rec["environment"].get("host_fingerprint")
        first = self.hosts.setdefault((source, *record.key(rec)), (fingerprint, path))
        if fingerprint != first[0]:
            raise IdentityError(
                f"{path}: measured on another host than {first[1]} (fingerprints {str(fingerprint)[:12]} and "
                f"{str(first[0])[:12]}); one source is one host: put one of them in its own reference folder"
            )
        self.seen[key] = path


def read_lenient(source: str, paths: list[Path], on_bad) -> list[tuple[Path, dict]]:
    """(path, record) of each good record of one source; `on_bad(path, reason)` for each bad one, which is left out."""
    found, reader = [], RecordSet()
    for path in paths:
        try:
            found.append((Path(path), reader.read(source, path)))
        except BAD_RECORD as err:
            on_bad(Path(path), str(err))
    return found
