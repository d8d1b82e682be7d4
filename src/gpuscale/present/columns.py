"""Every table column the report shows, declared once: its data key, its header words, its unit and its format.

A table's cell is `column(key).cell(value)`; its header is `column(key).heading`. A key nobody declared reads as
words (underscores become spaces) in the plain number format, and tests/test_report.py fails on one a report shows.
A figure measured elsewhere shown beside a prediction is `beside(source, key)`: the same column, its header naming
the source. Torch-free; polars-free.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, replace

from gpuscale import words
from gpuscale.contract import conditions as machine
from gpuscale.present import sessions


# ---- formats: each takes a value that is neither missing nor a bool --------------------------------------------
def text(value) -> str:
    return str(value)


def number(value) -> str:
    """A count 12,345; any other figure to 4 significant digits."""
    return f"{value:,}" if isinstance(value, int) else f"{value:,.4g}"


def plain(value) -> str:
    """A value as given (a seed, a swept setting): 3, not 3.0 nor 1,024."""
    return str(value) if isinstance(value, int) else f"{value:.4g}"


def secs(value) -> str:
    return f"{value:,}" if isinstance(value, int) else f"{value:,.3g}" if abs(value) < 1 else f"{value:,.2f}"


def ratio(value) -> str:
    """A speedup or gain: 3.14×."""
    return f"{value:.2f}×"


def share(value) -> str:
    """A fraction as a percent: 0.123 -> 12.3%."""
    return words.percent(value, 1)


def signed_share(value) -> str:
    return words.percent(value, 1, sign=True)


def accuracy(value) -> str:
    return words.percent(value, 2)


def signed_accuracy(value) -> str:
    return words.percent(value, 2, sign=True)


def points(value) -> str:
    """A figure already in percent: 12.3 -> 12.3%."""
    return f"{value:.1f}%"


def signed_points(value) -> str:
    return f"{value:+.1f}%".replace("-", "−")


def rate(value) -> str:
    return f"{value:,.0f}"


def two(value) -> str:
    return f"{value:.2f}"


def si(value) -> str:
    return words.si(value)


def log_spread(value) -> str:
    return words.spread(value)


def component(value) -> str:
    return words.sentinel_component(value) + (" (dropped)" if value in machine.DROPPED else "")


def pairing(value) -> str:
    return words.PAIRING_WORDS.get(value, value)


NUMERIC = frozenset(
    {number, plain, secs, ratio, share, signed_share, accuracy, signed_accuracy, points, signed_points, rate, two, si}
)
NUMERIC |= {log_spread, words.speed_ratio, words.times}


@dataclass(frozen=True)
class Column:
    """One column: `key` in the data, `header` in words, `unit` ('' for words or counts), `fmt` for each cell."""

    key: str
    header: str
    unit: str = ""
    fmt: Callable[[object], str] = number

    @property
    def heading(self) -> str:
        return f"{self.header} ({self.unit})" if self.unit else self.header

    def cell(self, value) -> str:
        if value is None or (isinstance(value, float) and math.isnan(value)):
            return "—"
        if isinstance(value, bool):
            return "yes" if value else "no"
        if self.fmt in NUMERIC and not isinstance(value, int | float):
            return str(value)  # a figure's column holding words (a table's 'n/a' row): as given
        return self.fmt(value)


def _declare(*groups: tuple[Column, ...]) -> dict[str, Column]:
    out: dict[str, Column] = {}
    for group in groups:
        for c in group:
            if c.key in out and out[c.key] != c:
                raise ValueError(f"column {c.key} declared twice, differently")
            out[c.key] = c
    return out


C = Column
RUNS = (
    C("source", "source", fmt=words.source_short),
    C("study", "study folder", fmt=text),
    C("check", "check", fmt=words.check),
    C("model", "model", fmt=text),
    C("device", "device", fmt=words.device),
    C("variant", "variant", fmt=text),
    C("seed", "seed", fmt=plain),
    C("status", "status", fmt=text),
    C("label", "study label", fmt=text),
    C("host", "host", fmt=text),
    C("hostname", "host name", fmt=text),
    C("cpu_model", "CPU", fmt=text),
    C("cpu_logical_cores", "logical CPU cores"),
    C("torch_threads", "torch threads"),
    C("loader_workers", "loader workers"),
    C("oversubscribed", "threads + workers exceed cores"),
    C("compile_cache", "compile cache", fmt=text),
    C("compile_cache_files_at_start", "compile cache files at start"),
    C("gpu_name", "GPU", fmt=text),
    C("gpu_driver", "GPU driver", fmt=text),
    C("gpu_device", "GPU device", fmt=words.device),
    C("torch_version", "PyTorch", fmt=text),
    C("cuda_version", "CUDA", fmt=text),
    C("cudnn_version", "cuDNN", fmt=plain),
    C("git_commit", "project commit", fmt=text),
    C("parameters", "parameters"),
    C("train_flops_per_image", "training FLOPs per image", fmt=si),
    C("epochs", "epochs"),
    C("batch_size", "batch size"),
    C("world_size", "processes"),
    C("global_batch_size", "global batch size"),
    C("data_source", "data", fmt=text),
    C("synthetic", "synthetic data"),
    C("train_images", "training images"),
    C("test_images", "test images"),
    C("manifest_sha256", "data manifest sha256", fmt=text),
    C("total_train_seconds", "training time", "s", secs),
    C("epoch_seconds_mean", "seconds per epoch (mean)", fmt=secs),
    C("warmup_epoch_seconds", "first epoch", "s", secs),
    C("steady_epoch_seconds_median", "steady epoch", "s, median", secs),
    C("total_eval_seconds", "evaluation time", "s", secs),
    C("train_images_per_second", "images per second (training)", fmt=rate),
    C("steady_images_per_second", "images per second (steady)", fmt=rate),
    C("extrapolated", "time extrapolated (sampled)"),
    C("final_test_accuracy", "test accuracy", fmt=accuracy),
    C("gpu_joules_per_epoch", "GPU energy per epoch", "J", rate),
    C("cpu_joules_per_epoch", "CPU energy per epoch", "J", rate),
    C("gpu_images_per_joule", "images per joule (GPU)", fmt=rate),
    C("energy_note", "energy note", fmt=text),
    C("phase_overhead_fraction", "instrumentation overhead", fmt=share),
    C("started_at", "started", fmt=text),
    C("finished_at", "finished", fmt=text),
    C("record_path", "record", fmt=text),
    C("record_sha256", "record sha256", fmt=text),
    C("not_measured_reason", "why not measured", fmt=text),
    C("sweep_parameter", "swept setting", fmt=text),
    C("sweep_value", "swept value", fmt=plain),
)
SPEEDUP = (
    C("cpu_seconds", "CPU training time", "s", secs),
    C("gpu_seconds", "GPU training time", "s", secs),
    C("cpu_epoch_seconds", "CPU seconds per epoch", fmt=secs),
    C("gpu_epoch_seconds", "GPU seconds per epoch", fmt=secs),
    C("cpu_steady_epoch_seconds", "CPU steady epoch", "s", secs),
    C("gpu_steady_epoch_seconds", "GPU steady epoch", "s", secs),
    C("speedup", "speedup", "×", ratio),
    C("steady_speedup", "steady speedup", "×, first epoch left out", ratio),
    C("speedup_ci_low", "speedup, 95% interval low", "×", ratio),
    C("speedup_ci_high", "speedup, 95% interval high", "×", ratio),
    C("cpu_accuracy", "CPU test accuracy", fmt=accuracy),
    C("gpu_accuracy", "GPU test accuracy", fmt=accuracy),
    C("accuracy_difference", "accuracy, GPU − CPU", fmt=signed_accuracy),
    C("accuracy_parity", "accuracy agrees"),
    C("protocol_mismatch", "CPU and GPU protocols differ"),
    C("cpu_extrapolated", "CPU time extrapolated"),
    C("gpu_extrapolated", "GPU time extrapolated"),
    C("gpu_seeds", "GPU seeds"),
    C("cpu_seeds", "CPU seeds"),
    C("gpu_not_measured_reason", "why the GPU was not measured", fmt=text),
)
# pairing by machine lease (issue 26): a lease reads as its date and a letter (present.sessions), never its boot id
PAIRING = (
    C("round", "round"),
    C("rounds", "rounds"),
    C("lease", "machine lease", fmt=sessions.name),
    C("drifted", "machine drifted during the job"),
    C("steady_epoch_log_sd", "epoch-to-epoch spread (log sd)"),
    C("pairing", "CPU and GPU paired", fmt=pairing),
    C("pairing_reason", "pairing note", fmt=sessions.in_text),
    C("leases", "machine leases"),
    C("lease_ids", "leases paired in", fmt=sessions.names),
    C("cpu_lease_ids", "CPU leases", fmt=sessions.names),
    C("gpu_lease_ids", "GPU leases", fmt=sessions.names),
    C("epoch_spread", "spread: epoch to epoch", fmt=log_spread),
    C("round_spread", "spread: round to round", fmt=log_spread),
    C("seed_spread", "spread: seed to seed", fmt=log_spread),
    C("lease_spread", "spread: lease to lease", fmt=log_spread),
    C("speedup_interval_low", "speedup, interval with every spread, low", "×", ratio),
    C("speedup_interval_high", "speedup, interval with every spread, high", "×", ratio),
    C("drift_speed_ratio", "speed after / before the job (>1: faster)", fmt=words.speed_ratio),
)
SENTINELS = (
    C("when", "sentinel", fmt=text),
    C("component", "sentinel component", fmt=component),
    C("unit", "unit", fmt=text),
    C("faster", "faster machine: value", fmt=text),
    C("spread", "sentinel's own spread"),
    C("records", "records"),
    C("sentinel_value", "sentinel figure (median over records)"),
    C("between_records", "spread between records", fmt=share),  # (max − min) / median, as the sentinel gives its own
    C("own_spread", "sentinel's own spread (median)", fmt=share),
    C("devices", "devices", fmt=text),
    C("first_started", "first run started", fmt=text),
    C("last_finished", "last run finished", fmt=text),
    C("drifted_records", "records that drifted"),
    C("sentinel_records", "records with sentinels"),
)
FITS = (
    C("fit", "fit", fmt=words.fit),
    C("ok", "fitted"),
    C("points", "points"),
    C("estimate", "estimate", fmt=secs),
    C("estimate_se", "estimate, standard error", fmt=secs),
    C("intercept", "intercept", fmt=secs),
    C("intercept_se", "intercept, standard error", fmt=secs),
    C("r2", "R²", fmt=two),
    C("note", "note", fmt=text),
)
PHASES = (
    C("phase", "phase", fmt=words.phase),
    C("seconds_per_step", "seconds per step", fmt=secs),
    C("fraction", "share of a step", fmt=share),
    C("seconds_per_epoch", "seconds per steady epoch", fmt=secs),
    C("overhead_fraction", "instrumentation overhead", fmt=share),
    C("profile_steps", "instrumented steps"),
)
GAINS = (
    C("baseline", "baseline variant", fmt=text),
    C("baseline_seconds", "baseline seconds per epoch", fmt=secs),
    C("variant_seconds", "variant seconds per epoch", fmt=secs),
    C("gain", "gain, whole run", "×", ratio),
    C("baseline_steady_seconds", "baseline steady epoch", "s", secs),
    C("variant_steady_seconds", "variant steady epoch", "s", secs),
    C("steady_gain", "gain, steady epochs", "×", ratio),
)
SWEEPS = (
    C("parameter", "swept setting", fmt=text),
    C("value", "value", fmt=plain),
    C("epoch_seconds", "seconds per epoch", fmt=secs),
    C("images_per_second", "images per second", fmt=rate),
    C("baseline_value", "baseline value", fmt=plain),
    C("speedup_vs_baseline", "speedup over the baseline", "×", ratio),
)
SAMPLING = (
    C("sampled_steps", "timed steps per epoch"),
    C("warmup_steps", "warm-up steps"),
    C("steps_per_epoch", "steps per epoch"),
    C("estimated_total_seconds", "estimated total", "s", secs),
    C("measured_total_seconds", "measured total", "s", secs),
    C("error", "error of the total", fmt=signed_share),
    C("epoch_error_min", "single epochs, lowest error", fmt=signed_share),
    C("epoch_error_max", "single epochs, highest error", fmt=signed_share),
    C("sweep", "sweep", fmt=text),
    C("full_runs", "full runs"),
    C("total_error_lowest", "error of the total, lowest", fmt=signed_share),
    C("total_error_highest", "error of the total, highest", fmt=signed_share),
    C("epoch_error_lowest", "single epochs, lowest error", fmt=signed_share),
    C("epoch_error_highest", "single epochs, highest error", fmt=signed_share),
)
SCALING = (
    C("base_device", "one-device baseline", fmt=words.device),
    C("base_epoch_seconds", "one device, seconds per epoch", fmt=secs),
    C("efficiency", "efficiency (speedup / processes)", fmt=share),
)
# gpuscale.predict's tables
PREDICTIONS = (
    C("predicted_cpu_epoch_seconds", "PREDICTED CPU seconds per epoch", fmt=secs),
    C("predicted_gpu_epoch_seconds", "PREDICTED GPU seconds per epoch", fmt=secs),
    C("predicted_speedup", "PREDICTED speedup", "×", ratio),
    C("predicted_speedup_low", "predicted speedup, band low", "×", ratio),
    C("predicted_speedup_high", "predicted speedup, band high", "×", ratio),
    C("bound", "what sets the GPU step (compute or input pipeline)", fmt=text),
    C("quantity", "quantity", fmt=text),
    C("predicted", "predicted"),
    C("measured", "measured"),
    C("low", "band low"),
    C("high", "band high"),
    C("calibration", "constants from", fmt=text),
    C("error_percent", "error of the prediction", fmt=signed_points),
    C("median_abs_error_percent", "median error (absolute)", fmt=points),
    C("worst_abs_error_percent", "worst error (absolute)", fmt=points),
    C("inside_band_percent", "inside the band", fmt=points),
    C("coverage_percent", "inside the band", fmt=points),
    C("held_out", "held out", fmt=text),
    C("worst_model", "worst model", fmt=text),
    C("meets_target", "speedup meets both targets"),
    C("floor_median_percent", "noise floor: median error", fmt=points),
    C("floor_worst_percent", "noise floor: worst error", fmt=points),
    C("floor_meets_target_share", "noise floor: repeats meeting both targets", fmt=share),
    C("floor_basis", "noise floor from the spread", fmt=text),
    C("table_from", "layer table from", fmt=text),
    C("pipeline_sharpness", "pipeline sharpness p (— : the slower stage)"),
    C("models", "models"),
    C("effective_gflops_per_second", "training rate", "GFLOP/s", rate),
    C("rate_vs_resnet18", "rate against its resnet18 rate"),
    C("cost_model_epoch_seconds", "cost model fitted to the paper's points (s per epoch)", fmt=secs),
    C("fitted_on", "fitted on", fmt=text),
    C("fixed_step_seconds", "fixed cost per step", "s", secs),
    C("layer_seconds", "cost per layer per step", "s", secs),
    C("loader_seconds_per_image", "input pipeline, seconds per image", fmt=secs),
    C("log_error", "RMS log error (leave one out)", fmt=signed_share),
    C("scale", "scale on the probe"),
    C("table_scale", "scale on the layer table"),
    C("table_models", "models in the layer table"),
    C("optimizer_seconds_per_parameter", "optimizer, seconds per parameter", fmt=secs),
)
# this host's first screen (sections.host)
HOST = (
    C("cpu_epoch", "CPU epoch", "s", secs),
    C("gpu_epoch", "GPU epoch", "s", secs),
    C("predicted_band", "predicted band", fmt=text),
)
COLUMNS = _declare(RUNS, SPEEDUP, PAIRING, SENTINELS, FITS, PHASES, GAINS, SWEEPS, SAMPLING, SCALING, PREDICTIONS, HOST)
del C

# A measured column beside a prediction, as gpuscale.present.sections.predicted names it today: '<source>: <key>'.
# It should pass beside(source, key) instead; until it does, column() splits such a key on this separator.
LEGACY_BESIDE = ": "


def column(key: str) -> Column:
    """The declared column; an undeclared key reads as words in the plain number format."""
    if key in COLUMNS:
        return COLUMNS[key]
    if LEGACY_BESIDE in key:
        source, _, quantity = key.rpartition(LEGACY_BESIDE)
        return replace(beside(source, quantity), key=key)
    return Column(key, key.replace("_", " "))


def beside(source: str, key: str) -> Column:
    """`key`'s column measured on `source`, shown beside a prediction: 'h200-2026-12-04, measured: speedup (×)'."""
    found = column(key)
    name = words.source_short(source).rpartition("/")[2]
    return replace(found, key=f"{source}{LEGACY_BESIDE}{key}", header=f"{name}, measured: {found.header}")


def heading(key: str) -> str:
    return column(key).heading


def headings(keys) -> dict[str, str]:
    return {k: heading(k) for k in keys}
