"""Which probe record `gpuscale predict --model` may reuse, and where it keeps the ones it takes (torch-free).

A one-off prediction needs a probe of each device. Taking a fresh one on every call made two calls on an unchanged
machine disagree by more than their band (a probe's level moves from minute to minute on a shared host), and writing
it to results/probe/ made the workflow rerun its predict stage. So a call reuses, per device, the first of

1. the workflow's own probe (results/probe/<device>.json, read only);
2. the one-off's cache, .gpuscale/cache/probe/<host fingerprint>/<device>.json (a CPU's per model:
   cpu-<model key>.json, since its layer table must hold the model);

that was made on this host (the same hardware fingerprint), in this boot of the machine (the same lease: a rented
machine's next boot has its own pace) and at most `max_age_hours` ago (MAX_AGE_HOURS by default), and whose CPU
layer table, where it has one, holds the model. Else it probes once more into the cache. `--fresh-probe` skips the
reuse.
"""

from __future__ import annotations

import hashlib
import json
import math
from datetime import UTC, datetime
from pathlib import Path

CACHE = Path(".gpuscale") / "cache" / "probe"
MAX_AGE_HOURS = 24.0


def folder(fingerprint: str, root: Path | str = CACHE) -> Path:
    """The cache folder of one host (hardware fingerprint): probes of other hardware are never read for it."""
    return Path(root) / fingerprint


def model_key(model: str, file_sha256: str | None = None) -> str:
    """A file-name-safe key of a model: a registry name as it is; a spec (path:function) hashed with its file's
    content, so that an edited model file is probed again."""
    if all(c.isalnum() or c in "_-." for c in model):
        return model
    digest = hashlib.sha256(f"{model}\0{file_sha256 or ''}".encode()).hexdigest()[:16]
    return f"spec-{digest}"


def cache_path(fingerprint: str, device: str, model: str, file_sha256: str | None = None, root=CACHE) -> Path:
    """Where a fresh probe of `device` for `model` goes: a CPU's per model (its layer table times the model)."""
    name = f"cpu-{model_key(model, file_sha256)}.json" if device.startswith("cpu") else f"{device}.json"
    return folder(fingerprint, root) / name


def _read(path: Path) -> dict | None:
    try:
        doc = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return doc if isinstance(doc, dict) and doc.get("kind") == "gpuscale.probe" else None


def age_hours(doc: dict, now: datetime | None = None) -> float:
    """Hours since the probe finished (infinite where it names no time)."""
    stamp = doc.get("finished_at") or doc.get("started_at")
    try:
        made = datetime.fromisoformat(str(stamp))
    except ValueError:
        return math.inf
    if made.tzinfo is None:
        made = made.replace(tzinfo=UTC)
    return ((now or datetime.now(UTC)) - made).total_seconds() / 3600.0


def why_not(
    doc: dict | None,
    device: str,
    model: str,
    fingerprint: str,
    lease: str | None,
    max_age_hours: float = MAX_AGE_HOURS,
    now: datetime | None = None,
) -> str | None:
    """Why a probe record may not stand for this host now (None: it may): another device, other hardware, another
    boot, too old, or a CPU layer table without the model."""
    if doc is None:
        return "none"
    if doc.get("device") != device:
        return f"a probe of {doc.get('device')}"
    if (doc.get("environment") or {}).get("host_fingerprint") != fingerprint:
        return "made on other hardware"
    made_in = (doc.get("conditions") or {}).get("lease") or (doc.get("environment") or {}).get("boot_id")
    if lease is not None and made_in != lease:
        return "made before this boot of the machine"
    age = age_hours(doc, now)
    if age > max_age_hours:
        return f"{age:.0f} h old (at most {max_age_hours:g} h)"
    table = doc.get("layer_table")
    if device.startswith("cpu") and isinstance(table, dict) and model not in (table.get("models") or {}):
        return f"its layer table has no {model}"
    return None


def find(
    device: str,
    model: str,
    fingerprint: str,
    lease: str | None,
    workflow_probe: Path | None = None,
    file_sha256: str | None = None,
    max_age_hours: float = MAX_AGE_HOURS,
    root: Path | str = CACHE,
    now: datetime | None = None,
) -> tuple[Path | None, list[str]]:
    """The probe record to reuse for `device` (the workflow's, else the cache's), or None; and why each candidate
    that exists was passed over."""
    passed = []
    candidates = [workflow_probe] if workflow_probe is not None else []
    candidates.append(cache_path(fingerprint, device, model, file_sha256, root))
    for path in candidates:
        if not path.exists():
            continue
        why = why_not(_read(path), device, model, fingerprint, lease, max_age_hours, now)
        if why is None:
            return path, passed
        passed.append(f"{path}: {why}")
    return None, passed
