"""The cost model's arithmetic on hand-made probe and run records (exact expected numbers), torch-free; and its checks
(research/prediction/: leave one model out, the noise floor) on the same records."""

from __future__ import annotations

import json
import math
import statistics
import sys
from pathlib import Path

import pytest

from gpuscale.predict import costmodel as cm
from gpuscale.predict import prediction as predict

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # research/ beside the package, as its scripts run
from research.prediction import checks, validation  # noqa: E402

A = cm.ModelFacts("a", 1_000_000, 1.1e9, {"conv": 1e9, "depthwise_conv": 1e8}, layers=10)
B = cm.ModelFacts("b", 10_000, 1e6, {"conv": 1e6}, layers=2)


def probe_record(
    device="cpu", fixed=0.01, layer=0.001, rates=None, pipeline=5000.0, fingerprint="host1", version=2
) -> dict:
    rates = rates or {"conv": 1e12, "depthwise_conv": 1e11, "linear": 2e12}
    return {
        "schema_version": version,
        "kind": "gpuscale.probe",
        "device": device,
        "status": "measured",
        "not_measured_reason": None,
        "kinds": {k: {"flops_per_second": r, "measurements": []} for k, r in rates.items()},
        "fixed_step_seconds": fixed,
        "layer_seconds": layer,
        "input_pipeline_images_per_second": pipeline,
        "environment": {"host_fingerprint": fingerprint},
        "budget_seconds": 1.0,
        "batch_size": 100,
        "host_to_device_bytes_per_second": None,
        "started_at": "2026-12-03T00:00:00+00:00",
        "finished_at": "2026-12-03T00:00:01+00:00",
        "elapsed_seconds": 1.0,
    }


def run_record(model, device, seconds, seed=0, wait=None, variant="paper", images=1000, batch=100, sweep=None):
    r = {
        "status": "measured",
        "key": {"model": model, "device": device, "variant": variant, "seed": seed, "sweep": sweep},
        "settings": {"train": {"batch_size": batch}},
        "data": {"train_images": images},
        "timing": {"steady_epoch_seconds_median": seconds},
        "environment": {"host_fingerprint": "host1"},
        "conditions": {"lease": "unknown"},  # as record.upgrade leaves a record made before schema 4
        "phase_profile": None,
    }
    if wait is not None:
        r["phase_profile"] = {"instrumented_step_seconds": 0.1, "phase_seconds_per_step": {"data_wait": 0.1 * wait}}
    return r


def test_probe_alone_predicts_the_slower_of_compute_and_input_pipeline():
    cal = cm.from_probe(probe_record())
    # compute = 10 steps * (0.01 + 10 layers * 0.001) + 1000 images * (1e9 / 1e12 + 1e8 / 1e11) = 0.2 + 2.0
    a = cm.predict_epoch(cal, A, images=1000, batch_size=100)
    assert a["compute_seconds"] == pytest.approx(2.2, rel=1e-12)
    assert a["loader_seconds"] == pytest.approx(0.2, rel=1e-12)  # 1000 images / 5000 per second
    assert (a["epoch_seconds"], a["bound"]) == (pytest.approx(2.2, rel=1e-12), "compute")
    # b: 10 * (0.01 + 2 * 0.001) + 1000 * 1e6 / 1e12 = 0.121 s of compute, under the pipeline's 0.2 s
    b = cm.predict_epoch(cal, B, images=1000, batch_size=100)
    assert b["compute_seconds"] == pytest.approx(0.121, rel=1e-12)
    assert (b["epoch_seconds"], b["bound"]) == (pytest.approx(0.2, rel=1e-12), "input pipeline")


def test_a_schema_1_probe_s_depthwise_and_grouped_rates_are_not_used():
    """Schema 1 counted grouped layers by torch's formulas (weight gradient `groups` times too many): its depthwise
    and grouped rates are in other units than the model facts, so those kinds fall back to the dense rate."""
    old = cm.from_probe(probe_record(version=1, rates={"conv": 1e12, "depthwise_conv": 1e13, "grouped_conv": 1e13}))
    assert set(old.seconds_per_flop) == {"conv"}
    # a: 10 steps * (0.01 + 10 * 0.001) + 1000 images * (1e9 + 1e8) / 1e12 = 0.2 + 1.1
    assert cm.predict_epoch(old, A, 1000, 100)["compute_seconds"] == pytest.approx(1.3, rel=1e-12)
    new = cm.from_probe(probe_record(version=2, rates={"conv": 1e12, "depthwise_conv": 1e11}))
    assert new.seconds_per_flop["depthwise_conv"] == pytest.approx(1e-11)


def test_a_kind_the_probe_did_not_measure_runs_at_the_dense_rate_and_the_speedup_band_combines_both_errors():
    gpu = cm.from_probe(probe_record("cuda", fixed=0.002, layer=0.0001, rates={"conv": 1e14}, pipeline=5000.0))
    cpu = cm.from_probe(probe_record())
    g = cm.predict_epoch(gpu, A, 1000, 100)
    # 10 * (0.002 + 10 * 0.0001) + 1000 * (1e9 + 1e8) / 1e14 = 0.03 + 0.011, under the pipeline's 0.2 s
    assert g["compute_seconds"] == pytest.approx(0.041, rel=1e-12)
    s = cm.speedup(cm.predict_epoch(cpu, A, 1000, 100), g, cpu, gpu)
    assert s["speedup"] == pytest.approx(11.0, rel=1e-12)
    width = math.hypot(cm.NOMINAL_LOG_ERROR, cm.NOMINAL_LOG_ERROR)
    assert s["speedup_low"] == pytest.approx(11.0 * math.exp(-width), rel=1e-12)
    assert s["speedup_high"] == pytest.approx(11.0 * math.exp(width), rel=1e-12)


def synthetic_observations(fixed=0.02, layer=0.002, per_flop=1e-11, device="cpu"):
    """Epochs made by known constants: the fit must give them back."""
    shapes = [(5, 1e8), (10, 5e8), (20, 2e8), (40, 3e9), (80, 1e9), (15, 8e9)]
    facts, obs = {}, []
    for i, (layers, flops) in enumerate(shapes):
        name = f"m{i}"
        facts[name] = cm.ModelFacts(name, 1000, flops, {"conv": flops}, layers=layers)
        seconds = 10 * (fixed + layers * layer) + 1000 * flops * per_flop
        obs.append(cm.Observation("ref", "host1", name, device, "paper", seconds, 1000, 10, 0.01, 1))
    return facts, obs


def test_the_fit_recovers_known_constants_and_leave_one_model_out_is_exact_on_exact_data():
    facts, obs = synthetic_observations()
    for o in obs:  # no data wait at all: the targets are the epochs themselves
        object.__setattr__(o, "data_wait_fraction", 0.0)
    cal = cm.fit(obs, facts)
    assert cal.source == "records"
    assert cal.fixed_step_seconds == pytest.approx(0.02, rel=1e-9)
    assert cal.layer_seconds == pytest.approx(0.002, rel=1e-9)
    assert 1 / cal.seconds_per_flop["conv"] == pytest.approx(1e11, rel=1e-9)
    assert cal.log_error == pytest.approx(0.0, abs=1e-9)
    rows = checks.leave_one_model_out(obs, facts)
    assert len(rows) == 6
    assert all(abs(r["error_percent"]) < 1e-6 for r in rows)
    constants = cal.constants()
    assert constants["conv_flops_per_second"] == pytest.approx(1e11, rel=1e-9)
    assert constants["models"] == "m0,m1,m2,m3,m4,m5"


def table_probe(device="cpu", fixed=0.01, optimizer=1e-9, table=None, pipeline=5000.0) -> dict:
    """A schema-3 probe record with a layer table (per model seconds per image) and an optimizer rate."""
    doc = probe_record(device, fixed=fixed, pipeline=pipeline, version=3)
    table = table if table is not None else {"a": 2e-3, "b": 1e-5}
    doc["optimizer_seconds_per_parameter"] = optimizer
    doc["layer_table"] = {
        "batch_size": 64,
        "models": {m: {"seconds_per_image": v, "layer_calls": 3, "distinct_layer_calls": 2} for m, v in table.items()},
        "models_not_timed": [],
        "layers": [
            {
                "layer": "Conv2d(3, 8, kernel_size=(3, 3)) <- (3, 32, 32):0123:nograd",
                "seconds_per_call": 1e-3,
                "repeats": 3,
            }
        ],
        "seconds": 1.0,
    }
    return doc


def test_a_layer_table_prices_the_models_it_has_and_the_rates_by_kind_price_the_rest(tmp_path):
    cal = cm.from_probe(table_probe())
    # a: 10 steps * (0.01 + 1e6 parameters * 1e-9) + 1000 images * 2e-3 = 0.11 + 2.0 (FLOPs and layers unused)
    assert cm.predict_epoch(cal, A, 1000, 100)["compute_seconds"] == pytest.approx(2.11, rel=1e-12)
    # a model the table lacks: the rates by kind, as a schema-2 probe would price it
    c = cm.ModelFacts("c", 10_000, 1e6, {"conv": 1e6}, layers=2)
    assert cm.predict_epoch(cal, c, 1000, 100)["compute_seconds"] == pytest.approx(0.121, rel=1e-12)
    assert cal.constants()["table_models"] == 2 and "table_seconds_per_image" not in cal.constants()
    path = tmp_path / "cpu.json"
    path.write_text(json.dumps(table_probe()))
    assert predict.load_probes([path])["cpu"]["layer_table"]["batch_size"] == 64  # it passes the probe schema


def test_records_fit_the_table_s_scale_and_the_fixed_step_and_held_out_models_go_through_the_table():
    """Epochs made as 10 steps * 0.03 s + 1.5 x the table's seconds (optimizer included): the fit gives back 0.03
    and 1.5, and leave-one-model-out predicts each model exactly from the others."""
    table = {f"m{i}": v for i, v in enumerate([1e-4, 5e-4, 2e-3, 8e-3, 3e-2])}
    params = {f"m{i}": 10 ** (4 + i) for i in range(5)}
    prior = cm.from_probe(table_probe(table=table, optimizer=2e-9))
    facts = {m: cm.ModelFacts(m, params[m], 1e9, {"conv": 1e9}, layers=1 + i) for i, m in enumerate(table)}
    obs = [
        cm.Observation(
            "ref", "host1", m, "cpu", "paper", 10 * 0.03 + 1.5 * (1000 * t + 10 * params[m] * 2e-9), 1000, 10, 0.0, 1
        )
        for m, t in table.items()
    ]
    cal = cm.fit(obs, facts, prior)
    assert cal.source == "records on the probe's layer table"
    assert cal.fixed_step_seconds == pytest.approx(0.03, rel=1e-9)
    assert cal.table_scale == pytest.approx(1.5, rel=1e-9)
    assert cal.log_error == pytest.approx(0.0, abs=1e-9)
    rows = checks.leave_one_model_out(obs, facts, {("cpu", "paper"): prior})
    assert len(rows) == 5 and all(abs(r["error_percent"]) < 1e-6 for r in rows)
    # without the table (no prior) the same epochs are fitted by FLOPs and layers, which cannot tell them apart
    assert max(abs(r["error_percent"]) for r in checks.leave_one_model_out(obs, facts)) > 50


def test_loader_bound_records_set_the_pipeline_rate_and_stay_out_of_the_compute_fit():
    facts, obs = synthetic_observations(device="cuda")
    obs = [cm.Observation(**{**o.__dict__, "data_wait_fraction": 0.0}) for o in obs]
    bound = cm.Observation("ref", "host1", "slow", "cuda", "paper", 3.0, 1000, 10, 0.8, 3)
    facts["slow"] = cm.ModelFacts("slow", 10, 1e3, {"conv": 1e3}, layers=1)
    cal = cm.fit([*obs, bound], facts)
    assert cal.loader_seconds_per_image == pytest.approx(3.0 / 1000, rel=1e-12)
    assert cal.fixed_step_seconds == pytest.approx(0.02, rel=1e-9)  # the loader-bound epoch did not pull it
    assert cm.predict_epoch(cal, facts["slow"], 1000, 100)["epoch_seconds"] == pytest.approx(3.0, rel=1e-9)


def test_a_gpu_pipeline_s_sharpness_and_loader_are_fitted_from_both_regimes_and_a_cpu_keeps_the_slower_stage():
    assert cm._pipeline(3.0, 4.0, None) == 4.0 and cm._pipeline(3.0, 4.0, 2.0) == pytest.approx(5.0)
    assert cm._pipeline(3.0, 0.0, 2.0) == 3.0  # no loader: the compute alone
    facts, made = synthetic_observations(device="cuda")  # compute seconds 1.3 .. 8.3 from known constants
    loader, p = 2.5, 4.0
    obs = []
    for o in made:  # epochs of a p = 4 pipeline; each step computes what the constants say and waits the rest
        epoch = (o.epoch_seconds**p + loader**p) ** (1 / p)
        obs.append(
            cm.Observation(**{**o.__dict__, "epoch_seconds": epoch, "data_wait_fraction": 1 - o.epoch_seconds / epoch})
        )
    facts["tiny"] = cm.ModelFacts("tiny", 10, 1e3, {"conv": 1e3}, layers=1)
    compute = 10 * (0.02 + 0.002) + 1000 * 1e3 * 1e-11
    epoch = (compute**p + loader**p) ** (1 / p)
    obs.append(cm.Observation("ref", "host1", "tiny", "cuda", "paper", epoch, 1000, 10, 1 - compute / epoch, 1))
    cal = cm.fit(obs, facts)
    assert cal.pipeline_sharpness == 4.0
    assert cal.loader_seconds_per_image * 1000 == pytest.approx(loader, rel=1e-9)
    for o in obs:
        got = cm.predict_epoch(cal, facts[o.model], 1000, 100)["epoch_seconds"]
        assert got == pytest.approx(o.epoch_seconds, rel=1e-9)
    assert cal.constants()["pipeline_sharpness"] == 4.0
    # the same epochs on a CPU: workers and compute share its cores, no p-norm
    on_cpu = [cm.Observation(**{**o.__dict__, "device": "cpu"}) for o in obs]
    assert cm.fit(on_cpu, facts).pipeline_sharpness is None


def test_a_gpu_probe_prices_each_dispatched_op_and_no_elementwise_rate_and_a_cpu_probe_does_not():
    gpu = {**probe_record("cuda", fixed=0.01, layer=0.001, rates={"conv": 1e12, "other": 1e9}), "op_seconds": 2e-5}
    facts = cm.ModelFacts("v", 100, 2e9, {"conv": 2e9, "other": 5e6}, layers=20, ops_per_step=300)
    cal = cm.from_probe(gpu)
    assert cal.op_seconds == 2e-5
    # the host dispatches 10 steps of (fixed + 300 ops) while the device computes 1000 images x 2e9 FLOPs at 1e12:
    # the larger of the two, not their sum; the 5e6 elements per image cost nothing beyond their ops
    assert cm.compute_seconds(cal, facts, 1000, 10) == pytest.approx(1000 * 2e9 / 1e12, rel=1e-12)
    dispatch_bound = cm.ModelFacts("d", 100, 2e7, {"conv": 2e7, "other": 5e6}, layers=20, ops_per_step=300)
    assert cm.compute_seconds(cal, dispatch_bound, 1000, 10) == pytest.approx(10 * (0.01 + 300 * 2e-5), rel=1e-12)
    # a schema-3 record made before op_seconds: its per-layer cost per op, the stack's elementwise work put back
    older = {**gpu, "schema_version": 3, "op_seconds": None, "batch_size": 128}
    per_op = (cm.STACK_LAYERS * 0.001 + cm.STACK_ELEMENTS_PER_IMAGE * 128 / 1e9) / cm.STACK_OPS
    assert cm.from_probe(older).op_seconds == pytest.approx(per_op, rel=1e-12)
    assert cm.from_probe({**older, "schema_version": 2}).op_seconds == 0.0  # layers and elements, as before
    # a model without an op count, or a CPU probe: layers and elements as before
    plain = cm.ModelFacts("w", 100, 2e9, {"conv": 2e9, "other": 5e6}, layers=20)
    assert cm.compute_seconds(cal, plain, 1000, 10) == pytest.approx(
        10 * (0.01 + 20 * 0.001) + 1000 * (2e9 / 1e12 + 5e6 / 1e9), rel=1e-12
    )
    assert cm.from_probe({**gpu, "device": "cpu"}).op_seconds == 0.0


def test_with_few_records_the_probe_is_scaled_by_the_median_ratio():
    prior = cm.from_probe(probe_record())
    # the probe predicts 2.2 s for a and 0.121 s of compute for b; measured 4.4 and 0.363: ratios 2 and 3
    obs = [
        cm.Observation("ref", "host1", "a", "cpu", "paper", 4.4, 1000, 10, 0.0, 1),
        cm.Observation("ref", "host1", "b", "cpu", "paper", 0.363, 1000, 10, 0.0, 1),
    ]
    cal = cm.fit(obs, {"a": A, "b": B}, prior)
    assert cal.source == "probe scaled by records"
    assert cal.scale == pytest.approx(2.5, rel=1e-12)
    assert cal.loader_seconds_per_image == pytest.approx(1 / 5000, rel=1e-12)  # the probe's, no loader-bound record
    assert cm.predict_epoch(cal, A, 1000, 100)["epoch_seconds"] == pytest.approx(5.5, rel=1e-12)


def test_observations_take_the_median_over_seeds_and_leave_sweeps_and_unmeasured_runs_out():
    records = [
        run_record("a", "cpu", 10.0, seed=0, wait=0.1),
        run_record("a", "cpu", 14.0, seed=1, wait=0.3),
        run_record("a", "cpu", 11.0, seed=2, wait=0.2),
        run_record("a", "cpu", 99.0, sweep={"parameter": "threads", "value": 1}),
        {**run_record("a", "cuda", 1.0), "status": "not_measured"},
    ]
    (o,) = cm.observations(records, "ref")
    assert (o.model, o.device, o.epoch_seconds, o.seeds, o.steps) == ("a", "cpu", 11.0, 3, 10)
    assert o.data_wait_fraction == pytest.approx(0.2)


def test_job_seconds_counts_the_timed_steps_the_evaluation_and_the_phase_profile():
    cal = cm.from_probe(probe_record())
    # epoch 2.2 s over 10 steps: 0.22 s a step; 5 timed steps; evaluation 300 * 2e-3 / 3 = 0.2 s; 4 profile steps
    seconds = cm.job_seconds(cal, A, 2, 1000, 300, 100, max_steps_per_epoch=5, phase_profile_steps=4)
    assert seconds == pytest.approx(2 * (0.22 * 5 + 0.2) + 4 * 0.22, rel=1e-12)


def test_load_facts_reads_the_ladder_format(tmp_path):
    path = tmp_path / "modelfacts.json"
    doc = {
        "schema": 1,
        "models": {
            "a": {
                "family": "cnn",
                "parameters": 5,
                "train_flops_per_image": 30,
                "flops_by_kind": {"conv": 10, "depthwise_conv": 20},
                "layers": 3,
            }
        },
    }
    path.write_text(json.dumps(doc))
    facts = cm.load_facts(path)
    assert facts["a"].kind_flops() == {**dict.fromkeys(cm.KINDS, 0.0), "conv": 10.0, "depthwise_conv": 20.0}
    assert cm.load_facts(tmp_path / "missing.json") == {}


def synthetic_study(tmp_path, monkeypatch):
    """A reference folder of hand-made records made by known constants, with its probes; a host probe; facts."""
    ref = tmp_path / "reference" / "study"
    facts_doc = {"schema": 1, "models": {}}
    facts, obs = synthetic_observations()
    for device, per_flop in (("cpu", 1e-11), ("cuda", 1e-13)):
        _, obs = synthetic_observations(per_flop=per_flop, device=device)
        for o in obs:
            path = ref / o.model / device / "paper-seed0.json"
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps(run_record(o.model, device, o.epoch_seconds, wait=0.0)))
    for name, f in facts.items():
        facts_doc["models"][name] = {
            "family": "x",
            "parameters": f.parameters,
            "train_flops_per_image": f.train_flops_per_image,
            "flops_by_kind": f.flops_by_kind,
            "layers": f.layers,
        }
    (tmp_path / "facts.json").write_text(json.dumps(facts_doc))
    (ref / "probe").mkdir()
    for device, rate in (("cpu", 1e11), ("cuda", 1e13)):  # the constants that made the epochs
        made = probe_record(device, fixed=0.02, layer=0.002, rates={"conv": rate}, pipeline=1e12)
        (ref / "probe" / f"{device}.json").write_text(json.dumps(made))
    probes = tmp_path / "probe.json"
    probes.write_text(json.dumps(probe_record()))
    monkeypatch.setattr(predict.record_mod, "load", lambda p: json.loads(p.read_text()))  # hand-made, partial records
    return ref, probes, tmp_path / "facts.json"


def checked(folders: list, facts_path) -> dict:
    """The research checks (research/prediction/validation.run) of these folders as one card."""
    return validation.run({"card": [str(f) for f in folders]}, cm.load_facts(facts_path))


def test_the_predict_stage_writes_its_tables_without_torch(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "torch", None)  # importing torch would fail
    ref, probes, _ = synthetic_study(tmp_path, monkeypatch)
    out = tmp_path / "out"
    predict.run(
        [probes], [str(ref)], out, ["m0", "m3"], images=1000, batch_size=100, facts_path=tmp_path / "facts.json"
    )
    got = predict.tables(out)
    assert set(got) == set(predict.TABLES) == {"host", "constants", "skipped"}
    assert [(r["model"], r["device"]) for r in got["host"]] == [("m0", "cpu"), ("m3", "cpu")]
    assert (
        (out / "host.csv")
        .read_text()
        .startswith("model,device,variant,quantity,predicted,low,high,bound,calibration,label")
    )  # the columns the report's first screen reads
    (ref / "probe" / "cuda.json").write_text(json.dumps({**probe_record("cuda"), "fixed_step_seconds": -1}))
    # a bad probe of a reference folder is skipped and listed
    got = predict.run([probes], [str(ref)], out, ["m0"], facts_path=tmp_path / "facts.json")
    (entry,) = got["skipped"]
    assert (
        entry["path"].endswith("cuda.json")
        and "fixed_step_seconds: -1 is less than the minimum of 0" in entry["reason"]
    )
    # the user's own probe is not skipped: it stops the stage
    probes.write_text(json.dumps({**probe_record(), "fixed_step_seconds": -1}))
    with pytest.raises(cm.CostModelError, match=r"probe.json: fixed_step_seconds: -1 is less than the minimum of 0"):
        predict.run([probes], [str(ref)], out, ["m0"], facts_path=tmp_path / "facts.json")
    with pytest.raises(cm.CostModelError, match=r"gone: no such folder \(report.reference\)"):
        predict.run([probes], [str(tmp_path / "gone")], out, ["m0"], facts_path=tmp_path / "facts.json")


def test_the_research_checks_hold_each_model_out_and_predict_from_the_folder_s_probes_alone(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "torch", None)
    ref, _, facts = synthetic_study(tmp_path, monkeypatch)
    got = checked([ref], facts)
    assert all(abs(r["error_percent"]) < 1e-6 for r in got["validation"])
    speedups = [s for s in got["validation_summary"] if s["device"] == "speedup"]
    assert [s["source"] for s in speedups] == [str(ref), f"{ref} (probe only)"]
    assert all(s["meets_target"] is True and s["models"] == 6 for s in speedups)
    assert len([r for r in got["validation"] if r["calibration"] == "probe"]) == 18  # 6 models x (cpu, cuda, speedup)
    (ref / "probe" / "cuda.json").write_text(json.dumps({**probe_record("cuda"), "fixed_step_seconds": -1}))
    got = checked([ref], facts)  # a bad probe is skipped and listed; the folder's GPU side is then not checked
    assert len(got["skipped"]) == 1
    assert not [r for r in got["validation"] if r["calibration"] == "probe" and r["device"] == "cuda"]


def test_a_folder_whose_cpu_probe_has_a_layer_table_is_also_held_out_on_it_and_a_gpu_s_table_is_not_used(
    tmp_path, monkeypatch
):
    ref, probes, facts_path = synthetic_study(tmp_path, monkeypatch)
    facts = cm.load_facts(facts_path)
    # the table that, with a 0.02 s fixed step, makes the CPU epochs exactly (10 steps, 1000 images)
    table = {m: (10 * f.layers * 0.002 + 1000 * f.train_flops_per_image * 1e-11) / 1000 for m, f in facts.items()}
    cpu = {**table_probe("cpu", fixed=0.02, optimizer=0.0, table=table, pipeline=1e12), "kinds": {}}
    cpu["kinds"] = {"conv": {"flops_per_second": 1e11, "measurements": []}}
    (ref / "probe" / "cpu.json").write_text(json.dumps(cpu))
    gpu = table_probe("cuda", fixed=0.02, table={m: 1.0 for m in table}, pipeline=1e12)
    gpu["kinds"] = {"conv": {"flops_per_second": 1e13, "measurements": []}}
    gpu["layer_seconds"] = 0.002
    (ref / "probe" / "cuda.json").write_text(json.dumps(gpu))
    assert cm.from_probe(gpu).table_seconds_per_image == {}  # a GPU's layer table prices nothing
    got = checked([ref], facts_path)
    sources = [s["source"] for s in got["validation_summary"] if s["device"] == "speedup"]
    assert sources == [str(ref), f"{ref} (held out, layer table)", f"{ref} (probe only)"]
    on_table = [r for r in got["validation"] if r["source"] == f"{ref} (held out, layer table)"]
    assert len(on_table) == 18 and all(abs(r["error_percent"]) < 1e-6 for r in on_table)
    cpu_rows = [r for r in on_table if r["device"] == "cpu"]
    assert {r["calibration"] for r in cpu_rows} == {f"records on the layer table of {ref}"}
    assert all(s["models"] == 6 for s in got["validation_summary"])  # each check counts its own rows only


def test_a_folder_without_a_table_borrows_the_table_of_a_probe_of_the_same_host_and_no_other(tmp_path, monkeypatch):
    ref, probes, facts_path = synthetic_study(tmp_path, monkeypatch)
    facts = cm.load_facts(facts_path)
    table = {m: (10 * f.layers * 0.002 + 1000 * f.train_flops_per_image * 1e-11) / 1000 for m, f in facts.items()}
    lease = tmp_path / "reference" / "lease"  # another folder: no records needed, a CPU probe with the table
    (lease / "probe").mkdir(parents=True)
    (lease / "probe" / "cpu.json").write_text(json.dumps(table_probe("cpu", fixed=0.02, optimizer=0.0, table=table)))

    def rows() -> list[dict]:  # the reference checked, the lease folder beside it
        return checked([ref, lease], facts_path)["validation"]

    on_table = [r for r in rows() if r["source"] == f"{ref} (held out, layer table)"]
    assert len(on_table) == 18 and all(abs(r["error_percent"]) < 1e-6 for r in on_table)
    assert {r["calibration"] for r in on_table if r["device"] == "cpu"} == {f"records on the layer table of {lease}"}
    # a probe of another host prices nothing here
    other = json.loads((lease / "probe" / "cpu.json").read_text())
    other["environment"]["host_fingerprint"] = "host2"
    (lease / "probe" / "cpu.json").write_text(json.dumps(other))
    assert not [r for r in rows() if r["source"].endswith("(held out, layer table)")]


def epochs_record(model, device, epochs, seed=0, sampled=False, fingerprint="host1"):
    """A run record with its epochs (the first a warm-up), as the spread of the measurements is read from them."""
    r = run_record(model, device, statistics.median(epochs[1:] or epochs), seed=seed)
    r["environment"]["host_fingerprint"] = fingerprint
    r["epochs"] = [
        {"train_seconds": e, "warmup": i == 0, **({"extrapolated": True} if sampled else {})}
        for i, e in enumerate(epochs)
    ]
    return r


def test_the_spread_of_measured_epochs_is_pooled_within_runs_and_between_seeds_of_one_folder():
    e = math.exp
    runs = [
        epochs_record("m", "cuda", [9.0, 10 * e(0.1), 10 * e(-0.1)]),  # log variance 0.02, 1 dof
        epochs_record("n", "cuda", [9.0, 5 * e(0.2), 5 * e(-0.2), 5.0]),  # log variance 0.04, 2 dof
        epochs_record("m", "cuda", [9.0, 20.0, 20.0], seed=1),  # the same model: 0 variance within, 1 dof
        epochs_record("m", "cpu", [9.0, 8.0], sampled=True),  # one steady epoch: no spread of its own
    ]
    spreads = checks.measured_spreads({"f": runs, "g": [epochs_record("m", "cuda", [1.0, 30.0])]})
    gpu = spreads[("host1", "cuda", "paper", False)]
    assert gpu.epoch_dof == 4 and gpu.epoch_variance == pytest.approx((0.02 + 2 * 0.04 + 0) / 4)
    # m's two seeds in folder f: medians 10 and 20 (their within-run share, var/2 each, taken off); g's run of m
    # is another lease and no seed of them
    assert gpu.run_dof == 1
    assert gpu.run_variance == pytest.approx(math.log(2) ** 2 / 2 - gpu.epoch_variance / 2)
    assert ("host1", "cpu", "paper", True) not in spreads
    sampled = cm.Observation("f", "host1", "m", "cpu", "paper", 8.0, 1000, 10, None, 1, 1, True)
    assert checks.spread_for(sampled, spreads) == (None, "unknown")
    full = epochs_record("n", "cpu", [9.0, 8 * e(0.1), 8 * e(-0.1)])
    spreads = checks.measured_spreads({"f": [*runs, full]})
    spread, basis = checks.spread_for(sampled, spreads)
    assert basis == "lower bound" and spread.epoch_variance == pytest.approx(0.02)
    # one steady epoch of one seed carries the whole per-epoch variance; nine, pi/2 of a ninth of it
    assert spread.observation_log_sd(sampled) == pytest.approx(math.sqrt(0.02))
    nine = cm.Observation("f", "host1", "n", "cpu", "paper", 8.0, 1000, 10, None, 1, 9, False)
    assert spread.observation_log_sd(nine) == pytest.approx(math.sqrt(0.02 / 9 * math.pi / 2))


def test_each_check_states_the_floor_its_measurements_set(tmp_path, monkeypatch):
    ref, probes, facts_path = synthetic_study(tmp_path, monkeypatch)
    summary = checked([ref], facts_path)["validation_summary"]
    assert {s["floor_basis"] for s in summary} == {"unknown"}  # records without epochs: no spread, no floor
    assert {s["floor_median_percent"] for s in summary} == {None}
    for path in ref.rglob("paper-seed0.json"):  # the same epochs, each run now with three steady epochs around it
        r = json.loads(path.read_text())
        x = r["timing"]["steady_epoch_seconds_median"]
        r["epochs"] = [{"train_seconds": x * f, "warmup": i == 0} for i, f in enumerate((1.3, 0.9, 1.0, 1.1))]
        path.write_text(json.dumps(r))
    summary = checked([ref], facts_path)["validation_summary"]
    assert {s["floor_basis"] for s in summary} == {"measured"}
    sd = statistics.stdev([math.log(f) for f in (0.9, 1.0, 1.1)])
    one = checks.noise_floor([math.sqrt(sd**2 / 3 * math.pi / 2)] * 6)
    cpu = next(s for s in summary if s["device"] == "cpu" and s["source"] == str(ref))
    assert cpu["floor_median_percent"] == pytest.approx(one["floor_median_percent"], abs=1e-5)
    both = checks.noise_floor([math.sqrt(2 * sd**2 / 3 * math.pi / 2)] * 6)
    speedup = next(s for s in summary if s["device"] == "speedup" and s["source"] == f"{ref} (probe only)")
    assert speedup["floor_worst_percent"] == pytest.approx(both["floor_worst_percent"], abs=1e-5)


def test_the_noise_floor_is_what_exact_predictions_score_against_noisy_measurements():
    assert checks.noise_floor([0.0] * 5) == {
        "floor_median_percent": 0.0,
        "floor_worst_percent": 0.0,
        "floor_meets_target_share": 1.0,
    }
    floor = checks.noise_floor([0.15] * 12)
    # |N(0, 0.15)|: median 0.674 sd (10.6% as a ratio), and the worst of 12 near 2 sd
    assert 9.0 < floor["floor_median_percent"] < 12.5 and 28.0 < floor["floor_worst_percent"] < 45.0
    assert 0.0 < floor["floor_meets_target_share"] < 1.0
    assert checks.noise_floor([0.15] * 12) == floor  # a fixed seed: the same inputs, the same floor
    assert checks.noise_floor([])["floor_median_percent"] is None


def test_the_estimate_prints_each_pending_job_and_past_an_hour_the_faster_routes(tmp_path, monkeypatch):
    from gpuscale.contract import params
    from gpuscale.predict import estimate

    config = params.load()
    config["study"].update(models=["simplecnn", "resnet18"], devices=["cpu"])
    monkeypatch.chdir(tmp_path)
    done = tmp_path / params.record_path("simplecnn", "cpu", "paper", 0)
    done.parent.mkdir(parents=True)
    done.write_text("{}")  # already measured: not pending
    slow = {**probe_record(fixed=1.0, layer=0.1), "environment": {"host_fingerprint": "x"}}
    monkeypatch.setattr(estimate.envinfo, "host_fingerprint", lambda: "x")
    (tmp_path / "probe").mkdir()
    (tmp_path / "probe" / "cpu.json").write_text(json.dumps(slow))
    monkeypatch.setattr(estimate, "model_facts", lambda names: {"resnet18": A})
    lines = []
    total = estimate.run(config, tmp_path / "probe", echo=lines.append)
    # 10 epochs of 391 steps at 1 + 10 * 0.1 s plus 50,000 images at 2e-3 s, evaluation 10,000 * 2e-3 / 3,
    # and 50 phase-profile steps
    # and 50 phase-profile steps; then the job's start and the other jobs' allowances (data, probe, light stages)
    epoch = 391 * 2.0 + 50_000 * 2e-3
    timing = estimate.JOB_START_SECONDS + 10 * (epoch + 10_000 * 2e-3 / 3) + 50 * epoch / 391
    others = {"data/prepared": estimate.DATA_SECONDS + 60_000 * estimate.DATA_SECONDS_PER_IMAGE}
    others["results/probe/cpu.json"] = config["predict"]["probe_seconds"] + estimate.PROBE_OVERHEAD_SECONDS
    others.update({f"the {name} stage": seconds for name, seconds in estimate.LIGHT_STAGE_SECONDS.items()})
    assert total == pytest.approx(timing + sum(others.values()), rel=1e-12)
    assert lines[1].startswith("  results/runs/resnet18/cpu/paper-seed0.json: 2.5 h [probe ")
    assert [line.split(":")[0].strip() for line in lines if line.endswith("[allowance]")] == list(others)
    assert len([line for line in lines if line.startswith("  results/runs/")]) == 1
    assert "more than an hour" in lines[-4] and "quick preset" in lines[-3] and "predict preset" in lines[-1]


def test_no_cpu_of_the_models_form_reproduces_the_papers_three_points():
    facts = {
        "simplecnn": cm.ModelFacts("simplecnn", 554_474, 62_928_000, {"conv": 62_928_000}, layers=5),
        "resnet18": cm.ModelFacts("resnet18", 11_181_642, 217_282_560, {"conv": 217_282_560}, layers=41),
        "resnet50": cm.ModelFacts("resnet50", 23_528_522, 495_771_648, {"conv": 495_771_648}, layers=107),
    }
    fits = validation.paper_cost_model(facts)
    cpu = cm.predict_epoch(fits["cpu"], facts["resnet50"], 50_000, 128)["epoch_seconds"]
    gpu = cm.predict_epoch(fits["cuda"], facts["resnet50"], 50_000, 128)["epoch_seconds"]
    assert cpu / 544.367 - 1 < -0.5  # the i9's resnet50 epoch is far above what its other two points imply
    assert abs(gpu / 13.408 - 1) < 0.2


def test_a_thread_sweep_job_is_slower_than_the_probe_by_amdahls_law():
    from gpuscale.predict import estimate

    assert estimate.thread_factor(1, 16) == pytest.approx(1 / (0.1 + 0.9 / 16), rel=1e-12)  # 6.4x
    assert estimate.thread_factor(16, 16) == estimate.thread_factor(None, 16) == 1.0


def test_a_gpu_probe_prices_each_kind_s_flops_at_their_marginal_cost_beyond_the_per_op_charge():
    """On a GPU the per-op cost already charges each layer call's fixed part, so a kind's FLOPs are priced at the
    slope of its cases' seconds against their FLOPs, not at their average rate (which counts the fixed part twice)."""

    def cases(fixed, per_flop, flops):
        return [
            {"train_flops": f, "seconds_per_step": fixed + f * per_flop, "flops_per_second": f / (fixed + f * per_flop)}
            for f in flops
        ]

    def probe(device, op_seconds):
        doc = probe_record(device, rates={"conv": 1.0, "depthwise_conv": 1.0, "linear": 1.0, "other": 1.0})
        doc["op_seconds"] = op_seconds
        doc["kinds"]["conv"]["measurements"] = cases(3e-4, 1e-14, [7e9, 7e9, 2.9e10])  # 100 TFLOP/s beyond 300 us
        doc["kinds"]["depthwise_conv"]["measurements"] = cases(2.3e-4, 0.0, [2e7, 6e7, 1.7e8])  # launches only
        doc["kinds"]["linear"]["measurements"] = cases(1e-4, 1e-13, [7e9])  # one case: its average rate stands
        doc["kinds"]["other"]["measurements"] = cases(3e-4, 0.0, [1e6, 8e6])  # elementwise: priced per op instead
        return doc

    gpu = cm.from_probe(probe("cuda", 4.5e-5))
    assert gpu.seconds_per_flop["conv"] == pytest.approx(1e-14, rel=1e-9)
    assert gpu.seconds_per_flop["depthwise_conv"] == pytest.approx(0.0, abs=1e-24)
    assert gpu.seconds_per_flop["linear"] == pytest.approx(1.0) and gpu.seconds_per_flop["other"] == pytest.approx(1.0)
    # a CPU (no per-op charge) and a GPU probe without op_seconds keep the average rates
    for doc in (probe("cpu", 4.5e-5), {**probe("cuda", None), "schema_version": 2}):
        assert cm.from_probe(doc).seconds_per_flop["depthwise_conv"] == pytest.approx(1.0)
    # a fit with a negative fixed share says nothing of a fixed part: the average rate stands
    assert cm.marginal_seconds_per_flop({"measurements": cases(-1e-4, 1e-13, [7e9, 2.9e10])}) is None
