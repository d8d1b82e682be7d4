"""Device kinds: one line each in KINDS, and everything torch-free that follows from them.

A kind's line says what a reader and a parser need (its name, whether it is a GPU, its words, whether it takes an
index or data-parallel processes); what it does with torch (synchronise, time, autocast, memory, energy, its
environment facts, why it is unavailable) is its own module, gpuscale.measure.devices.<name>. The name pattern is
built here from the lines: settings parses with it, the Snakefile's rules constrain their wildcards with it, and the
schemas carry it (`python -m gpuscale.devices --write` rewrites their patterns; a test says when they are stale).
Torch-free and a leaf: words, analysis and predict import it.
"""

from __future__ import annotations

import json
import re
import sys
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Kind:
    name: str  # the params spelling (cpu, cuda-1, cuda-ddp4 start with it) and torch's device type
    gpu: bool  # an accelerator: the speedup's numerator, probed without a layer table
    words: str  # how the report names one such device
    indexed: bool = False  # name-N is the host's N-th device
    parallel: str | None = None  # name-ddpN allowed (N >= 2 processes, through torchrun): their words, {n} for N
    runtime: str | None = None  # its torch side; None: gpuscale.measure.devices.<name>

    def __post_init__(self):
        if not re.fullmatch(r"[a-z][a-z0-9]*", self.name):
            raise ValueError(f"device kind {self.name!r}: a name is lower-case letters and digits")

    @property
    def module(self) -> str:
        return self.runtime or f"gpuscale.measure.devices.{self.name}"


KINDS: dict[str, Kind] = {
    kind.name: kind
    for kind in (
        Kind("cpu", gpu=False, words="CPU", parallel="{n} CPU processes (gloo, data-parallel)"),
        Kind("cuda", gpu=True, words="GPU (CUDA)", indexed=True, parallel="{n} GPUs (CUDA, data-parallel)"),
        Kind("mps", gpu=True, words="GPU (Apple MPS)"),
    )
}

_INDEX = "(-[0-9]+)?"
_PROCESSES = "-ddp([2-9]|[1-9][0-9]+)"


def get(name: str) -> Kind:
    return KINDS[name]


def _one(kind: Kind) -> str:
    return kind.name + (_INDEX if kind.indexed else "")


def pattern(*, parallel: bool = True, gpu_only: bool = False) -> str:
    """The device names the kinds allow, as one regular expression (no anchors): every name, or only one process's
    (parallel=False), or only one GPU's (gpu_only=True)."""
    kinds = [k for k in KINDS.values() if k.gpu or not gpu_only]
    parts = [_one(k) for k in kinds]
    spread = [k.name for k in kinds if k.parallel] if parallel and not gpu_only else []
    if spread:
        parts.append((spread[0] if len(spread) == 1 else f"({'|'.join(spread)})") + _PROCESSES)
    return "|".join(parts)


def allowed(*, parallel: bool = True) -> str:
    """The names in words, for an error or a help line: 'cpu, cuda, cuda-N, mps, cpu-ddpN, cuda-ddpN with N >= 2';
    only one process's with parallel=False."""
    names = [n for k in KINDS.values() for n in ([k.name, f"{k.name}-N"] if k.indexed else [k.name])]
    spread = [f"{k.name}-ddpN" for k in KINDS.values() if k.parallel and parallel]
    return ", ".join(names + spread) + (" with N >= 2" if spread else "")


def parse(spec: str) -> tuple[Kind, int | None, int] | None:
    """A device name -> (its kind, cuda-N's N or None, processes), or None where no kind allows it."""
    if not re.fullmatch(f"({pattern()})", spec):
        return None
    name, _, rest = spec.partition("-")
    if rest.startswith("ddp"):
        return KINDS[name], None, int(rest[3:])
    return KINDS[name], int(rest) if rest else None, 1


def is_gpu(spec: str) -> bool:
    """Whether a device name (cuda-1, cuda-ddp4 too) is a GPU's; False for a name no kind allows."""
    parsed = parse(spec)
    return bool(parsed and parsed[0].gpu)


class _GpuKinds:
    """The names of the kinds that are GPUs, read from KINDS when asked (a kind registered later is in it)."""

    def __contains__(self, name) -> bool:
        return name in KINDS and KINDS[name].gpu

    def __iter__(self):
        return iter([k.name for k in KINDS.values() if k.gpu])

    def __repr__(self) -> str:
        return repr(tuple(self))


GPU_KINDS = _GpuKinds()


def words(spec: str) -> str | None:
    """cpu -> CPU, cuda-1 -> GPU (CUDA) #1, cuda-ddp4 -> 4 GPUs (CUDA, data-parallel); None for a name no kind
    allows."""
    parsed = parse(spec)
    if parsed is None:
        return None
    kind, index, processes = parsed
    if processes > 1:
        return kind.parallel.format(n=processes)
    return kind.words if index is None else f"{kind.words} #{index}"


# Where the schemas carry a pattern, and which: (file under src/gpuscale, key path to the pattern, pattern keywords).
SCHEMA_PATTERNS = (
    ("contract/schemas/params.schema.yaml", ("study", "devices", "items"), {}),
    ("contract/schemas/params.schema.yaml", ("sweeps", "gpu_device"), {"gpu_only": True}),
    ("contract/schemas/run-record.schema.json", ("key", "device"), {}),
)


def schema_pattern(**keywords) -> str:
    return f"^({pattern(**keywords)})$"


def _node(document: dict, path: tuple) -> dict:
    for part in path:
        document = document["properties"][part] if part in document.get("properties", {}) else document[part]
    return document


def stale_schemas(root: Path, write: bool = False) -> list[str]:
    """The schema patterns under root (src/gpuscale) that differ from the kinds' ('file: key path'); rewritten in
    place with write=True (the rest of each file as it was)."""
    import yaml

    stale = []
    for name, path, keywords in SCHEMA_PATTERNS:
        file = root / name
        text = file.read_text()
        document = json.loads(text) if name.endswith(".json") else yaml.safe_load(text)
        have, want = _node(document, path)["pattern"], schema_pattern(**keywords)
        if have != want:
            stale.append(f"{name}: {'.'.join(path)}")
            if write:
                quoted = json.dumps(have)
                assert text.count(quoted) == 1, f"{name}: {quoted} is not written once"
                file.write_text(text.replace(quoted, json.dumps(want)))
    return stale


if __name__ == "__main__":  # python -m gpuscale.devices [--write]: the schemas' patterns against the kinds
    found = stale_schemas(Path(__file__).parent, write="--write" in sys.argv)
    for line in found:
        print(("rewrote " if "--write" in sys.argv else "stale: ") + line)
    sys.exit(1 if found and "--write" not in sys.argv else 0)
