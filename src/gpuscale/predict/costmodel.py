"""A cost model of one training epoch: predicted seconds per (model, device, variant), and the speedup.

Plain numpy (no torch, no polars): the predict stage, the report and the workflow's up-front estimate use it.

One step of the `paper` protocol is the slower of two things that run side by side, the input pipeline
(DataLoader workers) and the device's compute, so an epoch of `images` images in `steps` steps takes

    epoch = max(images * loader_seconds_per_image,
                steps * (fixed_step_seconds + layers * layer_seconds) + images * sum_k flops_k * seconds_per_flop_k)

(on a GPU with measured records of both regimes the max is softened to a p-norm, p fitted: the two stages
jitter around a bounded prefetch queue; PIPELINE_SHARPNESS_GRID), with flops_k a model's training FLOPs per
image of kind k (conv, depthwise_conv, grouped_conv, linear, attention, other; see modelfacts.json) and layers
its parameterised layers (kernel launches grow with them).
The constants come from a probe record of the device (calibrated from the probe alone), or are fitted by
non-negative least squares to measured records of the same host (refined); every constant is reported.

A GPU calibrated from its probe alone prices a step per dispatched op instead (fixed + ops_per_step x op_seconds,
elementwise work included: on a GPU those ops cost their launches) and the FLOPs of the other kinds each at its
marginal price (marginal_seconds_per_flop: the slope of the probe's cases' seconds against their FLOPs), since the
per-op cost already charges each layer call's fixed part. The two overlap (the host dispatches while the device
computes what is queued), so the step takes the larger of them, not their sum:

    compute = max(steps * (fixed_step_seconds + ops_per_step * op_seconds), images * sum_k flops_k * marginal_k)

A schema-3 probe also times every distinct layer call of the registry's models as the network makes it (shape,
memory format, input gradient: the kernel path a CPU picks), so for those models the compute side is

    compute = steps * (fixed_step_seconds + table_scale * parameters * optimizer_seconds_per_parameter)
              + images * table_scale * table_seconds_per_image[model]

with table_scale 1 from the probe alone and fitted (with fixed_step_seconds) when records of the host exist.
"""

from __future__ import annotations

import json
import math
import statistics
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import numpy as np

KINDS = ("conv", "depthwise_conv", "grouped_conv", "linear", "attention", "other")
FACTS_FILE = Path(__file__).parents[1] / "models" / "modelfacts.json"
# A record whose instrumented steps waited for data more than this share of the step is loader-bound: it
# measures the input pipeline, not the compute (the H200 study's `paper` GPU runs of small models).
LOADER_BOUND_WAIT_FRACTION = 0.5
# A kind gets its own fitted rate only when this many measured models carry at least MIN_KIND_SHARE of
# their FLOPs in it; otherwise it shares the dense rate (scaled by the probe's ratio of the two, if known).
MIN_MODELS_PER_KIND = 3
MIN_KIND_SHARE = 0.2
# Fewer measured models than this: the probe's prediction is scaled by one factor instead of a full fit.
MIN_MODELS_FOR_FIT = 4
# Log-error assumed for a calibration that has nothing to check itself against (probe alone).
NOMINAL_LOG_ERROR = 0.35
# A GPU's input pipeline (DataLoader workers on the host) and its compute are two stages with a bounded prefetch
# queue between them; both jitter, so near the crossover each now and then waits on the other and an epoch takes
# longer than the slower stage alone (the H200 study's compute-bound `paper` GPU runs still waited 4-22% of each
# step for data). With records of both regimes the epoch is (compute^p + loader^p)^(1/p), p fitted from this grid
# (None: the slower stage, as from a probe alone). Not on a CPU: there the workers and the compute share the cores.
PIPELINE_SHARPNESS_GRID = (None, 8.0, 6.0, 4.0, 3.0, 2.0)


TABLE_FIT = "records on the probe's layer table"


class CostModelError(ValueError):
    """Inputs the cost model cannot use; str() says which and why."""


# ----------------------------------------------------------------------------- model facts


@dataclass(frozen=True)
class ModelFacts:
    name: str
    parameters: int
    train_flops_per_image: float
    flops_by_kind: dict[str, float] | None = None  # None: only the total is known
    layers: int | None = None
    family: str | None = None
    ops_per_step: int | None = None  # computing ops dispatched in a forward + backward step (kernel launches)

    def kind_flops(self) -> dict[str, float]:
        if self.flops_by_kind:
            return {k: float(self.flops_by_kind.get(k, 0) or 0) for k in KINDS}
        return {**dict.fromkeys(KINDS, 0.0), "conv": float(self.train_flops_per_image)}


def load_facts(path: Path | str | None = None) -> dict[str, ModelFacts]:
    """modelfacts.json ({"schema": 1, "models": {name: {...}}}); {} when the file does not exist."""
    path = Path(path) if path else FACTS_FILE
    if not path.exists():
        return {}
    doc = json.loads(path.read_text())
    if doc.get("schema") != 1:
        raise CostModelError(f"{path}: schema is {doc.get('schema')!r}, expected 1")
    return {
        name: ModelFacts(
            name=name,
            parameters=int(m["parameters"]),
            train_flops_per_image=float(m["train_flops_per_image"]),
            flops_by_kind=m.get("flops_by_kind"),
            layers=m.get("layers"),
            family=m.get("family"),
            ops_per_step=m.get("ops_per_step"),
        )
        for name, m in doc["models"].items()
    }


def facts_from_record(record: dict) -> ModelFacts:
    """What a run record itself says of its model: parameters and total training FLOPs (no kinds, no layers)."""
    m = record["model"]
    return ModelFacts(m["name"], int(m["parameters"]), float(m["train_flops_per_image"]))


# ----------------------------------------------------------------------------- measurements


@dataclass(frozen=True)
class Observation:
    """One (model, device, variant) of one host: the median steady epoch over its seeds."""

    source: str
    host_fingerprint: str | None
    model: str
    device: str
    variant: str
    epoch_seconds: float
    images: int
    steps: int
    data_wait_fraction: float | None
    seeds: int
    steady_epochs: int = 1  # the fewest steady (non-warm-up) epochs of its seeds' records: what its median rests on
    sampled: bool = False  # epochs extrapolated from a few timed steps (the sampled protocol)


def _steady_epoch_seconds(record: dict) -> float | None:
    timing = record["timing"]
    value = timing.get("steady_epoch_seconds_median")
    if value is None:  # a one-epoch run: its only epoch
        seconds = [e["train_seconds"] for e in record.get("epochs") or []]
        value = statistics.median(seconds) if seconds else None
    return value


def _steady_epochs(record: dict) -> list[float]:
    return [e["train_seconds"] for e in record.get("epochs") or [] if not e.get("warmup") and e.get("train_seconds")]


def _sampled(record: dict) -> bool:
    return any(e.get("extrapolated") for e in record.get("epochs") or [])


def observations(records: Iterable[dict], source: str) -> list[Observation]:
    """Measured, non-sweep records -> one Observation per (model, device, variant), medians over seeds."""
    groups: dict[tuple, list[dict]] = {}
    for r in records:
        if r.get("status") != "measured" or r["key"].get("sweep"):
            continue
        k = r["key"]
        groups.setdefault((k["model"], k["device"], k["variant"]), []).append(r)
    out = []
    for (model, device, variant), rs in sorted(groups.items()):
        seconds = [s for s in (_steady_epoch_seconds(r) for r in rs) if s]
        if not seconds:
            continue
        first = rs[0]
        batch = first["settings"]["train"]["batch_size"]
        images = int(first["data"]["train_images"])
        waits = []
        for r in rs:
            profile = r.get("phase_profile") or {}
            step = profile.get("instrumented_step_seconds")
            if step:
                waits.append(profile["phase_seconds_per_step"]["data_wait"] / step)
        out.append(
            Observation(
                source=source,
                host_fingerprint=first["environment"].get("host_fingerprint"),
                model=model,
                device=device,
                variant=variant,
                epoch_seconds=float(statistics.median(seconds)),
                images=images,
                steps=math.ceil(images / batch),
                data_wait_fraction=float(statistics.median(waits)) if waits else None,
                seeds=len(rs),
                steady_epochs=min(max(len(_steady_epochs(r)), 1) for r in rs),
                sampled=any(_sampled(r) for r in rs),
            )
        )
    return out


def facts_for(observations_: Iterable[Observation], records_facts: dict[str, ModelFacts], facts: dict) -> dict:
    """modelfacts.json where it has the model, else what the records say."""
    return {o.model: facts.get(o.model) or records_facts[o.model] for o in observations_}


# ----------------------------------------------------------------------------- calibration


@dataclass
class Calibration:
    """The constants of one (device, variant): every one of them goes into the prediction tables."""

    device: str
    variant: str
    source: str  # "probe", "records", "probe scaled by records", "records, one rate"
    fixed_step_seconds: float = 0.0
    layer_seconds: float = 0.0
    seconds_per_flop: dict[str, float] = field(default_factory=dict)
    loader_seconds_per_image: float | None = None  # None: the input pipeline never limits (device loader)
    log_error: float = NOMINAL_LOG_ERROR  # leave-one-model-out RMS of log(predicted / measured), or nominal
    models: tuple[str, ...] = ()
    scale: float = 1.0  # "probe scaled by records": the factor applied to the probe's compute
    # a schema-3 probe's layer table: per registry model, the sum of its layer calls' measured seconds per image
    table_seconds_per_image: dict[str, float] = field(default_factory=dict)
    table_scale: float = 1.0  # fitted to records: measured compute / the table's (1 from the probe alone)
    optimizer_seconds_per_parameter: float = 0.0
    table_from: str = ""  # where the layer table's probe was made (a study folder), if not this host's own probe
    pipeline_sharpness: float | None = None  # p of (compute^p + loader^p)^(1/p); None: the slower of the two
    op_seconds: float = 0.0  # a GPU probe's price per dispatched op (its elementwise work included), if measured

    def constants(self) -> dict:
        out = asdict(self)
        out["models"] = ",".join(self.models)
        out["table_models"] = len(out.pop("table_seconds_per_image"))
        rates = out.pop("seconds_per_flop")
        for kind in KINDS:
            s = rates.get(kind)
            out[f"{kind}_flops_per_second"] = (1.0 / s) if s else None
        return out


def uses_table(cal: Calibration, model: str) -> bool:
    return model in cal.table_seconds_per_image


def compute_seconds(cal: Calibration, facts: ModelFacts, images: int, steps: int) -> float:
    """Compute seconds of an epoch: from the layer table where it has the model (the fixed step, the optimizer per
    parameter, the model's measured layers per image), else from FLOPs by kind and layers."""
    if uses_table(cal, facts.name):
        per_step = cal.fixed_step_seconds + cal.table_scale * facts.parameters * cal.optimizer_seconds_per_parameter
        per_image = cal.table_scale * cal.table_seconds_per_image[facts.name]
        return cal.scale * (steps * per_step + images * per_image)
    host, device = host_and_device_seconds(cal, facts, images, steps)
    if cal.op_seconds and facts.ops_per_step:
        # a GPU runs asynchronously: the host dispatches ops while the device works through those already queued,
        # so a step takes the longer of the two, not their sum
        return max(host, device)
    return host + device


def host_and_device_seconds(cal: Calibration, facts: ModelFacts, images: int, steps: int) -> tuple[float, float]:
    """An epoch's two parts where no layer table prices the model: the host's per step (the fixed step and each
    dispatched op, or each layer) and the FLOPs' per image by kind (compute_seconds: their sum, or on a GPU priced
    per op the larger of the two)."""
    kinds = facts.kind_flops()
    if cal.op_seconds and facts.ops_per_step:  # a GPU from its probe: launches per op, FLOPs beyond them
        per_step = cal.fixed_step_seconds + facts.ops_per_step * cal.op_seconds
        kinds["other"] = 0.0
    else:
        per_step = cal.fixed_step_seconds + (facts.layers or 0) * cal.layer_seconds
    dense = cal.seconds_per_flop.get("conv", 0.0)
    per_image = sum(flops * cal.seconds_per_flop.get(kind, dense) for kind, flops in kinds.items())
    return cal.scale * steps * per_step, cal.scale * images * per_image


def _pipeline(compute: float, loader: float, sharpness: float | None) -> float:
    """An epoch of two stages side by side: the slower one, or with a sharpness p their p-norm (never less)."""
    if sharpness is None or not loader or not compute:
        return max(compute, loader)
    top = max(compute, loader)
    return top * ((compute / top) ** sharpness + (loader / top) ** sharpness) ** (1.0 / sharpness)


def predict_epoch(cal: Calibration, facts: ModelFacts, images: int = 50_000, batch_size: int = 128) -> dict:
    steps = math.ceil(images / batch_size)
    compute = compute_seconds(cal, facts, images, steps)
    loader = images * cal.loader_seconds_per_image if cal.loader_seconds_per_image else 0.0
    return {
        "epoch_seconds": _pipeline(compute, loader, cal.pipeline_sharpness),
        "compute_seconds": compute,
        "loader_seconds": loader,
        "bound": "input pipeline" if loader > compute else "compute",
    }


def table_harness(probe: dict) -> int | None:
    """Which harness timed the layer table that prices the probe's device (a CPU's: from_probe), from
    layer_table.harness (1 where absent: records made before issue 27's fix); None where no table prices it. The two
    harnesses' tables are different quantities (gpuscale.measure.layertable): a ratio to one never transfers to
    the other (transfer.compatible)."""
    table = probe.get("layer_table") or {}
    if not str(probe.get("device", "")).startswith("cpu") or not table.get("models"):
        return None
    return int(table.get("harness", 1))


def from_probe(probe: dict, variant: str = "paper") -> Calibration:
    """A probe record -> the constants it measured (an eager, default-precision step; host DataLoader)."""
    if probe.get("status") != "measured":
        raise CostModelError(f"probe of {probe.get('device')} was not measured: {probe.get('not_measured_reason')}")
    rates = {k: v["flops_per_second"] for k, v in probe["kinds"].items() if v and v.get("flops_per_second")}
    if probe.get("schema_version", 1) < 2:  # counted by torch's formulas: grouped layers' rates in other units
        rates = {k: r for k, r in rates.items() if k not in ("depthwise_conv", "grouped_conv")}
    if "conv" not in rates:
        raise CostModelError("the probe record has no conv rate")
    # the pipeline as training sees it (a step on each batch) where the probe measured it (schema 3), else alone
    with_step = ((probe.get("input_pipeline") or {}).get("with_step") or {}).get("images_per_second")
    pipeline = with_step or probe.get("input_pipeline_images_per_second")
    # the layer table prices CPUs only: a GPU's isolated layers are launch-bound, the harness's own launches
    # (sum, backward call) included, and cost 2-4x what the same layers cost inside an asynchronous step
    # (H200, 2026-12-03); GPU probes no longer time it
    table = ((probe.get("layer_table") or {}).get("models") or {}) if probe["device"].startswith("cpu") else {}
    op_seconds = 0.0 if probe["device"].startswith("cpu") else _op_seconds(probe)
    seconds_per_flop = {k: 1.0 / r for k, r in rates.items()}
    if op_seconds > 0:  # each layer call's fixed cost is charged per op: its FLOPs at their marginal price only
        for kind in set(seconds_per_flop) - {"other"}:  # elementwise work: priced per op on a GPU
            marginal = marginal_seconds_per_flop(probe["kinds"][kind])
            seconds_per_flop[kind] = seconds_per_flop[kind] if marginal is None else marginal
    return Calibration(
        op_seconds=op_seconds,
        device=probe["device"],
        variant=variant,
        source="probe",
        fixed_step_seconds=float(probe["fixed_step_seconds"]),
        layer_seconds=float(probe.get("layer_seconds") or 0.0),
        seconds_per_flop=seconds_per_flop,
        loader_seconds_per_image=(1.0 / pipeline) if pipeline and variant == "paper" else None,
        table_seconds_per_image={name: float(m["seconds_per_image"]) for name, m in table.items()},
        optimizer_seconds_per_parameter=float(probe.get("optimizer_seconds_per_parameter") or 0.0),
    )


def marginal_seconds_per_flop(kind: dict) -> float | None:
    """A GPU kind's price per FLOP beyond each call's fixed cost (which the per-op cost already charges): the slope
    of its cases' seconds per step against their FLOPs (least squares), where two or more cases of different FLOPs
    fix it and the fit leaves a non-negative fixed share; 0 where the seconds do not grow with the FLOPs (the H200's
    depthwise cases took 220-250 us a step for 21-170 MFLOPs: launches, not arithmetic). None: the average rate
    stands (one case, or a fit with a negative fixed share)."""
    cases = [(float(m["train_flops"]), float(m["seconds_per_step"])) for m in kind.get("measurements") or []]
    if len({f for f, _ in cases}) < 2:
        return None
    slope, fixed = np.polyfit([f for f, _ in cases], [t for _, t in cases], 1)
    if fixed < 0:
        return None
    return max(float(slope), 0.0)


# The schema-3 probe's per-layer measurement before it recorded op_seconds: 16 conv + batch-norm + ReLU blocks
# (2 parameterised layers each) over a tiny model, 112 more ops dispatched in a training step and 33,032 more
# normalisation/activation output elements per image (tests/test_predict.py counts them on probe.stacked_model).
STACK_LAYERS, STACK_OPS, STACK_ELEMENTS_PER_IMAGE = 32, 112, 33_032


def _op_seconds(probe: dict) -> float:
    """A GPU probe's price per dispatched op: measured (op_seconds), or for a schema-3 record made before, what
    its per-layer measurement comes to per op with the stack's elementwise work (charged there at the probe's
    elementwise rate, which on a GPU times launches, not elements) put back. 0: price layers as before."""
    if probe.get("op_seconds") is not None:
        return float(probe["op_seconds"])
    other = (probe["kinds"].get("other") or {}).get("flops_per_second")
    if probe.get("schema_version", 1) < 3 or not other or probe.get("layer_seconds") is None:
        return 0.0
    elementwise = STACK_ELEMENTS_PER_IMAGE * probe["batch_size"] / other
    return (STACK_LAYERS * probe["layer_seconds"] + elementwise) / STACK_OPS


def nnls(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Non-negative least squares by dropping negative coefficients and refitting (small problems only)."""
    active = list(range(a.shape[1]))
    x = np.zeros(a.shape[1])
    while active:
        solution, *_ = np.linalg.lstsq(a[:, active], b, rcond=None)
        if (solution >= 0).all():
            x[active] = solution
            return x
        worst = active[int(np.argmin(solution))]
        active.remove(worst)
    return x


def _relative_nnls(rows: list[list[float]], targets: list[float]) -> np.ndarray:
    """NNLS on relative error (a 10 s epoch counts as much as a 1000 s one), the columns solved scaled (steps
    against images x FLOPs differ by orders of magnitude)."""
    a, b = np.array(rows, dtype=float), np.array(targets)
    weights = 1.0 / b
    a = a * weights[:, None]
    norms = np.linalg.norm(a, axis=0)
    norms[norms == 0] = 1.0
    return nnls(a / norms, b * weights) / norms


def _loader_bound(o: Observation) -> bool:
    return o.data_wait_fraction is not None and o.data_wait_fraction > LOADER_BOUND_WAIT_FRACTION


def _kind_ratio(prior: Calibration | None, kind: str) -> float:
    """Seconds per FLOP of `kind` relative to dense conv: from the probe, else 1."""
    if prior is None or kind not in prior.seconds_per_flop or "conv" not in prior.seconds_per_flop:
        return 1.0
    return prior.seconds_per_flop[kind] / prior.seconds_per_flop["conv"]


def _fit_constants(obs: list[Observation], facts: dict[str, ModelFacts], prior: Calibration | None):
    """NNLS of compute seconds on [steps, steps*layers, images*flops_k...]; returns (fixed, layer, rates)."""
    use_layers = all(facts[o.model].layers for o in obs)
    shares = {k: 0 for k in KINDS}
    for o in obs:
        kinds = facts[o.model].kind_flops()
        total = sum(kinds.values()) or 1.0
        for k in KINDS:
            shares[k] += kinds[k] / total >= MIN_KIND_SHARE
    own = [k for k in KINDS if k != "conv" and shares[k] >= MIN_MODELS_PER_KIND]
    columns, rows, targets = ["fixed", *(["layer"] if use_layers else []), "dense", *own], [], []
    for o in obs:
        f = facts[o.model]
        kinds = f.kind_flops()
        dense = sum(kinds[k] * _kind_ratio(prior, k) for k in KINDS if k not in own)
        row = [o.steps, *([o.steps * f.layers] if use_layers else []), o.images * dense]
        row += [o.images * kinds[k] for k in own]
        wait = o.data_wait_fraction or 0.0
        rows.append(row)
        targets.append(o.epoch_seconds * (1.0 - wait))  # compute only: the instrumented steps' share not waiting
    coef = dict(zip(columns, _relative_nnls(rows, targets), strict=True))
    rates = {k: coef["dense"] * _kind_ratio(prior, k) for k in KINDS if k not in own}
    rates.update({k: coef[k] for k in own})
    return coef["fixed"], coef.get("layer", 0.0), rates


def _fit_table(obs: list[Observation], facts: dict[str, ModelFacts], prior: Calibration) -> tuple[float, float]:
    """NNLS of compute seconds on [steps, the probe's layer table + optimizer]: (fixed seconds per step, the
    table's scale). Two constants: what a step costs beyond its layers, and how the table's isolated layers
    compare with the same layers inside the network on the measured host."""
    rows, targets = [], []
    for o in obs:
        table = o.images * prior.table_seconds_per_image[o.model]
        optimizer = o.steps * facts[o.model].parameters * prior.optimizer_seconds_per_parameter
        rows.append([o.steps, table + optimizer])
        targets.append(o.epoch_seconds * (1.0 - (o.data_wait_fraction or 0.0)))
    fixed, scale = _relative_nnls(rows, targets)
    return float(fixed), float(scale)


def _calibrate(
    compute: list[Observation],
    facts: dict[str, ModelFacts],
    prior: Calibration | None,
    device: str,
    variant: str,
) -> Calibration:
    """The compute constants from compute-bound observations: fitted on the probe's layer table where it has
    every model, else on FLOPs by kind and layers; with fewer than MIN_MODELS_FOR_FIT models the probe scaled by
    one factor, or without a probe one dense rate through the origin; with none the probe's (or nothing)."""
    based = {**asdict(prior), "device": device, "variant": variant} if prior is not None else None
    if len(compute) >= MIN_MODELS_FOR_FIT and prior is not None and all(uses_table(prior, o.model) for o in compute):
        fixed, table_scale = _fit_table(compute, facts, prior)
        return Calibration(
            **{
                **based,
                "source": f"records on the layer table of {prior.table_from}" if prior.table_from else TABLE_FIT,
                "fixed_step_seconds": fixed,
                "table_scale": table_scale,
            }
        )
    if len(compute) >= MIN_MODELS_FOR_FIT:
        fixed, layer, rates = _fit_constants(compute, facts, prior)
        return Calibration(device, variant, "records", fixed, layer, rates)
    if compute and prior is not None:
        ratios = [o.epoch_seconds / compute_seconds(prior, facts[o.model], o.images, o.steps) for o in compute]
        return Calibration(**{**based, "source": "probe scaled by records", "scale": float(statistics.median(ratios))})
    if compute:
        per_flop = statistics.median(
            o.epoch_seconds / (o.images * facts[o.model].train_flops_per_image) for o in compute
        )
        return Calibration(device, variant, "records, one rate", 0.0, 0.0, {"conv": per_flop})
    return Calibration(**based) if based else Calibration(device, variant, "records, loader only")


def fit(
    obs: list[Observation],
    facts: dict[str, ModelFacts],
    prior: Calibration | None = None,
    device: str | None = None,
    variant: str | None = None,
    self_check: bool = True,
) -> Calibration:
    """Constants of one (device, variant) from its measured observations (same host), the probe as prior.

    Loader-bound observations set the input pipeline's seconds per image and are left out of the compute
    fit. With fewer than MIN_MODELS_FOR_FIT compute-bound models: the probe scaled by one factor, or without
    a probe one dense rate through the origin.
    """
    if not obs:
        if prior is None:
            raise CostModelError("nothing to calibrate from: no probe record and no measured records")
        return prior
    device, variant = device or obs[0].device, variant or obs[0].variant
    bound = [o for o in obs if _loader_bound(o)]
    compute = [o for o in obs if not _loader_bound(o)]
    if bound:
        loader = statistics.median(o.epoch_seconds / o.images for o in bound)
    else:
        loader = prior.loader_seconds_per_image if prior else None
    models = tuple(sorted(o.model for o in obs))
    cal = _calibrate(compute, facts, prior, device, variant)
    cal.loader_seconds_per_image, cal.models = loader, models
    if not compute:  # loader-bound only: the compute side is the probe's, or unknown
        cal.source = f"{cal.source}; loader from records"
    if bound and compute and len(set(models)) >= MIN_MODELS_FOR_FIT and not device.startswith("cpu"):
        _fit_sharpness(cal, obs, bound, facts)
    if self_check and len({o.model for o in obs}) > MIN_MODELS_FOR_FIT:
        errors = []
        for o in obs:
            rest = [x for x in obs if x.model != o.model]
            held = fit(rest, facts, prior, device, variant, self_check=False)
            predicted = predict_epoch(held, facts[o.model], o.images, math.ceil(o.images / o.steps))
            errors.append(math.log(predicted["epoch_seconds"] / o.epoch_seconds))
        cal.log_error = float(np.sqrt(np.mean(np.square(errors))))
    return cal


def _fit_sharpness(cal: Calibration, obs: list[Observation], bound: list[Observation], facts: dict) -> None:
    """The pipeline's sharpness from PIPELINE_SHARPNESS_GRID that fits every observation best (least squares of log
    errors; the slower stage unless another is strictly better), and with it the input pipeline's own rate: a
    loader-bound epoch E whose steps computed E x (1 - wait) carried (E^p - (E(1 - wait))^p)^(1/p) of loading."""

    def loading(o: Observation, p: float | None) -> float:  # a loader-bound epoch's loading, per image
        if p is None:
            return o.epoch_seconds / o.images
        computed = o.epoch_seconds * (1.0 - (o.data_wait_fraction or 0.0))
        return (o.epoch_seconds**p - computed**p) ** (1.0 / p) / o.images

    best = None
    for p in PIPELINE_SHARPNESS_GRID:
        per_image = statistics.median(loading(o, p) for o in bound)
        trial = replace(cal, pipeline_sharpness=p, loader_seconds_per_image=per_image)
        error = sum(
            math.log(
                predict_epoch(trial, facts[o.model], o.images, math.ceil(o.images / o.steps))["epoch_seconds"]
                / o.epoch_seconds
            )
            ** 2
            for o in obs
        )
        if best is None or error < best[0] - 1e-12:
            best = (error, p, trial.loader_seconds_per_image)
    cal.pipeline_sharpness, cal.loader_seconds_per_image = best[1], best[2]


def speedup(cpu: dict, gpu: dict, cpu_cal: Calibration, gpu_cal: Calibration) -> dict:
    """CPU epoch / GPU epoch, with a band from the two calibrations' log errors combined."""
    value = cpu["epoch_seconds"] / gpu["epoch_seconds"]
    width = math.hypot(cpu_cal.log_error, gpu_cal.log_error)
    return {"speedup": value, "speedup_low": value * math.exp(-width), "speedup_high": value * math.exp(width)}


# ----------------------------------------------------------------------------- a timing job's duration


def job_seconds(
    cal: Calibration,
    facts: ModelFacts,
    epochs: int,
    train_images: int,
    test_images: int,
    batch_size: int,
    max_steps_per_epoch: int | None = None,
    phase_profile_steps: int = 0,
) -> float:
    """Predicted wall seconds of one timing job: per epoch the steps it times (all, or the sampled
    protocol's max_steps_per_epoch) plus a forward-only evaluation (a third of a training step's FLOPs),
    then the phase profile's instrumented steps."""
    steps = math.ceil(train_images / batch_size)
    timed = min(steps, max_steps_per_epoch) if max_steps_per_epoch else steps
    epoch = predict_epoch(cal, facts, train_images, batch_size)["epoch_seconds"]
    evaluation = (
        cal.scale
        * test_images
        * sum(
            flops * cal.seconds_per_flop.get(kind, cal.seconds_per_flop.get("conv", 0.0))
            for kind, flops in facts.kind_flops().items()
        )
        / 3
    )
    per_step = epoch / steps
    return epochs * (per_step * timed + evaluation) + phase_profile_steps * per_step
