"""Words for the reader: values, marks, colours and number formats, shared by the report's tables and the charts.

A table column's header, unit and format are declared in gpuscale.present.columns; the words for the values it holds
(devices, phases, fits, checks) and the project's own terms (GLOSSARY) live here. Torch-free and polars-free, so
anything may import it.
"""

from __future__ import annotations

import json
import math
import re

from gpuscale import devices

PHASES = {
    "data_wait": "waiting for data",
    "host_to_device": "host-to-device copy",
    "forward": "forward",
    "backward": "backward",
    "optimizer": "optimizer step",
}

FITS = {
    "log speedup ~ log parameters": "speedup vs parameters (power law)",
    "log speedup ~ log training FLOPs per image": "speedup vs training FLOPs per image (power law)",
    "T_gpu = s + T_cpu / k (per epoch)": "GPU epoch = s + CPU epoch / k (Amdahl)",
}


def device(name: str | None) -> str:
    """cpu -> CPU, cuda -> GPU (CUDA), cuda-1 -> GPU (CUDA) #1, cuda-ddp4 -> 4 GPUs (CUDA, data-parallel): each kind's
    words (gpuscale.devices); a name no kind allows stays as it is."""
    if not name:
        return "—"
    return devices.words(name) or name


def device_kind(name: str | None) -> str:
    return "cpu" if not name or name.startswith("cpu") else "gpu"


def phase(name: str) -> str:
    return PHASES.get(name, name.replace("_", " "))


def fit(name: str) -> str:
    if name in FITS:
        return FITS[name]
    m = re.fullmatch(r"CPU threads, (.+): T = a \+ b / N \(estimate = P\)", name)
    if m:
        return f"CPU threads, {m.group(1)}: epoch = a + b / threads (estimate: parallel share P)"
    return name


def source_short(source: str) -> str:
    """'reference: h200-2026-12-02' -> 'h200-2026-12-02'; 'paper: RTX 3050 vs i9-14900K' stays."""
    return source.removeprefix("reference: ")


# The cost model's checks of a study folder, by the key a validation row's `check` field holds
CHECK_WORDS = {
    "held_out": "held out",
    "layer_table": "held out, CPU on the layer table",
    "probe_only": "probes alone",
}
CHECK_MEANINGS = {
    "held_out": "each model held out (its records left out), the constants fitted on the other models' records "
    "of the folder, the model predicted",
    "layer_table": "the same, the CPU's constants (fixed step, the table's scale) fitted on a "
    "CPU probe's layer table instead of FLOPs by kind: the folder's own probe's, else that of another checked "
    "folder's probe of the same host (fingerprint), made in another lease (the 'constants from' column names it)",
    "probe_only": "no record used: every model predicted from the folder's own probes",
}


def check(key: str) -> str:
    """A check's key -> its words ('probe_only' -> 'probes alone'); words already given stay."""
    return CHECK_WORDS.get(key, key)


# LEGACY, until gpuscale.predict writes a `check` field (one of CHECK_WORDS' keys) and leaves `source` the plain
# folder: today it suffixes the source with these display words and split_check / check_of read them back.
HELD_OUT = CHECK_WORDS["held_out"]
ON_LAYER_TABLE = " (held out, layer table)"
PROBE_ONLY = " (probe only)"
CHECKS = {ON_LAYER_TABLE: CHECK_WORDS["layer_table"], PROBE_ONLY: CHECK_WORDS["probe_only"]}
CHECK_KEY = {CHECK_WORDS[k]: meaning for k, meaning in CHECK_MEANINGS.items()}


def split_check(source: str) -> tuple[str, str]:
    """LEGACY. A validation row's source -> (the folder as given, check): 'reference/x (probe only)' ->
    ('reference/x', 'probes alone')."""
    for suffix, label in CHECKS.items():
        if source.endswith(suffix):
            return source.removesuffix(suffix), label
    return source, HELD_OUT


def check_of(source: str) -> tuple[str, str]:
    """LEGACY. A validation row's source -> (study folder, check): 'reference/x (probe only)' -> ('x', 'probes
    alone')."""
    folder, found = split_check(source)
    return source_short(folder).removeprefix("reference/"), found


# ---- the project's own terms: a reader meets each with its one-line meaning (an <abbr> title, the glossary) ----
GLOSSARY = {
    "lease": "A machine lease: one boot of a rented machine, from start to shutdown. Its speed can differ from the "
    "next boot's, so a CPU time and a GPU time are divided only within one lease. Named by its date and a letter.",
    "round": "One pass over every job of a study within one lease; a study may repeat its jobs in several rounds.",
    "sentinel": "A few seconds of fixed work (arithmetic, memory, input pipeline) timed before and after each job: a "
    "witness of how fast the machine was, never used to rescale a timing.",
    "drift": "A job drifted when its before and after sentinels disagree beyond their own spread: the machine's "
    "speed moved during the job, so its time is less certain.",
    "sampled": "A sampled time (marked *) was extrapolated from a few timed steps per epoch instead of timing every "
    "step; its error is not in the interval shown.",
    "band": "A prediction's band: the range the measured time should fall in about 9 times out of 10 if the cost "
    "model holds on this machine.",
    "steady": "A steady epoch leaves the first epoch (warm-up, compilation, caches) out.",
}
# the words of the page that carry a glossary term, as a reader meets them (longest first)
GLOSSED = (
    ("machine leases", "lease"),
    ("machine lease", "lease"),
    ("leases", "lease"),
    ("lease", "lease"),
    ("rounds", "round"),
    ("sentinels", "sentinel"),
    ("sentinel", "sentinel"),
    ("drifted", "drift"),
    ("drift", "drift"),
    ("sampled*", "sampled"),
    ("sampled", "sampled"),
    ("steady", "steady"),
)


# ---- one visual language ------------------------------------------------------------------------------------------
# Paul Tol's colour-blind-safe sets. A source keeps its colour in every chart of a page, a device its own
# (never a source's), a variant its dash and shape.
PAPER_COLOUR = "#555555"
LOCAL_COLOUR = "#0077BB"
REFERENCE_COLOURS = ("#EE7733", "#009988", "#CC3311", "#33BBEE", "#EE3377", "#BBBBBB")
DEVICE_COLOURS = {"cpu": "#AA3377", "gpu": "#228833"}
PHASE_COLOURS = {
    "data_wait": "#EE7733",
    "host_to_device": "#CC3311",
    "forward": "#0077BB",
    "backward": "#33BBEE",
    "optimizer": "#009988",
}
VARIANT_DASHES = ([1, 0], [6, 3], [2, 2], [8, 2, 2, 2])
VARIANT_SHAPES = ("circle", "square", "triangle-up", "diamond", "cross")
DASH_WORDS = ("solid", "dashed", "dotted", "dash-dot")
SHAPE_SYMBOLS = ("●", "■", "▲", "◆", "✚")


def source_colours(sources, paper_source: str, local_source: str) -> dict[str, str]:
    """A fixed colour per source: the paper grey, this host blue, reference folders in sorted order."""
    out = {}
    refs = sorted(s for s in set(sources) if s not in (paper_source, local_source))
    if paper_source in sources:
        out[paper_source] = PAPER_COLOUR
    if local_source in sources:
        out[local_source] = LOCAL_COLOUR
    for i, s in enumerate(refs):
        out[s] = REFERENCE_COLOURS[i % len(REFERENCE_COLOURS)]
    return out


def variant_styles(variants) -> dict[str, tuple[list[int], str]]:
    """paper first (solid, circle), then the rest in sorted order."""
    ordered = sorted(set(variants), key=lambda v: (v != "paper", v))
    return {
        v: (VARIANT_DASHES[i % len(VARIANT_DASHES)], VARIANT_SHAPES[i % len(VARIANT_SHAPES)])
        for i, v in enumerate(ordered)
    }


def variant_key(styles: dict[str, tuple[list[int], str]]) -> str:
    """The variant legend as one line of words (a second legend beside the source legend runs off a phone's
    screen): 'variant: paper ● solid, tuned ■ dashed'."""
    parts = [
        f"{v} {SHAPE_SYMBOLS[VARIANT_SHAPES.index(shape)]} {DASH_WORDS[VARIANT_DASHES.index(dash)]}"
        for v, (dash, shape) in styles.items()
    ]
    return "variant: " + ", ".join(parts)


# ---- pairing by machine lease: the marks a figure carries wherever it is shown -----------------------------------
PAIRING_MARKS = {"cross-lease": "†", "unknown": "‡"}
PAIRING_KEY = {
    "cross-lease": "† crosses machine leases: CPU and GPU timed in different leases (report.pairing: any)",
    "unknown": "‡ lease not recorded",
}
PAIRING_WORDS = {
    "same-lease": "within one machine lease",
    "cross-lease": "across machine leases †",
    "unknown": "lease not recorded ‡",
}
# gpuscale.measure.sentinel's components as a reader reads them (that module needs torch; the words live here)
SENTINEL_COMPONENTS = {
    "pipeline_one_process": "input pipeline, one process",
    "pipeline_workers": "input pipeline, loader workers",
    "cpu_training": "CPU training arithmetic",
    "memory_bandwidth": "memory bandwidth, one core",
    "gpu_launch": "GPU launch cost",
    "gpu_matmul": "GPU matrix product",
    "host_to_device": "host-to-device copy",
}


def pairing_mark(pairing: str | None) -> str:
    """'†' for a figure that crosses leases, '‡' for one whose lease was not recorded, '' otherwise."""
    return PAIRING_MARKS.get(pairing or "", "")


def pairing_keys(pairings) -> list[str]:
    """The key line of every mark among `pairings`, in a fixed order."""
    found = set(pairings)
    return [line for pairing, line in PAIRING_KEY.items() if pairing in found]


def sentinel_component(name: str) -> str:
    return SENTINEL_COMPONENTS.get(name, name.replace("_", " "))


def spread(log_sd: float | None) -> str:
    """A spread on the log scale (one sd) as the factor a figure is multiplied or divided by: 0.095 -> '×/÷1.10'."""
    if log_sd is None:
        return "—"
    return f"×/÷{math.exp(log_sd):.2f}"


def speed_ratio(ratio: float | None) -> str:
    """A drift as a speed ratio after / before: 0.75 -> '0.75 (25% slower)', 1.10 -> '1.10 (10% faster)'."""
    if ratio is None:
        return "—"
    return f"{ratio:.2f} ({abs(ratio - 1):.0%} {'faster' if ratio >= 1 else 'slower'})"


def interval(low: float | None, high: float | None) -> str:
    return "" if low is None or high is None else f"[{low:.1f}–{high:.1f}]"


# ---- numbers as a reader reads them ---------------------------------------------------------------------------------
def times(value: float | None, digits: int | None = None) -> str:
    """A speedup or gain: 3.1×, 11.7×, 87×."""
    if value is None:
        return "—"
    if digits is None:
        digits = 2 if value < 1 else 1
    return f"{value:.{digits}f}×"


def seconds(value: float | None) -> str:
    if value is None:
        return "—"
    if value >= 100:
        return f"{value:,.0f} s"
    if value >= 10:
        return f"{value:.1f} s"
    return f"{value:.2f} s"


def percent(value: float | None, digits: int = 1, sign: bool = False) -> str:
    if value is None:
        return "—"
    text = f"{value:+.{digits}%}" if sign else f"{value:.{digits}%}"
    return text.replace("-", "−")


def si(value: float | None, unit: str = "") -> str:
    """0.55 M, 11.2 M, 3.33 G."""
    if value is None:
        return "—"
    for factor, prefix in ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(value) >= factor:
            v = value / factor
            return f"{v:.3g} {prefix}{unit}"
    return f"{value:.3g} {unit}".strip()


# The charts the charts stage writes (<name>.vl.json, .html, .svg) and the report shows, in this order.
CHART_NAMES = (
    "speedup_vs_flops",
    "speedup_vs_parameters",
    "phases",
    "amdahl",
    "epoch_seconds",
    "throughput",
    "accuracy",
    "threads",
    "batch",
    "scaling",
)


def script_json(value) -> str:
    """JSON safe inside <script type="application/json">: no '<' can close the element or open a comment, no '&'
    starts an entity, and U+2028/U+2029 (line breaks to older JavaScript) are escaped too."""
    return (
        json.dumps(value, ensure_ascii=False)
        .replace("<", "\\u003c")
        .replace(">", "\\u003e")
        .replace("&", "\\u0026")
        .replace("\u2028", "\\u2028")
        .replace("\u2029", "\\u2029")
    )


def chart_title(vl: dict) -> str:
    title = vl.get("title", "")
    text = title.get("text", "") if isinstance(title, dict) else title
    return " ".join(text) if isinstance(text, list) else str(text)
