"""The transfer of a measured epoch to a device never measured: the measured step split into the parts that scale
with different datasheet figures, each part scaled by the ratio of the target's figure to the source's.

From a measured device S (its run records and its probe) to a target T (two catalog entries: the device and the
host CPU that feeds it), per step of B images (docs/hardware.md has the arithmetic and the checks):

    compute_S  = B * sum_k flops_k / rate_k(probe_S)          k in conv, linear, attention (tensor-core or SIMD math)
    memory_S   = B * sum_k flops_k / rate_k(probe_S)          k in depthwise_conv, grouped_conv, other (bandwidth)
    dispatch_S = fixed_step_seconds_S + ops_per_step * op_seconds_S   (the host thread that issues the ops)
    model_S    = max(dispatch, compute + memory) on a GPU (the host queues ahead of the device), their sum on a CPU
    c          = measured device time per step / model_S      (what the split misses, carried over as a ratio)

    per kind k, at the precision it ran in (rate_S = its work / its time on S; peak: the datasheet's dense rate for
    a compute kind, memory bandwidth for a memory kind (over MEMORY_BYTES_PER_FLOP on a GPU)):
    rate_T     = rate_S * peak_T / peak_S                     on a CPU, and on a GPU where S ran it saturated
               = min(rate_S, SATURATED_FRACTION * peak_T)     on a GPU where S did not (latency, occupancy)
    compute_T, memory_T = the kinds' work at rate_T, summed as on S
    dispatch_T = dispatch_S * clock_S / clock_T               (host single-thread speed: the performance cores' clock)
    device_T   = c * model_T
    copy_T     = copy_S * host_link_S / host_link_T           (a GPU's host-to-device copy)
    loader_T   = loader_S * clock_S / clock_T * workers_S / workers_T
                 (loader_S: the whole step where the loader set the pace, else the batch over the workers' rate)
    stall_S    = step_S - max(loader_S, device_S + copy_S)        (a GPU's wait the slower stage does not explain)
    step_T     = max(loader_T, device_T + copy_T) + stall_S * clock_S / clock_T on a GPU;
                 device_T + wait_S * clock_S / clock_T on a CPU
    epoch_T    = steps * step_T

A CPU's peak is threads x the slowest core type's FLOP/cycle x clock (the all-core clock where the vendor prints it,
else the max turbo): PyTorch splits a kernel's work evenly over its threads, so on a hybrid part the efficiency
cores set the pace. Peaks are datasheet peaks on both sides; the
efficiency a kernel reaches is carried from S (the probe measured rates, not peaks), so only its ratio matters.
The band comes from how far this transfer erred where the truth was measured (band_factor of those log errors),
never a constant. Plain data in, numbers out: no torch, no file reading (the caller loads records and probes).
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field

from gpuscale.hardware.catalog import CPU, GPU, UNSUPPORTED, Device, HardwareError, MissingFigure

COMPUTE_KINDS = ("conv", "linear", "attention")
MEMORY_KINDS = ("depthwise_conv", "grouped_conv", "other")
PRECISIONS = ("fp32", "tf32", "bf16", "fp16")
# a GPU record whose steps waited this share of the step for data was paced by its loader
LOADER_BOUND_WAIT_FRACTION = 0.2
# The share of its dense peak a GPU kernel reaches once it fills the device (cuDNN/cuBLAS on large shapes). A kernel
# that reached less on the source was held by latency and occupancy (too few blocks for the SMs: Hopper runs these
# 32x32-input convolutions at about 10% of its TF32 peak), which a smaller card does not pay: there the same kernel
# runs at the lesser of its source rate and this share of the target's peak. Not fitted: no measured card here fills
# with these models; docs/hardware.md shows what it moves.
SATURATED_FRACTION = 0.6
# Bytes a memory-bound kind moves per FLOP (an FP32 elementwise op reads and writes 4 bytes each per FLOP): sets its
# bandwidth-bound rate, bandwidth / this, on a GPU
MEMORY_BYTES_PER_FLOP = 8.0
Z = 1.645  # a 90% band were the log errors normal
MIN_LOG_SD = 0.05  # a band never narrower than x1.18 (high/low) however well a few checks agreed


@dataclass(frozen=True)
class ModelCost:
    """What a model asks of a step: training FLOPs per image by kind (modelfacts.json) and ops dispatched."""

    name: str
    flops_by_kind: dict
    ops_per_step: int


@dataclass(frozen=True)
class ProbeRates:
    """What the measured device's probe measured: attainable FLOP/s per kind, a step's fixed and per-op cost."""

    flops_per_second: dict
    fixed_step_seconds: float
    op_seconds: float


@dataclass(frozen=True)
class Measured:
    """One model's measured epoch on the source device (medians over its records) and the step's phase split."""

    model: str
    device: str  # GPU or CPU
    epoch_seconds: float
    steps: int
    batch_size: int
    wait_fraction: float  # of a step, waiting for the loader
    copy_fraction: float  # host-to-device copy (0 on a CPU)
    loader_workers: int
    threads: int | None = None  # a CPU's intra-op threads (None: all its cores)
    workers_images_per_second: float | None = None  # the loader workers' rate, measured beside the run
    precision: dict = field(default_factory=lambda: {"conv": "fp32", "matmul": "fp32"})

    @property
    def step_seconds(self) -> float:
        return self.epoch_seconds / self.steps

    @property
    def device_fraction(self) -> float:
        return max(0.0, 1.0 - self.wait_fraction - self.copy_fraction)


@dataclass(frozen=True)
class Machine:
    """A device and the host CPU that feeds it (for a CPU run, both are the CPU)."""

    device: Device
    host: Device
    loader_workers: int | None = None  # None: as many as the measured run had
    threads: int | None = None  # a CPU device's intra-op threads; None: all its physical cores


def precision_of(effective: dict | None) -> dict:
    """The precision each kind group ran in, from a record's variant.effective (the paper variant on Ampere and
    later: convolutions in TF32 through cuDNN's default, matrix products in FP32)."""
    effective = effective or {}
    autocast = effective.get("autocast")
    if autocast in ("bf16", "bfloat16", "fp16", "float16"):
        p = "bf16" if autocast.startswith("b") else "fp16"
        return {"conv": p, "matmul": p}
    return {
        "conv": "tf32" if effective.get("cudnn_tf32") else "fp32",
        "matmul": "tf32" if effective.get("matmul_tf32") else "fp32",
    }


def clock_ghz(cpu: Device, why: str) -> float:
    """A host's single-thread speed: its performance cores' max turbo (same-generation cores differ little per
    clock; across generations this is the transfer's weakest figure, docs/hardware.md)."""
    return cpu.figure("performance_boost_ghz", why)


def cpu_peak_flops(cpu: Device, threads: int | None, why: str) -> float:
    """FP32 FLOP/s of `threads` threads (None: every physical core), paced by the slowest core type in use."""
    p = int(cpu.figure("performance_cores", why))
    e = int(cpu.figure("efficiency_cores", why)) if cpu.figures.get("efficiency_cores") else 0
    n = int(threads or (p + e))
    clock = cpu.figure("all_core_ghz", why) if cpu.has("all_core_ghz") else clock_ghz(cpu, why)
    rate = cpu.figure("fp32_flops_per_cycle_performance", why) * clock * 1e9
    if n > p and e:
        rate = min(
            rate,
            cpu.figure("fp32_flops_per_cycle_efficiency", why) * cpu.figure("efficiency_boost_ghz", why) * 1e9,
        )
    return min(n, p + e) * rate


def peak_flops(machine: Machine, precision: str, why: str) -> float:
    """The device's dense peak at a precision. A GPU without TF32 runs a TF32-allowed kernel in FP32 (as cuDNN
    does); one without the precision asked (no BF16 on a T4) raises MissingFigure rather than guess."""
    d = machine.device
    if d.kind == CPU:
        if precision in ("fp32", "tf32"):  # TF32 is a GPU format: a CPU runs those kernels in FP32
            return cpu_peak_flops(d, machine.threads, why)
        raise MissingFigure(d, f"{precision} rate", f"{why}: the CPU table holds FP32 rates only")
    key = f"{precision}_tflops"
    if precision == "tf32" and d.figures.get(key) == UNSUPPORTED:
        key = "fp32_tflops"
    return d.figure(key, why) * 1e12


def _bandwidth(machine: Machine, why: str) -> float:
    return machine.device.figure("memory_bandwidth_gb_s", why) * 1e9


def split(cost: ModelCost, probe: ProbeRates, batch_size: int) -> dict:
    """The source step's parts from its probe (seconds): each kind's work at the probe's rate (`kinds`), their sums
    compute (conv, matmul: linear and attention) and memory (depthwise, grouped, other), and dispatch."""
    rates = probe.flops_per_second
    kinds = {}
    for k in (*COMPUTE_KINDS, *MEMORY_KINDS):
        f = float(cost.flops_by_kind.get(k) or 0)
        if f:
            if not rates.get(k):
                raise HardwareError(f"the probe has no {k} rate for {cost.name}'s {k} FLOPs")
            kinds[k] = batch_size * f / rates[k]
    return {
        "compute_conv": kinds.get("conv", 0.0),
        "compute_matmul": kinds.get("linear", 0.0) + kinds.get("attention", 0.0),
        "memory": sum(kinds.get(k, 0.0) for k in MEMORY_KINDS),
        "dispatch": probe.fixed_step_seconds + cost.ops_per_step * probe.op_seconds,
        "kinds": kinds,
    }


def target_rate(rate_s: float, peak_s: float, peak_t: float, gpu: bool) -> float:
    """A kind's rate on the target from its measured rate on the source and the two peaks.

    A CPU's kernels scale with its peak. A GPU kernel that filled the source (rate_s >= SATURATED_FRACTION x peak_s)
    scales with the peak too; one held by latency and occupancy there runs at the lesser of its source rate and the
    saturated share of the target's peak (a smaller card fills where a large one idles; a larger one idles more)."""
    if not gpu or rate_s >= SATURATED_FRACTION * peak_s:
        return rate_s * peak_t / peak_s
    return min(rate_s, SATURATED_FRACTION * peak_t)


def _combine(parts: dict, kind: str) -> float:
    work = parts["compute_conv"] + parts["compute_matmul"] + parts["memory"]
    return max(parts["dispatch"], work) if kind == GPU else parts["dispatch"] + work


def transfer_epoch(measured: Measured, cost: ModelCost, probe: ProbeRates, source: Machine, target: Machine) -> dict:
    """The target's predicted epoch (seconds) and every term on both sides (seconds per step)."""
    kind = source.device.kind
    if target.device.kind != kind:
        raise HardwareError(f"cannot transfer a {kind} run to {target.device.name}, a {target.device.kind}")
    why = f"transfer of {measured.model}"
    s_parts = split(cost, probe, measured.batch_size)
    device_s = measured.step_seconds * measured.device_fraction
    correction = device_s / max(_combine(s_parts, kind), 1e-12)
    clock_ratio = clock_ghz(source.host, why) / clock_ghz(target.host, why)
    t_kinds = _target_kinds(measured, cost, s_parts["kinds"], source, target)
    t_parts = {
        "compute_conv": t_kinds.get("conv", 0.0),
        "compute_matmul": t_kinds.get("linear", 0.0) + t_kinds.get("attention", 0.0),
        "memory": sum(t_kinds.get(k, 0.0) for k in MEMORY_KINDS),
        "dispatch": s_parts["dispatch"] * clock_ratio,
    }
    device_t = correction * _combine(t_parts, kind)
    wait_s = measured.step_seconds * measured.wait_fraction
    copy_s = measured.step_seconds * measured.copy_fraction
    out = {
        "model": measured.model,
        "source": source.device.name,
        "target": target.device.name,
        "source_epoch_seconds": measured.epoch_seconds,
        "correction": correction,
        "source_terms": {
            **{k: v for k, v in s_parts.items() if k != "kinds"},
            "device_measured": device_s,
            "wait": wait_s,
            "copy": copy_s,
        },
        "target_terms": {**t_parts, "device": device_t},
    }
    if kind == GPU:
        step_t = _gpu_host_side(out, measured, source, target, clock_ratio)
    else:
        wait_t = wait_s * clock_ratio
        step_t = device_t + wait_t
        out["target_terms"]["wait"] = wait_t
        out["bound"] = "device"
    out["target_step_seconds"] = step_t
    out["predicted_epoch_seconds"] = measured.steps * step_t
    return out


def _target_kinds(measured: Measured, cost: ModelCost, kinds: dict, source: Machine, target: Machine) -> dict:
    """Each layer kind's seconds per step on the target: compute kinds by the peak for the precision they ran at,
    memory-bound kinds by bandwidth (on a GPU as an equivalent FLOP rate), each through target_rate."""
    why = f"transfer of {measured.model}"
    gpu = source.device.kind == GPU
    conv_p, matmul_p = measured.precision.get("conv", "fp32"), measured.precision.get("matmul", "fp32")
    out = {}
    for k, seconds in kinds.items():
        if k in COMPUTE_KINDS:
            p = conv_p if k == "conv" else matmul_p
            peak_s, peak_t = peak_flops(source, p, why), peak_flops(target, p, why)
        else:
            peak_s, peak_t = _bandwidth(source, why), _bandwidth(target, why)
            if gpu:
                peak_s, peak_t = peak_s / MEMORY_BYTES_PER_FLOP, peak_t / MEMORY_BYTES_PER_FLOP
        rate_s = measured.batch_size * float(cost.flops_by_kind[k]) / seconds
        out[k] = seconds * rate_s / target_rate(rate_s, peak_s, peak_t, gpu)
    return out


def _gpu_host_side(out: dict, measured: Measured, source: Machine, target: Machine, clock_ratio: float) -> float:
    """A GPU step on the target: the slower of the input pipeline and device + copy, plus the wait neither explains;
    the host-side terms added to `out`'s source and target terms."""
    why = f"transfer of {measured.model}"
    device_s, device_t = out["source_terms"]["device_measured"], out["target_terms"]["device"]
    copy_s = out["source_terms"]["copy"]
    copy_t = copy_s and copy_s * source.device.figure("host_link_gb_s", why) / target.device.figure(
        "host_link_gb_s", why
    )
    loader_s = _loader_seconds(measured)
    workers_s = max(1, measured.loader_workers)
    workers_t = max(1, target.loader_workers or measured.loader_workers)
    loader_t = loader_s * clock_ratio * workers_s / workers_t
    # the wait the slower stage does not explain (the two stages jitter around a bounded prefetch queue), host-side
    stall_s = max(0.0, measured.step_seconds - max(loader_s, device_s + copy_s))
    stall_t = stall_s * clock_ratio
    out["source_terms"].update(stall=stall_s, loader=loader_s)
    out["target_terms"].update(copy=copy_t, loader=loader_t, stall=stall_t)
    out["bound"] = "input pipeline" if loader_t > device_t + copy_t else "device"
    return max(loader_t, device_t + copy_t) + stall_t


def _loader_seconds(measured: Measured) -> float:
    """The loader's time per batch on the source: the whole step where it set the pace, else the batch over the
    workers' measured rate (no more than the step: a loader slower than the step would have set it)."""
    step = measured.step_seconds
    if measured.wait_fraction >= LOADER_BOUND_WAIT_FRACTION or not measured.workers_images_per_second:
        return step  # paced by the loader, or its rate unknown: the step bounds it
    return min(step, measured.batch_size / measured.workers_images_per_second)


# ----------------------------------------------------------------------------- the band


def log_error(predicted: float, measured: float) -> float:
    return math.log(predicted / measured)


def band_factor(log_errors: list[float]) -> float:
    """exp(Z * e), e the root mean square of the checks' log errors (bias included: a transfer that errs one way
    widens its band by it), floored at MIN_LOG_SD. The band is [predicted / f, predicted * f]; its width high/low
    is f². Raises on no checks: with nothing checked there is no band to give."""
    if not log_errors:
        raise HardwareError("no check of the transfer where the truth was measured: no band")
    e = math.sqrt(statistics.fmean(x * x for x in log_errors))
    return math.exp(Z * max(e, MIN_LOG_SD))


def inside(predicted: float, measured: float, factor: float) -> bool:
    return predicted / factor <= measured <= predicted * factor


def geometric_mean(values: list[float]) -> float:
    return math.exp(statistics.fmean(math.log(v) for v in values))
