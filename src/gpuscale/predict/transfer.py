"""Prediction across machine leases: the records of other leases set the shape, the lease's own probe the level.

A lease (one boot of the machine) has its own pace: the same H200 kind ran one `paper` GPU epoch 3.3 s in one
lease and 9.1 s in another. Constants fitted on other leases' records predict an average lease, not this one.
So a lease's prediction starts from its own probe (`costmodel.from_probe`: what a step costs here, now) and
takes from the records of other leases only what a probe gets wrong the same way everywhere: per model and
device, the ratio of a measured epoch to what that record's own lease's probe predicted for it. A ratio is
dimensionless, so no record of another lease ever sets this lease's level. docs/prediction.md has the arithmetic.

    base_T(m, d)  = costmodel.predict_epoch(from_probe(probe_T[d]), m)
    ratio_L(m, d) = measured_L(m, d) / base_L(m, d)                  for every other lease L with a probe of d
    c(m, d)       = exp(w * mean log ratio_L(m, d) + (1 - w) * target_d(m))   where leases measured m on d,
                    exp(target_d(m)) where none did                  (`shape: model` / `shape: device`)
    target_d(m)   = a + b * x_m where the models' mean log ratios on d follow their layers per op x (a least-squares
                    line through 5 or more models whose slope a two-sided t test at 5% tells from 0: fit_line),
                    else centre_d, the median over models of their mean log ratio on d
    w             = tau² / (tau² + sd² / n): n leases measured m; sd the lease-to-lease spread of a ratio,
                    tau how much models truly differ beyond it (about the line where there is one; empirical Bayes
                    shrinkage: one lease's ratio carries that lease's noise, so it moves the model only as far as
                    models differ)
    predicted     = base_T(m, d) * c(m, d)

The band is exp(±Z * e) with e = sqrt(shape_sd² + model_sd² + (share * pace_sd)²): shape_sd, how far one lease's
ratio for a model strays from the other leases' (pooled over models measured in two or more leases; the ratios' own
spread where none is); model_sd, for a model no lease measured (its target knows nothing of its own shape: a user's
model), tau and the line's standard error at its x in quadrature, for one they did that standard error as far as its
correction leans on the line ((1 - w) se; 0 without a line); pace_sd, how far the host's input pipeline moves within
one lease (the larger of the pooled within-lease sd of the calibration leases' sentinel pipeline rates, taken before
and after every job, and half the log of the spread of this probe's loader passes): within one lease the host's
pipeline moves from minute to minute, the GPU does not; share, the chance that the pipeline is the slower stage
under that movement (pipeline_share). A speedup's band combines its two epochs' e. Z = 1.645: a 90% band were the
log errors normal. Where the leases whose probes were made the same way measured fewer than MIN_CALIBRATION_MODELS
models on the device, there is no shape: the probe alone predicts, with its nominal band (probe_alone), in the
predict stage and in research/prediction/'s leave-one-lease-out alike.

Torch-free (numpy through costmodel).
"""

from __future__ import annotations

import logging
import math
import statistics
from dataclasses import dataclass, field
from pathlib import Path

from gpuscale.contract import probekind
from gpuscale.predict import costmodel as cm

log = logging.getLogger("gpuscale.predict")

Z = 1.645
MIN_SHAPE_SD = 0.05  # a band never narrower than ±8%: two leases agreeing closely is not proof of more
# A device's shape needs the calibration leases to have measured this many models on it: with fewer, the device's
# centre is one or two models' quirks (lease H's one model set every CPU ratio of lease G, 2026-12-06), and the
# probe alone does better.
MIN_CALIBRATION_MODELS = 3
# A line of the ratios against the models' structure (fit_line) needs this many models: a slope through fewer is
# their quirk
MIN_LINE_MODELS = 5
# ... and a slope that a two-sided t test at this level tells from 0 (t = slope sqrt(sxx) / residual against the t
# distribution's quantile at k - 2 degrees of freedom: 3.18 for 5 models, 2.23 for 12). A weaker gate (t >= 1, adjusted
# R² above 0) let lines through on the CPU, where no mechanism ties the ratio to layers per op, and cut the CPU's
# coverage on the H200 leases probed as today from 86% to 71%; t >= 2 still let a few through where each model is also
# left out of the other leases (docs/prediction.md, "The target by the model's structure")
LINE_TEST_LEVEL = 0.05


@dataclass
class Lease:
    """One machine lease: its probes (by device) and its measured `paper` observations."""

    name: str
    probes: dict[str, dict]
    observations: list[cm.Observation] = field(default_factory=list)
    # log images/s of the sentinel's input pipeline (pipeline_workers) before and after each of its jobs: how far
    # the host's pipeline pace moved within the lease, minute to minute
    pipeline_logs: list[float] = field(default_factory=list)

    def probe_kind(self, device: str) -> tuple:
        """What the probe measured, as far as the ratios depend on it: its schema, its input pipeline's data and
        the harness of the layer table that prices a CPU (costmodel.table_harness; None where none does)."""
        probe = self.probes.get(device) or {}
        pipeline = pipeline_of(probe)
        return probe.get("schema_version"), pipeline.get("source", probekind.SYNTHETIC), cm.table_harness(probe)

    def probed_as_today(self) -> bool:
        """Whether the lease's probes were made as the tool makes them now: a CPU and a GPU probe, each timing the
        input pipeline on the prepared data, the CPU's layer table by the current harness (probekind)."""
        kinds = {device: self.probe_kind(device) for device in self.probes}
        return (
            "cpu" in kinds
            and len(kinds) >= 2
            and all(kind[1] == probekind.PREPARED_DATA for kind in kinds.values())
            and kinds["cpu"][2] == probekind.LAYER_TABLE_HARNESS
        )


def _measured(probe: dict | None) -> bool:
    return bool(probe) and probe.get("status") == "measured"


def leases_of(folder: Path | str, load_records, load_probes) -> list[Lease]:
    """The leases a study folder holds: `<folder>/leases/<id>/` each with probe/ and runs/ (a paired reference),
    or the folder itself when it has a probe/ (a study made in one lease). Folders without probes give none:
    without its own probe a lease's ratios cannot be taken."""
    folder = Path(folder)
    units = (
        [d for d in sorted((folder / "leases").glob("*")) if (d / "probe").is_dir()]
        if (folder / "leases").is_dir()
        else []
    )
    if not units and (folder / "probe").is_dir():
        units = [folder]
    out = []
    for unit in units:
        probes = load_probes(sorted((unit / "probe").glob("*.json")))
        probes = {d: p for d, p in probes.items() if _measured(p)}
        records = load_records(unit)
        obs = [o for o in cm.observations(records, str(unit)) if o.variant == "paper"]
        if probes and obs:
            out.append(Lease(str(unit), probes, obs, sentinel_logs(records, "pipeline_workers")))
    return out


def sentinel_logs(records: list[dict], name: str) -> list[float]:
    """log of one sentinel component's value (pipeline_workers, gpu_launch, ...) before and after each record's job
    (gpuscale.measure.sentinel)."""
    out = []
    for r in records:
        for side in ("before", "after"):
            component = (((r.get("conditions") or {}).get(side) or {}).get("components") or {}).get(name)
            value = (component or {}).get("value")
            if isinstance(value, (int, float)) and value > 0:
                out.append(math.log(value))
    return out


def base_epoch(probe: dict, facts: cm.ModelFacts, images: int, batch_size: int) -> dict:
    """The probe-alone prediction of one model's `paper` epoch (costmodel.predict_epoch on from_probe)."""
    return cm.predict_epoch(cm.from_probe(probe), facts, images, batch_size)


def ratios(lease: Lease, facts: dict[str, cm.ModelFacts], device: str) -> dict[str, float]:
    """model -> measured epoch / the lease's own probe's prediction of it, on `device`."""
    probe = lease.probes.get(device)
    if not _measured(probe):
        return {}
    out = {}
    for o in lease.observations:
        if o.device == device and o.model in facts:
            base = base_epoch(probe, facts[o.model], o.images, math.ceil(o.images / o.steps))["epoch_seconds"]
            if base > 0:
                out[o.model] = o.epoch_seconds / base
    return out


def layers_per_op(facts: cm.ModelFacts) -> float | None:
    """The model's convolution, linear and attention layers per computing op dispatched in a training step (None
    where its facts lack either count): how far its ops are the layers a probe's conv-norm-ReLU stack prices, and not
    concatenations, attention's matmuls, elementwise and normalisation ops that cost a device otherwise."""
    if not facts.layers or not facts.ops_per_step:
        return None
    return facts.layers / facts.ops_per_step


@dataclass(frozen=True)
class Line:
    """The calibration models' mean log ratios on one device, least-squares against their layers per op: the
    device's centre for a model of that structure. tau: the models' spread about the line beyond a lease's noise;
    residual: the spread of their mean log ratios about it (the line's own uncertainty at x is residual *
    sqrt(1/count + (x - x_mean)² / sxx), which widens a model's band the farther x lies from the measured models');
    the line is followed up to half the measured range [low, high] beyond either end, and held flat past that: a
    model's structure far from every measured one's is no place to trust a slope."""

    intercept: float
    slope: float
    x_mean: float
    sxx: float
    count: int
    low: float
    high: float
    residual: float
    tau: float

    def at(self, x: float) -> tuple[float, float]:
        """The line's log ratio at x (held within half the measured range beyond its ends) and its standard error
        at x."""
        reach = (self.high - self.low) / 2
        held = min(max(x, self.low - reach), self.high + reach)
        se = self.residual * math.sqrt(1.0 / self.count + (x - self.x_mean) ** 2 / self.sxx)
        return self.intercept + self.slope * held, se


@dataclass
class Shape:
    """What the calibration leases say of one device: per model its ratios, the spread of one lease's ratio about
    the model's own (sd), and how much models truly differ (tau, the between-model sd net of that noise); line,
    where their ratios follow the models' layers per op by a slope a t test tells from 0 (fit_line), the target by
    structure."""

    device: str
    leases: tuple[str, ...]
    by_model: dict[str, list[float]]
    sd: float
    tau: float = 0.0
    pipeline_sd: float = 0.0  # the input pipeline's pace within a lease (log sd, pooled over the leases' sentinels)
    line: Line | None = None

    def centre(self) -> float:
        """The device's typical log ratio: the median over models of each model's mean log ratio."""
        means = [statistics.fmean(math.log(r) for r in rs) for rs in self.by_model.values() if rs]
        return statistics.median(means) if means else 0.0

    def by_structure(self, x: float | None) -> bool:
        """Whether a model of layers per op x (None: unknown) is priced by the line."""
        return self.line is not None and x is not None

    def _target(self, x: float | None) -> tuple[float, float, float]:
        """Where a model of layers per op x is shrunk to: its log ratio, that value's standard error and the
        models' spread about it (tau): the line at x where there is one and x is known, else the centre."""
        if self.by_structure(x):
            value, se = self.line.at(x)
            return value, se, self.line.tau
        return self.centre(), 0.0, self.tau

    def model_sd(self, basis: str, x: float | None = None, model: str | None = None) -> float:
        """How far this lease's model may stray from its correction beyond the lease-to-lease spread: for a model
        no lease measured (its correction knows nothing of its own shape), the models' spread about its target
        (tau) and the line's own uncertainty at x in quadrature; for a measured one, the line's uncertainty as far
        as its correction leans on the line, (1 - w) se (0 with no line: its own ratios carry the rest)."""
        _, se, tau = self._target(x)
        if basis == "device":
            return math.hypot(tau, se)
        if basis == "model" and model is not None:
            return (1.0 - self._weight(model, tau)) * se
        return 0.0

    def _weight(self, model: str, tau: float) -> float:
        """w = tau² / (tau² + sd² / n): how far the model's own mean log ratio over its n leases counts against its
        target (0 where tau is 0: the models differ no more than a lease's noise)."""
        n = len(self.by_model.get(model, []))
        if not n or tau <= 0:
            return 0.0
        return tau**2 / (tau**2 + self.sd**2 / n)

    def correction(self, model: str, x: float | None = None) -> tuple[float, str]:
        """exp of the model's mean log ratio shrunk towards its target (the line at its layers per op x, else the
        device's centre) by w (_weight; empirical Bayes: one lease's ratio carries that lease's noise); the target
        alone for a model no lease measured."""
        logs = [math.log(r) for r in self.by_model.get(model, [])]
        if not self.by_model:
            return 1.0, "none"
        target, _, tau = self._target(x)
        if not logs:
            return math.exp(target), "device"
        weight = self._weight(model, tau)
        return math.exp(weight * statistics.fmean(logs) + (1.0 - weight) * target), "model"


def fit_line(means: dict[str, tuple[float, int]], facts: dict[str, cm.ModelFacts], sd: float) -> Line | None:
    """The least-squares line of the models' mean log ratios (model -> (mean, leases)) against their layers per op,
    where MIN_LINE_MODELS models have both and a two-sided t test at LINE_TEST_LEVEL tells the slope from 0 (a slope
    the models' scatter could draw is no shape); else None. tau: the residual spread per degree of freedom net of a
    lease's noise, as shape() nets the between-model spread."""
    points = [(x, m, n) for model, (m, n) in means.items() if (x := _x(facts, model)) is not None]
    if len(points) < MIN_LINE_MODELS:
        return None
    xs, ys = [p[0] for p in points], [p[1] for p in points]
    k, x_mean = len(points), statistics.fmean(xs)
    sxx = sum((x - x_mean) ** 2 for x in xs)
    if sxx <= 0 or max(ys) - min(ys) < 1e-9:  # one structure, or every model alike: nothing for a slope to tell
        return None
    slope, intercept = statistics.linear_regression(xs, ys)
    left = sum((y - intercept - slope * x) ** 2 for x, y in zip(xs, ys, strict=True)) / (k - 2)
    t = abs(slope) * math.sqrt(sxx / left) if left > 0 else (math.inf if slope else 0.0)
    if t < t_quantile(1 - LINE_TEST_LEVEL / 2, k - 2):
        return None
    tau = math.sqrt(max(left - sd**2 * statistics.fmean(1.0 / p[2] for p in points), 0.0))
    return Line(intercept, slope, x_mean, sxx, k, min(xs), max(xs), math.sqrt(left), tau)


def _x(facts: dict[str, cm.ModelFacts], model: str) -> float | None:
    return layers_per_op(facts[model]) if model in facts else None


def t_quantile(p: float, freedom: int) -> float:
    """Student's t distribution's p quantile at `freedom` degrees of freedom, by the normal quantile's expansion
    (Abramowitz and Stegun 26.7.5, four terms: within 0.005 of the tables from 3 degrees of freedom up)."""
    z = statistics.NormalDist().inv_cdf(p)
    n = float(freedom)
    terms = (
        (z**3 + z) / 4,
        (5 * z**5 + 16 * z**3 + 3 * z) / 96,
        (3 * z**7 + 19 * z**5 + 17 * z**3 - 15 * z) / 384,
        (79 * z**9 + 776 * z**7 + 1482 * z**5 - 1920 * z**3 - 945 * z) / 92160,
    )
    return z + sum(term / n ** (i + 1) for i, term in enumerate(terms))


def shape(calibration: list[Lease], facts: dict[str, cm.ModelFacts], device: str) -> Shape:
    """The device's ratios over the calibration leases, their lease-to-lease spread (log sd) and the between-model
    spread net of it (tau)."""
    by_model: dict[str, list[float]] = {}
    used = []
    for lease in calibration:
        got = ratios(lease, facts, device)
        if got:
            used.append(lease.name)
        for model, r in got.items():
            by_model.setdefault(model, []).append(r)
    deviations = []  # each lease's log ratio from the mean of the others, for models measured in 2+ leases
    for rs in by_model.values():
        if len(rs) >= 2:
            logs = [math.log(r) for r in rs]
            for i, x in enumerate(logs):
                rest = logs[:i] + logs[i + 1 :]
                deviations.append(x - statistics.fmean(rest))
    if len(deviations) >= 3:
        # x - mean(rest) has variance sd² (1 + 1/(k-1)); pooled with k the model's leases
        scale = [len(rs) / (len(rs) - 1) for rs in by_model.values() if len(rs) >= 2 for _ in rs]
        sd = math.sqrt(statistics.fmean(d * d / c for d, c in zip(deviations, scale, strict=True)))
    else:  # no model in two leases: how much the ratios differ at all
        every = [math.log(r) for rs in by_model.values() for r in rs]
        sd = statistics.pstdev(every) if len(every) >= 2 else cm.NOMINAL_LOG_ERROR
    sd = max(sd, MIN_SHAPE_SD)
    named = {model: (statistics.fmean(math.log(r) for r in rs), len(rs)) for model, rs in by_model.items() if rs}
    means = list(named.values())
    tau = 0.0
    if len(means) >= 3:
        between = statistics.variance([m for m, _ in means])  # unbiased (k-1), as the line's residual is (k-2)
        tau = math.sqrt(max(between - sd**2 * statistics.fmean(1.0 / n for _, n in means), 0.0))
    pace = _pooled_sd([lease.pipeline_logs for lease in calibration])
    return Shape(device, tuple(used), by_model, sd, tau, pace, fit_line(named, facts, sd))


def _pooled_sd(groups: list[list[float]]) -> float:
    """The within-group standard deviation pooled over groups of two or more values (0 where none)."""
    sums = [(sum((x - statistics.fmean(g)) ** 2 for x in g), len(g) - 1) for g in groups if len(g) >= 2]
    freedom = sum(n for _, n in sums)
    return math.sqrt(sum(v for v, _ in sums) / freedom) if freedom else 0.0


def pipeline_of(probe: dict) -> dict:
    """The probe's input-pipeline measurement: with a step where it timed one (schema 3), else the plain one ({}
    where none)."""
    return (probe.get("input_pipeline") or {}).get("with_step") or probe.get("input_pipeline") or {}


def pipeline_sd(probe: dict) -> float:
    """Half the log of the spread of the probe's input-pipeline passes (0 where the probe kept no passes)."""
    pipeline = pipeline_of(probe)
    spread = pipeline.get("spread")
    return 0.5 * math.log1p(spread) if spread else 0.0


def pipeline_share(compute: float, loader: float, sd: float) -> float:
    """How far the epoch follows the input pipeline's pace: the chance that the loader is the slower stage when
    its pace moves by a log-normal of `sd` (1 well past the crossover, 1/2 at it, 0 far below; the slower stage
    when sd is 0)."""
    if not loader:
        return 0.0
    if not compute:
        return 1.0
    margin = math.log(loader / compute)
    if sd <= 0:
        return 1.0 if margin > 0 else 0.0
    return 0.5 * (1.0 + math.erf(margin / (sd * math.sqrt(2.0))))


def predict(probe: dict, shape_: Shape, facts: cm.ModelFacts, images: int = 50_000, batch_size: int = 128) -> dict:
    """One model's epoch on the probe's device, in the probe's lease: the probe's level times the leases' shape."""
    base = base_epoch(probe, facts, images, batch_size)
    x = layers_per_op(facts)
    c, basis = shape_.correction(facts.name, x)
    pace = max(shape_.pipeline_sd, pipeline_sd(probe))
    share = pipeline_share(base["compute_seconds"], base["loader_seconds"], pace)
    e = math.sqrt(shape_.sd**2 + shape_.model_sd(basis, x, facts.name) ** 2 + (share * pace) ** 2)
    value = base["epoch_seconds"] * c
    return {
        "epoch_seconds": value,
        "low": value * math.exp(-Z * e),
        "high": value * math.exp(Z * e),
        "log_error": e,
        "base_seconds": base["epoch_seconds"],
        "correction": c,
        "shape": basis,
        "target": "layers per op" if shape_.by_structure(x) else "median",
        "bound": base["bound"],
        "pipeline_share": share,
    }


def speedup(cpu: dict, gpu: dict) -> dict:
    value = cpu["epoch_seconds"] / gpu["epoch_seconds"]
    e = math.hypot(cpu["log_error"], gpu["log_error"])
    return {"speedup": value, "low": value * math.exp(-Z * e), "high": value * math.exp(Z * e), "log_error": e}


def compatible(target: Lease | dict, others: list[Lease], device: str) -> list[Lease]:
    """The calibration leases whose probe of `device` measured what the target's did (same schema, same input
    pipeline data, a CPU's layer table timed by the same harness): a ratio to a probe transfers only to a probe
    made the same way. None: no transfer."""
    kind = target.probe_kind(device) if isinstance(target, Lease) else Lease("", {device: target}).probe_kind(device)
    return [lease for lease in others if device in lease.probes and lease.probe_kind(device) == kind]


def enough(calibration: list[Lease], device: str) -> bool:
    """Whether the calibration leases measured enough models on `device` (MIN_CALIBRATION_MODELS) to give a shape."""
    models = {o.model for lease in calibration for o in lease.observations if o.device == device}
    return len(models) >= MIN_CALIBRATION_MODELS


def probe_alone(probe: dict, facts: cm.ModelFacts, images: int = 50_000, batch_size: int = 128) -> dict:
    """One model's epoch from the probe alone (no lease gives a shape), with the probe's nominal band
    exp(±costmodel.NOMINAL_LOG_ERROR): what the predict stage gives where no lease qualifies."""
    cal = cm.from_probe(probe)
    p = cm.predict_epoch(cal, facts, images, batch_size)
    e = cal.log_error
    p.update(low=p["epoch_seconds"] * math.exp(-e), high=p["epoch_seconds"] * math.exp(e), log_error=e)
    p["shape"] = "probe"
    return p
