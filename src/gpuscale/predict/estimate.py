"""Before the first training job: each pending timing job's predicted duration and the total.

From this host's probe records where they exist (results/probe/<device>.json, same host fingerprint),
else from a quick rate check (a probe of a few seconds); model facts from modelfacts.json, else counted
on the model (torch). Printed by the workflow's onstart handler; past an hour it names the faster routes.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

from gpuscale.contract import fsutil
from gpuscale.contract import params as params_mod
from gpuscale.contract.settings import Params, RunSettings
from gpuscale.measure import envinfo
from gpuscale.predict import costmodel as cm

log = logging.getLogger("gpuscale.estimate")

HOUR = 3600.0
# The workflow's onstart writes the plan (record -> predicted seconds) here and names it in this variable,
# so each training job's progress lines can add the predicted seconds of the jobs still to come.
from gpuscale.measure.eta import PLAN_ENV, study_eta_seconds  # noqa: E402, F401 (the study ETA training prints)

FASTER_ROUTES = (
    "the quick preset (a 5,000-image subset, 1 sampled epoch, CPU, a few minutes: `make quick`, or"
    " `gpuscale use config/quick.yaml` then `snakemake --cores 2`)",
    "the sampled protocol (an overlay with `train: {max_steps_per_epoch: 20}`: each epoch times 20 steps and"
    " extrapolates, labelled everywhere)",
    "the predict preset (probe and predictions only, no training, a few minutes:"
    " `gpuscale use config/predict.yaml` then `snakemake --cores 2`)",
)


# What the jobs run besides the timed steps, evaluation and phase profile (job_seconds): fixed allowances, from the
# quick preset's jobs on a 2-core CPU host (2026-12-08), not from the cost model; each said as such where printed.
JOB_START_SECONDS = 10.0  # a timing job's process: torch's import, the prepared data read, the model built
PROBE_OVERHEAD_SECONDS = 15.0  # a probe job besides its predict.probe_seconds budget (start, the models' layer table)
DATA_SECONDS = 10.0  # the data stage: start, plus DATA_SECONDS_PER_IMAGE per image prepared
DATA_SECONDS_PER_IMAGE = 0.002  # a decoded, checked and written 32x32 image (the JPEG zip's; synthetic is faster)
LIGHT_STAGE_SECONDS = {"aggregate": 20.0, "predict": 10.0, "charts": 25.0, "report": 20.0}


# Amdahl's parallel fraction of a CPU training step, for jobs that run on fewer threads than the probe did
# (the thread sweep): the reference study's thread sweep fitted 0.71 to 0.91 for its three models.
CPU_PARALLEL_FRACTION = 0.9


def thread_factor(job_threads: int | None, probe_threads: int | None) -> float:
    """How much longer a CPU step takes on job_threads than on the probe's threads (Amdahl, P = 0.9)."""
    if not job_threads or not probe_threads or job_threads == probe_threads:
        return 1.0
    p = CPU_PARALLEL_FRACTION
    return ((1 - p) + p / job_threads) / ((1 - p) + p / probe_threads)


def pending_jobs(config: Params | dict, root: Path = Path(".")) -> list[dict]:
    """Timing jobs of the study and its sweeps whose record does not exist yet, with their settings (dict and
    typed: `run`)."""
    config = Params.of(config)
    jobs = []
    for key in params_mod.run_keys(config):
        path = params_mod.record_path(**key)
        if not (root / path).exists():
            settings = params_mod.run_settings(config, key["model"], key["device"], key["variant"], key["seed"])
            jobs.append({"record": path, "settings": settings, "run": RunSettings.from_dict(settings), **key})
    for key in params_mod.sweep_keys(config):
        path = params_mod.sweep_record_path(**key)
        if not (root / path).exists():
            settings = params_mod.sweep_settings(
                config, key["model"], key["device"], key["parameter"], key["value"], key["variant"], key["seed"]
            )
            jobs.append({"record": path, "settings": settings, "run": RunSettings.from_dict(settings), **key})
    return jobs


def model_facts(names: set[str]) -> dict[str, cm.ModelFacts]:
    facts = cm.load_facts()
    missing = sorted(n for n in names if n not in facts)
    if missing:  # counted on the model: a few seconds per model, torch
        from gpuscale.models import nets
        from gpuscale.models import registry as models
        from gpuscale.models import spec as model_spec
        from gpuscale.models.facts import spec_facts

        for name in missing:
            if model_spec.is_spec(name):  # the study's own model: its cached facts (kinds and layers included)
                entry = spec_facts(name)
                facts[name] = cm.ModelFacts(
                    name,
                    int(entry["parameters"]),
                    float(entry["train_flops_per_image"]),
                    flops_by_kind=entry["flops_by_kind"],
                    layers=entry["layers"],
                    family=entry["family"],
                    ops_per_step=entry["ops_per_step"],
                )
                continue
            model = models.build(name)
            layers = sum(
                1 for m in model.modules() if not list(m.children()) and any(True for _ in m.parameters(False))
            )
            facts[name] = cm.ModelFacts(
                name,
                nets.parameter_count(model),
                float(nets.flops_per_image(model)["train_flops_per_image"]),
                layers=layers,
            )
    return facts


def calibration(
    device: str, config: Params, probe_dir: Path, quick_seconds: float
) -> tuple[cm.Calibration | None, str, int | None]:
    """(constants, where they came from, the probe's threads)."""
    path = probe_dir / f"{device}.json"
    if path.exists():
        doc = json.loads(path.read_text())
        if doc.get("environment", {}).get("host_fingerprint") == envinfo.host_fingerprint():
            if doc.get("status") != "measured":
                return None, f"not measured ({doc.get('not_measured_reason')})", None
            return cm.from_probe(doc), f"probe {path}", doc.get("threads")
    from gpuscale.measure import probe

    doc = probe.run(device, config.train, quick_seconds, quick=True)
    if doc["status"] != "measured":
        return None, f"not measured ({doc['not_measured_reason']})", None
    return cm.from_probe(doc), f"quick rate check ({quick_seconds:g} s)", doc["threads"]


def other_jobs(config: Params, jobs: list[dict], root: Path = Path(".")) -> list[tuple[str, float]]:
    """(job, seconds) of what the workflow runs besides the pending timing jobs: the data stage, the probes and the
    light stages (tables, predictions, charts, report), where their outputs are missing or timing jobs are pending."""
    from gpuscale.contract.settings import DeviceSpec

    out = []
    data = config.data
    if not (root / "data/prepared").exists():
        images = (data.train_size or 50_000) + (data.test_size or 10_000)
        out.append(("data/prepared", DATA_SECONDS + DATA_SECONDS_PER_IMAGE * images))
    devices = sorted({DeviceSpec.parse(d).per_process for d in config.study.devices})
    for device in devices:
        if not (root / f"results/probe/{device}.json").exists():
            out.append((f"results/probe/{device}.json", config.predict.probe_seconds + PROBE_OVERHEAD_SECONDS))
    if jobs or not (root / "reports/index.html").exists():
        out += [(f"the {name} stage", seconds) for name, seconds in LIGHT_STAGE_SECONDS.items()]
    return out


def human(seconds: float) -> str:
    if seconds >= HOUR:
        return f"{seconds / HOUR:.1f} h"
    if seconds >= 60:
        return f"{seconds / 60:.1f} min"
    return f"{seconds:.0f} s"


def run(
    config: Params | dict,
    probe_dir: Path = Path("results/probe"),
    quick_seconds: float = 3.0,
    echo=print,
    plan: Path | None = None,
) -> float:
    """Print each pending timing job's predicted duration and the total; returns the total seconds.
    plan: also write {"jobs": {record: seconds}} there (logs/study-plan.json under the workflow)."""
    config = Params.of(config)
    jobs = pending_jobs(config)
    planned: dict[str, float] = {}
    if plan is not None:
        fsutil.write_json(plan, {"jobs": planned})
    if not jobs:
        return 0.0
    facts = model_facts({j["model"] for j in jobs})
    cals = {d: calibration(d, config, probe_dir, quick_seconds) for d in sorted({j["device"] for j in jobs})}
    total = 0.0
    echo(f"gpuscale: predicted duration of the {len(jobs)} timing jobs to run (cost model, docs/prediction.md):")
    for job in jobs:
        cal, how, probe_threads = cals[job["device"]]
        train = job["run"].train
        if cal is None:
            echo(f"  {job['record']}: ~0 s, device {how}")
            continue
        data = config.data
        seconds = JOB_START_SECONDS + cm.job_seconds(
            cal,
            facts[job["model"]],
            train.epochs,
            data.train_size or 50_000,
            data.test_size or 10_000,
            train.batch_size,
            train.max_steps_per_epoch,
            train.phase_profile_steps,
        )
        if job["device"] == "cpu":
            seconds *= thread_factor(train.cpu_threads, probe_threads)
        total += seconds
        planned[job["record"]] = seconds
        note = "" if job["variant"] == "paper" else f" (variant {job['variant']} predicted as paper)"
        echo(f"  {job['record']}: {human(seconds)}{note} [{how}]")
    if plan is not None:
        fsutil.write_json(plan, {"jobs": planned})
    timing = total
    others = other_jobs(config, jobs)
    for name, seconds in others:
        echo(f"  {name}: {human(seconds)} [allowance]")
    total += sum(seconds for _, seconds in others)
    echo(
        f"gpuscale: total predicted {human(total)} ({human(timing)} of timing jobs, the cost model's band about "
        f"x/÷ 1.5, docs/prediction.md; {human(total - timing)} of the other jobs, fixed allowances)"
    )
    if total > HOUR:
        echo(f"gpuscale: this study is predicted to run for more than an hour ({human(total)}). Faster routes:")
        for route in FASTER_ROUTES:
            echo(f"  - {route}")
    return total
