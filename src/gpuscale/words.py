"""Words for the reader: table columns, values and colours, shared by the report's tables and the charts.

No column name reaches a reader: every header, legend and tooltip takes its words (with the unit) from here.
Torch-free and polars-free, so anything may import it.
"""

from __future__ import annotations

import json
import math
import re

from gpuscale import devices

# column -> what a reader sees (unit in the words, never a bare identifier)
COLUMNS = {
    "source": "source",
    "study": "study folder",
    "check": "check",
    "model": "model",
    "device": "device",
    "variant": "variant",
    "seed": "seed",
    "status": "status",
    "label": "study label",
    "host": "host",
    "hostname": "host name",
    "cpu_model": "CPU",
    "cpu_logical_cores": "logical CPU cores",
    "torch_threads": "torch threads",
    "loader_workers": "loader workers",
    "oversubscribed": "threads + workers exceed cores",
    "compile_cache": "compile cache",
    "compile_cache_files_at_start": "compile cache files at start",
    "gpu_name": "GPU",
    "gpu_driver": "GPU driver",
    "gpu_device": "GPU device",
    "torch_version": "PyTorch",
    "cuda_version": "CUDA",
    "cudnn_version": "cuDNN",
    "git_commit": "project commit",
    "parameters": "parameters",
    "train_flops_per_image": "training FLOPs per image",
    "epochs": "epochs",
    "batch_size": "batch size",
    "world_size": "processes",
    "global_batch_size": "global batch size",
    "data_source": "data",
    "synthetic": "synthetic data",
    "train_images": "training images",
    "test_images": "test images",
    "manifest_sha256": "data manifest sha256",
    "total_train_seconds": "training time (s)",
    "epoch_seconds_mean": "seconds per epoch (mean)",
    "warmup_epoch_seconds": "first epoch (s)",
    "steady_epoch_seconds_median": "steady epoch (s, median)",
    "total_eval_seconds": "evaluation time (s)",
    "train_images_per_second": "images per second (training)",
    "steady_images_per_second": "images per second (steady)",
    "extrapolated": "time extrapolated (sampled)",
    "final_test_accuracy": "test accuracy",
    "gpu_joules_per_epoch": "GPU energy per epoch (J)",
    "cpu_joules_per_epoch": "CPU energy per epoch (J)",
    "gpu_images_per_joule": "images per joule (GPU)",
    "energy_note": "energy note",
    "phase_overhead_fraction": "instrumentation overhead",
    "started_at": "started",
    "finished_at": "finished",
    "record_path": "record",
    "record_sha256": "record sha256",
    "not_measured_reason": "why not measured",
    "sweep_parameter": "swept setting",
    "sweep_value": "swept value",
    # speedup table
    "cpu_seconds": "CPU training time (s)",
    "gpu_seconds": "GPU training time (s)",
    "cpu_epoch_seconds": "CPU seconds per epoch",
    "gpu_epoch_seconds": "GPU seconds per epoch",
    "cpu_steady_epoch_seconds": "CPU steady epoch (s)",
    "gpu_steady_epoch_seconds": "GPU steady epoch (s)",
    "speedup": "speedup (×)",
    "steady_speedup": "steady speedup (×, first epoch left out)",
    "speedup_ci_low": "speedup, 95% interval low (×)",
    "speedup_ci_high": "speedup, 95% interval high (×)",
    "cpu_accuracy": "CPU test accuracy",
    "gpu_accuracy": "GPU test accuracy",
    "accuracy_difference": "accuracy, GPU − CPU",
    "accuracy_parity": "accuracy agrees",
    "protocol_mismatch": "CPU and GPU protocols differ",
    "cpu_extrapolated": "CPU time extrapolated",
    "gpu_extrapolated": "GPU time extrapolated",
    "gpu_seeds": "GPU seeds",
    "cpu_seeds": "CPU seeds",
    "gpu_not_measured_reason": "why the GPU was not measured",
    # pairing by machine lease (issue 26)
    "round": "round",
    "rounds": "rounds",
    "lease": "machine lease",
    "drifted": "machine drifted during the job",
    "steady_epoch_log_sd": "epoch-to-epoch spread (log sd)",
    "pairing": "CPU and GPU paired",
    "pairing_reason": "pairing note",
    "leases": "machine leases",
    "lease_ids": "leases paired in",
    "cpu_lease_ids": "CPU leases",
    "gpu_lease_ids": "GPU leases",
    "epoch_spread": "spread: epoch to epoch",
    "round_spread": "spread: round to round",
    "seed_spread": "spread: seed to seed",
    "lease_spread": "spread: lease to lease",
    "speedup_interval_low": "speedup, interval with every spread, low (×)",
    "speedup_interval_high": "speedup, interval with every spread, high (×)",
    "drift_speed_ratio": "speed after / before the job (>1: faster)",
    "when": "sentinel",
    "component": "sentinel component",
    "unit": "unit",
    "faster": "faster machine: value",
    "spread": "sentinel's own spread",
    "records": "records",
    "sentinel_value": "sentinel figure (median over records)",
    "between_records": "spread between records",
    "own_spread": "sentinel's own spread (median)",
    "devices": "devices",
    "first_started": "first run started",
    "last_finished": "last run finished",
    "drifted_records": "records that drifted",
    "sentinel_records": "records with sentinels",
    # fits
    "fit": "fit",
    "ok": "fitted",
    "points": "points",
    "estimate": "estimate",
    "estimate_se": "estimate, standard error",
    "intercept": "intercept",
    "intercept_se": "intercept, standard error",
    "r2": "R²",
    "note": "note",
    # phases
    "phase": "phase",
    "seconds_per_step": "seconds per step",
    "fraction": "share of a step",
    "seconds_per_epoch": "seconds per steady epoch",
    "overhead_fraction": "instrumentation overhead",
    "profile_steps": "instrumented steps",
    # gains
    "baseline": "baseline variant",
    "baseline_seconds": "baseline seconds per epoch",
    "variant_seconds": "variant seconds per epoch",
    "gain": "gain, whole run (×)",
    "baseline_steady_seconds": "baseline steady epoch (s)",
    "variant_steady_seconds": "variant steady epoch (s)",
    "steady_gain": "gain, steady epochs (×)",
    # sweeps
    "parameter": "swept setting",
    "value": "value",
    "epoch_seconds": "seconds per epoch",
    "images_per_second": "images per second",
    "baseline_value": "baseline value",
    "speedup_vs_baseline": "speedup over the baseline (×)",
    # sampling
    "sampled_steps": "timed steps per epoch",
    "warmup_steps": "warm-up steps",
    "steps_per_epoch": "steps per epoch",
    "estimated_total_seconds": "estimated total (s)",
    "measured_total_seconds": "measured total (s)",
    "error": "error of the total",
    "epoch_error_min": "single epochs, lowest error",
    "epoch_error_max": "single epochs, highest error",
    "sweep": "sweep",
    "full_runs": "full runs",
    "total_error_lowest": "error of the total, lowest",
    "total_error_highest": "error of the total, highest",
    "epoch_error_lowest": "single epochs, lowest error",
    "epoch_error_highest": "single epochs, highest error",
    # scaling
    "base_device": "one-device baseline",
    "base_epoch_seconds": "one device, seconds per epoch",
    "efficiency": "efficiency (speedup / processes)",
    # predictions (gpuscale.predict's tables)
    "predicted_cpu_epoch_seconds": "PREDICTED CPU seconds per epoch",
    "predicted_gpu_epoch_seconds": "PREDICTED GPU seconds per epoch",
    "predicted_speedup": "PREDICTED speedup (×)",
    "predicted_speedup_low": "predicted speedup, band low (×)",
    "predicted_speedup_high": "predicted speedup, band high (×)",
    "bound": "what sets the GPU step (compute or input pipeline)",
    "quantity": "quantity",
    "predicted": "predicted",
    "measured": "measured",
    "low": "band low",
    "high": "band high",
    "calibration": "constants from",
    "error_percent": "error of the prediction",
    "median_abs_error_percent": "median error (absolute)",
    "worst_abs_error_percent": "worst error (absolute)",
    "worst_model": "worst model",
    "meets_target": "speedup meets both targets",
    "floor_median_percent": "noise floor: median error",
    "floor_worst_percent": "noise floor: worst error",
    "floor_meets_target_share": "noise floor: repeats meeting both targets",
    "floor_basis": "noise floor from the spread",
    "table_from": "layer table from",
    "pipeline_sharpness": "pipeline sharpness p (— : the slower stage)",
    "models": "models",
    "effective_gflops_per_second": "training rate (GFLOP/s)",
    "rate_vs_resnet18": "rate against its resnet18 rate",
    "cost_model_epoch_seconds": "cost model fitted to the paper's points (s per epoch)",
    "fitted_on": "fitted on",
    "fixed_step_seconds": "fixed cost per step (s)",
    "layer_seconds": "cost per layer per step (s)",
    "loader_seconds_per_image": "input pipeline, seconds per image",
    "log_error": "RMS log error (leave one out)",
    "scale": "scale on the probe",
    "table_scale": "scale on the layer table",
    "table_models": "models in the layer table",
    "optimizer_seconds_per_parameter": "optimizer, seconds per parameter",
}
# a measured column beside a prediction: '<source>: <column>' reads '<source>, measured: <words>'
MEASURED_BESIDE = ": "

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


def column(name: str) -> str:
    """A column's words; an unknown column reads as words too (underscores become spaces)."""
    if MEASURED_BESIDE in name and name not in COLUMNS:
        source, _, quantity = name.rpartition(MEASURED_BESIDE)
        return f"{source_short(source).rpartition('/')[2]}, measured: {column(quantity)}"
    return COLUMNS.get(name, name.replace("_", " "))


def columns(names) -> dict[str, str]:
    return {n: column(n) for n in names}


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


# The cost model's checks of a study folder: predict.validation suffixes its rows' source with these (a plain
# folder name is the held-out check); check_of reads them back
HELD_OUT = "held out"
ON_LAYER_TABLE = " (held out, layer table)"
PROBE_ONLY = " (probe only)"
CHECKS = {ON_LAYER_TABLE: "held out, CPU on the layer table", PROBE_ONLY: "probes alone"}
CHECK_KEY = {
    HELD_OUT: "each model held out (its records left out), the constants fitted on the other models' records "
    "of the folder, the model predicted",
    CHECKS[ON_LAYER_TABLE]: "the same, the CPU's constants (fixed step, the table's scale) fitted on a "
    "CPU probe's layer table instead of FLOPs by kind: the folder's own probe's, else that of another checked "
    "folder's probe of the same host (fingerprint), made in another lease (the 'constants from' column names it)",
    CHECKS[PROBE_ONLY]: "no record used: every model predicted from the folder's own probes",
}


def split_check(source: str) -> tuple[str, str]:
    """A validation row's source -> (the folder as given, check): 'reference/x (probe only)' -> ('reference/x',
    'probes alone')."""
    for suffix, label in CHECKS.items():
        if source.endswith(suffix):
            return source.removesuffix(suffix), label
    return source, HELD_OUT


def check_of(source: str) -> tuple[str, str]:
    """A validation row's source -> (study folder, check): 'reference/x (probe only)' -> ('x', 'probes alone')."""
    folder, check = split_check(source)
    return source_short(folder).removeprefix("reference/"), check


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
