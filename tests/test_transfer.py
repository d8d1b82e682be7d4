"""Prediction across machine leases (predict/transfer.py): the lease's probe sets the level, the records of other
leases only the shape; leave-one-lease-out (research/prediction/validation.py); the one-off `gpuscale predict --model`
and its probe cache (predict/probecache.py)."""

from __future__ import annotations

import json
import math
import statistics
import sys
from pathlib import Path

import numpy as np
import pytest
from test_costmodel import probe_record, run_record

from gpuscale.predict import costmodel as cm
from gpuscale.predict import prediction as predict
from gpuscale.predict import probecache, transfer

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # research/ beside the package, as its scripts run
from research.prediction import validation  # noqa: E402

FACTS = {
    "small": cm.ModelFacts("small", 1_000, 1e8, {"conv": 1e8}, layers=4),
    "large": cm.ModelFacts("large", 100_000, 1e10, {"conv": 1e10}, layers=40),
    "other": cm.ModelFacts("other", 10_000, 1e9, {"conv": 1e9}, layers=10),
}
FOUR = {**FACTS, "fourth": cm.ModelFacts("fourth", 5_000, 5e8, {"conv": 5e8}, layers=8)}


def lease_probe(device, rate, fixed=0.01, pipeline=1e9, spread=None, lease="L"):
    doc = probe_record(device, fixed=fixed, layer=0.0, rates={"conv": rate}, pipeline=pipeline, version=3)
    doc["input_pipeline"] = {"images_per_second": pipeline, "source": "prepared data", "spread": spread}
    doc["conditions"] = {"lease": lease, "before": None, "after": None, "drifted": False}
    return doc


def observation(model, device, seconds, source="L"):
    return cm.Observation(source, "host1", model, device, "paper", seconds, 1000, 10, None, 1)


def base(probe, model, facts=FACTS):
    return transfer.base_epoch(probe, facts[model], 1000, 100)["epoch_seconds"]


def test_a_lease_s_ratio_is_its_measured_epoch_over_its_own_probe_s_prediction():
    probe = lease_probe("cpu", 1e11)
    lease = transfer.Lease("A", {"cpu": probe}, [observation("small", "cpu", 2 * base(probe, "small"))])
    assert transfer.ratios(lease, FACTS, "cpu") == pytest.approx({"small": 2.0})


def test_the_target_probe_sets_the_level_and_other_leases_records_only_the_shape():
    # two calibration leases of different pace: each measured 1.5x what its own probe predicted for `small`
    slow, fast = lease_probe("cpu", 1e10, lease="slow"), lease_probe("cpu", 1e11, lease="fast")
    leases = [
        transfer.Lease("slow", {"cpu": slow}, [observation("small", "cpu", 1.5 * base(slow, "small"))]),
        transfer.Lease("fast", {"cpu": fast}, [observation("small", "cpu", 1.5 * base(fast, "small"))]),
    ]
    shape = transfer.shape(leases, FACTS, "cpu")
    for rate in (1e9, 1e12):  # whatever this lease's pace, its prediction is its probe's times the shared shape
        target = lease_probe("cpu", rate, lease="target")
        got = transfer.predict(target, shape, FACTS["small"], 1000, 100)
        assert got["epoch_seconds"] == pytest.approx(1.5 * base(target, "small"))
        assert got["shape"] == "model" and got["low"] < got["epoch_seconds"] < got["high"]
    # a model no lease measured takes the median ratio of the device
    other = transfer.predict(lease_probe("cpu", 1e11), shape, FACTS["other"], 1000, 100)
    assert other["shape"] == "device" and other["correction"] == pytest.approx(1.5)


def test_the_band_holds_the_lease_to_lease_spread_and_the_probe_s_pipeline_spread():
    probes = [lease_probe("cuda", 1e12, lease=str(i)) for i in range(3)]
    factors = [1.0, 1.2, 0.8]
    leases = [
        transfer.Lease(
            str(i),
            {"cuda": p},
            [observation(m, "cuda", f * base(p, m)) for m in ("small", "large")],
        )
        for i, (p, f) in enumerate(zip(probes, factors, strict=True))
    ]
    shape = transfer.shape(leases, FACTS, "cuda")
    # each lease's log ratio from the mean of the other two, rescaled: the sample sd of the three
    assert shape.sd == pytest.approx(statistics.stdev(math.log(f) for f in factors))
    assert shape.tau == 0.0  # both models' ratios are alike: nothing to tell them apart
    # a pipeline-bound prediction widens by half the log of the probe's pass spread
    bound = lease_probe("cuda", 1e15, pipeline=100.0, spread=0.44)
    got = transfer.predict(bound, shape, FACTS["small"], 1000, 100)
    assert got["bound"] == "input pipeline"
    assert got["log_error"] == pytest.approx(math.hypot(shape.sd, 0.5 * math.log(1.44)))
    assert got["high"] / got["epoch_seconds"] == pytest.approx(math.exp(transfer.Z * got["log_error"]))


def test_a_model_no_lease_measured_has_a_band_that_holds_how_much_models_differ():
    """The device's centre says nothing of a model's own shape: its band adds tau (how much the measured models'
    ratios differ beyond a lease's noise) to the lease-to-lease spread; a measured model's band does not."""
    factors = {"small": 1.0, "large": 2.0, "fourth": 1.5}
    noise = [1.0, 1.1, 0.9]
    probes = [lease_probe("cpu", 1e11, lease=str(i)) for i in range(3)]
    leases = [
        transfer.Lease(
            str(i),
            {"cpu": p},
            [observation(m, "cpu", f * n * base(p, m, FOUR)) for m, f in factors.items()],
        )
        for i, (p, n) in enumerate(zip(probes, noise, strict=True))
    ]
    shape = transfer.shape(leases, FOUR, "cpu")
    assert shape.tau > 2 * shape.sd and shape.sd == pytest.approx(statistics.stdev(math.log(n) for n in noise))
    # tau² = the models' sample variance (k-1) of mean log ratio, less the noise each mean keeps (sd²/leases)
    spread = statistics.variance(math.log(f) for f in factors.values())
    assert shape.tau == pytest.approx(math.sqrt(spread - shape.sd**2 / len(noise)))
    target = lease_probe("cpu", 1e11, lease="T")  # compute-bound: no pipeline share in the band
    measured = transfer.predict(target, shape, FACTS["small"], 1000, 100)
    unmeasured = transfer.predict(target, shape, FACTS["other"], 1000, 100)
    assert measured["shape"] == "model" and measured["log_error"] == pytest.approx(shape.sd)
    assert unmeasured["shape"] == "device" and unmeasured["log_error"] == pytest.approx(math.hypot(shape.sd, shape.tau))
    assert unmeasured["high"] / unmeasured["epoch_seconds"] == pytest.approx(
        math.exp(transfer.Z * math.hypot(shape.sd, shape.tau))
    )


def test_leave_one_lease_out_with_unseen_models_leaves_each_model_out_of_every_other_lease():
    """unseen=True: each lease's model predicted as a user's own model would be, with no lease's record of it: the
    device's centre over the other models, whatever the model's own ratio elsewhere."""
    facts = FOUR
    factor = {"small": 1.0, "large": 2.0, "other": 1.5, "fourth": 1.2}  # the same in every lease, none the centre
    leases = []
    for i, rate in enumerate((1e10, 3e10, 1e11)):
        probe = lease_probe("cpu", rate, lease=str(i))
        epoch = {m: factor[m] * base(probe, m, facts) for m in facts}
        leases.append(transfer.Lease(str(i), {"cpu": probe}, [observation(m, "cpu", e) for m, e in epoch.items()]))
    rows = validation.leave_one_lease_out(leases, facts, unseen=True)
    assert len(rows) == 3 * 4 and all(r["unseen"] and r["shape"] == "device" for r in rows)
    for r in rows:  # the centre is the median of the other three models' ratios
        centre = statistics.median(f for m, f in factor.items() if m != r["model"])
        assert r["predicted"] / r["measured"] == pytest.approx(centre / factor[r["model"]])
    lease0 = [x for x in leases if x.name == "0"][0]
    stripped = [validation.without(x, "small") for x in leases if x.name != "0"]
    band = transfer.predict(lease0.probes["cpu"], transfer.shape(stripped, facts, "cpu"), facts["small"], 1000, 100)
    row = next(r for r in rows if (r["lease"], r["model"]) == ("0", "small"))
    assert (row["low"], row["high"]) == pytest.approx((band["low"], band["high"]))
    # measured in the other leases, each model's own ratio moves it from the centre towards its measured epoch
    seen = validation.leave_one_lease_out(leases, facts)
    assert all(not r["unseen"] and r["shape"] == "model" for r in seen)
    unseen_error = {(r["lease"], r["model"]): abs(r["error_percent"]) for r in rows}
    assert all(abs(r["error_percent"]) < unseen_error[r["lease"], r["model"]] for r in seen)
    groups = [s["lease"] for s in validation.summarize(seen + rows) if s["device"] == "cpu"]
    assert groups == [validation.ALL_LEASES, validation.ALL_LEASES + validation.UNSEEN, "0", "1", "2"]


def test_only_probes_made_the_same_way_transfer():
    target = transfer.Lease("T", {"cpu": lease_probe("cpu", 1e11)})
    synthetic = lease_probe("cpu", 1e11)
    synthetic["input_pipeline"]["source"] = "synthetic"
    older = probe_record("cpu", version=1)
    others = [
        transfer.Lease("S", {"cpu": synthetic}),
        transfer.Lease("O", {"cpu": older}),
        transfer.Lease("P", {"cpu": lease_probe("cpu", 1e10)}),
    ]
    assert [x.name for x in transfer.compatible(target, others, "cpu")] == ["P"]


def with_table(doc: dict, harness: int | None = None) -> dict:
    """A copy of the probe with a layer table pricing `small` (harness None: the key absent, as in harness 1's)."""
    row = {"seconds_per_image": 1e-4, "layer_calls": 3, "distinct_layer_calls": 2}
    table = {"batch_size": 64, "models": {"small": row}, "models_not_timed": [], "layers": [], "seconds": 1.0}
    return {**doc, "layer_table": table if harness is None else {**table, "harness": harness}}


def test_a_cpu_probe_s_ratios_transfer_only_between_layer_tables_of_one_harness():
    """Harness 2 times each layer call without harness 1's extra memory passes (issue 27): the two tables price
    memory-bound models differently, so a ratio to one is no shape for the other."""
    others = [
        transfer.Lease("old", {"cpu": with_table(lease_probe("cpu", 1e11, lease="old"))}),
        transfer.Lease("one", {"cpu": with_table(lease_probe("cpu", 1e11, lease="one"), 1)}),
        transfer.Lease("new", {"cpu": with_table(lease_probe("cpu", 1e11, lease="new"), 2)}),
    ]
    target = with_table(lease_probe("cpu", 1e10, lease="T"), 2)
    assert [x.name for x in transfer.compatible(target, others, "cpu")] == ["new"]
    assert [x.name for x in transfer.compatible(with_table(target, None), others, "cpu")] == ["old", "one"]
    assert cm.table_harness(target) == 2 and cm.table_harness(lease_probe("cpu", 1e10)) is None
    # a GPU's layer table prices nothing (costmodel.from_probe): GPU probes transfer whatever their table
    gpus = [transfer.Lease(str(h), {"cuda": with_table(lease_probe("cuda", 1e13), h)}) for h in (None, 2)]
    gpus.append(transfer.Lease("none", {"cuda": lease_probe("cuda", 1e13)}))
    assert len(transfer.compatible(lease_probe("cuda", 1e13), gpus, "cuda")) == 3


def test_the_predict_stage_and_leave_one_lease_out_never_calibrate_a_table_by_the_other_harness():
    def lease(name, harness):
        probe = with_table(lease_probe("cpu", 1e11, lease=name), harness)
        obs = [observation(m, "cpu", 1.3 * base(probe, m), name) for m in FACTS]  # enough models for a shape
        return transfer.Lease(name, {"cpu": probe}, obs)

    leases = [lease("L0", 2), lease("L1", None), lease("L2", None)]
    rows = validation.leave_one_lease_out(leases, FACTS)
    assert {r["lease"]: r["calibration"] for r in rows} == {"L1": "L2", "L2": "L1"}  # L0 has no peer: none
    new = with_table(lease_probe("cpu", 1e12, lease="this"), 2)
    assert predict.host_shapes({"cpu": new}, FACTS, leases)["cpu"].leases == ("L0",)
    assert predict.host_shapes({"cpu": with_table(new, None)}, FACTS, leases)["cpu"].leases == ("L1", "L2")
    unmatched = with_table(lease_probe("cpu", 1e12, lease="this"), 3)  # a harness no lease has: the probe alone
    assert predict.host_shapes({"cpu": unmatched}, FACTS, leases) == {}


def test_calibration_leases_with_too_few_models_give_no_shape_and_the_probe_alone_predicts():
    """A device's centre from one or two models is their quirk: below transfer.MIN_CALIBRATION_MODELS measured
    models, leave-one-lease-out and the predict stage both predict from the probe alone, with its nominal band."""
    assert transfer.MIN_CALIBRATION_MODELS == 3

    def lease(name, models, ratio=2.0):
        probe = lease_probe("cpu", 1e11, lease=name)
        return transfer.Lease(
            name, {"cpu": probe}, [observation(m, "cpu", ratio * base(probe, m), name) for m in models]
        )

    few = [lease("T", list(FACTS)), lease("C", ["small", "large"])]  # T's only peer measured two models
    rows = {(r["lease"], r["model"]): r for r in validation.leave_one_lease_out(few, FACTS)}
    t = rows[("T", "other")]
    assert t["shape"] == "probe" and t["calibration"] == ""
    target = few[0].probes["cpu"]
    assert t["predicted"] == pytest.approx(base(target, "other"))  # the probe's own figure, no ratio applied
    assert t["high"] / t["predicted"] == pytest.approx(math.exp(cm.NOMINAL_LOG_ERROR))
    # C's peer T measured three: C is predicted by transfer (T's ratio of 2 for each model)
    assert rows[("C", "small")]["shape"] == "model" and rows[("C", "small")]["error_percent"] == pytest.approx(0.0)
    new = lease_probe("cpu", 1e12, lease="new")
    assert predict.host_shapes({"cpu": new}, FACTS, few[1:]) == {}
    assert predict.host_shapes({"cpu": new}, FACTS, few)["cpu"].leases == ("T", "C")


def three_leases(tmp_path, monkeypatch, paces=(1.0, 2.0, 4.0)):
    """Three lease folders (probe/ + runs/) of one host, each `pace` times slower than the first on both devices,
    every record 1.3x (cpu) and 0.9x (cuda) its own probe's prediction: a shape that transfers exactly."""
    study = tmp_path / "reference" / "paired" / "leases"
    for i, pace in enumerate(paces):
        folder = study / f"lease{i}"
        (folder / "probe").mkdir(parents=True)
        for device, rate, factor in (("cpu", 1e11, 1.3), ("cuda", 1e13, 0.9)):
            probe = lease_probe(device, rate / pace, fixed=0.01 * pace, lease=f"boot{i}")
            (folder / "probe" / f"{device}.json").write_text(json.dumps(probe))
            for model in ("small", "large", "other"):
                path = folder / "runs" / model / device / "paper-seed0.json"
                path.parent.mkdir(parents=True, exist_ok=True)
                seconds = factor * base(probe, model)
                rec = run_record(model, device, seconds, images=1000, batch=100)
                path.write_text(json.dumps({**rec, "conditions": {"lease": f"boot{i}"}}))  # the lease of its probe
    monkeypatch.setattr(predict.record_mod, "load", lambda p: json.loads(p.read_text()))  # records cut to what counts
    return study.parent


def test_leave_one_lease_out_predicts_each_lease_from_its_probe_and_the_others_records(tmp_path, monkeypatch):
    folder = three_leases(tmp_path, monkeypatch)
    leases = transfer.leases_of(folder, predict.load_records, predict.load_probes)
    assert [lease.name.rsplit("/", 1)[1] for lease in leases] == ["lease0", "lease1", "lease2"]
    rows = validation.leave_one_lease_out(leases, FACTS)
    assert len(rows) == 3 * 3 * 3  # 3 leases x 3 models x (cpu, cuda, speedup)
    assert all(abs(r["error_percent"]) < 1e-6 and r["inside"] for r in rows)
    assert {r["calibration"] for r in rows if r["lease"].endswith("lease0")} == {"lease1,lease2"}
    summary = {(s["device"], s["lease"]): s for s in validation.summarize(rows)}
    assert summary[("speedup", "all leases")]["models"] == 9
    assert summary[("speedup", "all leases")]["coverage_percent"] == 100.0


def test_a_lease_whose_record_strays_from_its_probe_misses_and_does_not_move_the_others(tmp_path, monkeypatch):
    folder = three_leases(tmp_path, monkeypatch)
    record = folder / "leases" / "lease1" / "runs" / "large" / "cuda" / "paper-seed0.json"
    doc = json.loads(record.read_text())
    doc["timing"]["steady_epoch_seconds_median"] *= 3  # a GPU epoch three times what the lease's probe implies
    record.write_text(json.dumps(doc))
    rows = validation.leave_one_lease_out(transfer.leases_of(folder, predict.load_records, predict.load_probes), FACTS)
    errors = {
        r["lease"].rsplit("/", 1)[1]: r["error_percent"] for r in rows if (r["model"], r["device"]) == ("large", "cuda")
    }
    assert errors["lease1"] == pytest.approx(100 * (1 / 3 - 1))  # its own probe's level, the others' shape
    # for the other two, one lease's stray ratio is within what a lease's noise explains (tau = 0 beside it):
    # the model is shrunk to the device's centre, and is exact
    assert errors["lease0"] == pytest.approx(0.0, abs=1e-6) and errors["lease2"] == pytest.approx(0.0, abs=1e-6)
    worst = {s["device"]: s for s in validation.summarize(rows) if s["lease"] == "all leases"}
    assert worst["cuda"]["worst_model"].startswith("large (lease")
    untouched = [r for r in rows if r["model"] != "large"]
    assert all(abs(r["error_percent"]) < 1e-6 for r in untouched)


def test_the_predict_stage_uses_the_transfer_for_this_host_and_never_lets_records_set_its_level(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "torch", None)
    folder = three_leases(tmp_path, monkeypatch)
    facts_file = tmp_path / "facts.json"
    facts_file.write_text(
        json.dumps(
            {
                "schema": 1,
                "models": {
                    n: {
                        "family": "x",
                        "parameters": f.parameters,
                        "train_flops_per_image": f.train_flops_per_image,
                        "flops_by_kind": f.flops_by_kind,
                        "layers": f.layers,
                    }
                    for n, f in FACTS.items()
                },
            }
        )
    )
    host = tmp_path / "probe"
    host.mkdir()
    for device, rate in (("cpu", 1e11 / 8), ("cuda", 1e13 / 8)):  # a lease slower than any of the records'
        (host / f"{device}.json").write_text(json.dumps(lease_probe(device, rate, fixed=0.08, lease="new")))
    got = predict.run(
        sorted(host.glob("*.json")),
        [str(folder)],
        tmp_path / "out",
        list(FACTS),
        images=1000,
        batch_size=100,
        facts_path=facts_file,
    )
    cpu = next(r for r in got["host"] if r["model"] == "large" and r["device"] == "cpu")
    probe = json.loads((host / "cpu.json").read_text())
    assert cpu["predicted"] == pytest.approx(1.3 * base(probe, "large"), rel=1e-5)
    assert cpu["calibration"].startswith("this lease's probe x the shape of 3 leases")
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == sorted(
        f"{name}.{ext}" for name in predict.TABLES for ext in ("csv", "json")
    )  # this host's tables only: how far the method errs is research's (research/prediction/validate.py)


def one_off_host(tmp_path, monkeypatch) -> tuple[Path, Path]:
    """What every one-off test stands on: this repo's params.yaml, the project folder at tmp_path, this host's
    hardware fingerprint "host1" (probe_record's) and boot id "thislease", the hand-made facts (no spec built), an
    empty probes folder (the workflow's results/probe). Returns the params and the folder."""
    import gpuscale.commands
    from gpuscale.measure import envinfo

    repo_params = Path("params.yaml").resolve()
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(envinfo, "boot_id", lambda: "thislease")
    monkeypatch.setattr(envinfo, "host_fingerprint", lambda: "host1")
    monkeypatch.setattr(cm, "load_facts", lambda path=None: FACTS)
    monkeypatch.setattr(gpuscale.commands, "model_choice", lambda option, value, build=True: None)  # hand-made facts
    probes = tmp_path / "probes"
    probes.mkdir()
    return repo_params, probes


def one_off_argv(tmp_path, repo_params: Path, model: str, devices: str, reference: str = "") -> list[str]:
    """`gpuscale predict --model MODEL` on this repo's params and an overlay naming the study's devices and the
    reference folders (none by default), with the probes folder of one_off_host."""
    overlay = tmp_path / "overlay.yaml"
    overlay.write_text(f"report: {{reference: [{reference}]}}\nstudy: {{devices: [{devices}]}}\n")
    return ["predict", "--params", str(repo_params), "--params", str(overlay), "--model", model, "--probes", "probes"]


def now_probe(device, rate, lease="thislease", fingerprint="host1", hours_ago=0.0) -> dict:
    """A probe of this host finished `hours_ago` hours ago."""
    from datetime import UTC, datetime, timedelta

    doc = lease_probe(device, rate, lease=lease)
    doc["environment"]["host_fingerprint"] = fingerprint
    doc["finished_at"] = (datetime.now(UTC) - timedelta(hours=hours_ago)).isoformat()
    return doc


def fake_probes(monkeypatch, rates=None) -> list[list[str]]:
    """subprocess.run replaced by what `gpuscale probe` would write, a probe of this host now, without timing
    anything (each call's rate the next of `rates`, default the same each time); returns the commands run."""
    import subprocess

    ran: list[list[str]] = []
    rates = iter(rates or [])

    def fake(command, **kwargs):
        ran.append(command)
        device = command[command.index("--device") + 1]
        rate = next(rates, 1e11 if device == "cpu" else 1e13)
        doc = now_probe(device, 1e13 if rate is None else rate)
        if rate is None:
            doc.update(status="not_measured", not_measured_reason="no CUDA GPU on this host")
        Path(command[command.index("--out") + 1]).write_text(json.dumps(doc))
        return subprocess.CompletedProcess(command, 0)

    monkeypatch.setattr(subprocess, "run", fake)
    return ran


def epochs(out: str) -> list[str]:
    return [line for line in out.splitlines() if " s an epoch " in line or "speedup" in line]


def test_the_one_off_prints_epochs_and_speedup_with_bands_from_the_workflow_s_probes_of_this_host(
    tmp_path, monkeypatch, capsys
):
    three_leases(tmp_path, monkeypatch)
    repo_params, probes = one_off_host(tmp_path, monkeypatch)
    for device, rate in (("cpu", 1e11), ("cuda", 1e13)):
        (probes / f"{device}.json").write_text(json.dumps(now_probe(device, rate)))
    before = {p.name: p.read_bytes() for p in probes.iterdir()}
    argv = one_off_argv(tmp_path, repo_params, "large", "cpu, cuda", reference="reference/paired")
    ran = fake_probes(monkeypatch)
    from gpuscale import cli

    assert cli.main(argv) == 0
    assert ran == []  # the workflow's probes of this host and boot are reused, read only
    out = capsys.readouterr().out
    assert "large, predicted for this host (boot thisleas)" in out
    assert out.count(" s an epoch ") == 2 and "speedup" in out and "x to " in out
    assert "the shape of 3 leases (model)" in out
    assert {p.name: p.read_bytes() for p in probes.iterdir()} == before


def test_the_one_off_probes_into_its_cache_never_into_the_workflow_s_probes_and_reuses_it(
    tmp_path, monkeypatch, capsys
):
    """Two calls on an unchanged machine: the first probes into .gpuscale/cache/probe/<host>/, the second reads
    that probe and prints the same epochs and speedup (each probe's level moving from call to call made them
    1.5x apart, far more than a quarter of their band); results/probe (here `probes`) is never written."""
    from gpuscale import cli

    repo_params, probes = one_off_host(tmp_path, monkeypatch)
    (probes / "cpu.json").write_text(json.dumps(now_probe("cpu", 1e11, lease="an earlier boot")))
    before = {p.name: p.read_bytes() for p in probes.iterdir()}
    ran = fake_probes(monkeypatch, rates=[1e11, None, 5e10, None])  # a second probe would land at half the rate
    argv = one_off_argv(tmp_path, repo_params, "small", "cpu, cuda")
    assert cli.main(argv) == 0
    assert sorted(c[c.index("--device") + 1] for c in ran) == ["cpu", "cuda"]  # the other boot's cpu probe: redone
    assert all(c[1:4] == ["-m", "gpuscale", "probe"] for c in ran)
    outs = {Path(c[c.index("--out") + 1]).resolve() for c in ran}
    cache = (tmp_path / probecache.CACHE / "host1").resolve()
    assert outs == {cache / "cpu-small.json", cache / "cuda.json"}
    first = capsys.readouterr().out
    assert (
        "made before this boot of the machine" in first and "cuda     not measured: no CUDA GPU on this host" in first
    )
    assert first.count(" s an epoch ") == 1 and "from: probe" in first
    assert cli.main(argv) == 0
    assert len(ran) == 2  # the cache hit: no probe taken
    second = capsys.readouterr().out
    assert epochs(second) == epochs(first)
    assert {p.name: p.read_bytes() for p in probes.iterdir()} == before
    assert cli.main([*argv, "--fresh-probe"]) == 0  # the flag takes a new probe, into the cache again
    assert len(ran) == 4 and epochs(capsys.readouterr().out) != epochs(first)


def test_the_one_off_probes_the_cpu_again_where_its_layer_table_lacks_the_model(tmp_path, monkeypatch, capsys):
    """A probe of this boot timed the study's layer table without the model asked for, which was then priced by
    the rates by kind: the one-off takes the CPU's probe again with the model's layers first (probe --model)."""
    from gpuscale import cli

    repo_params, probes = one_off_host(tmp_path, monkeypatch)
    with_table = now_probe("cpu", 1e11)
    row = {"seconds_per_image": 1e-3, "layer_calls": 10, "distinct_layer_calls": 5}
    table = {"batch_size": 32, "models": {"large": row}, "models_not_timed": [], "layers": [], "seconds": 1.0}
    with_table["layer_table"] = table
    (probes / "cpu.json").write_text(json.dumps(with_table))
    ran = fake_probes(monkeypatch)
    argv = one_off_argv(tmp_path, repo_params, "small", "cpu")
    assert cli.main(argv) == 0
    assert len(ran) == 1 and ran[0][ran[0].index("--device") + 1] == "cpu"
    assert ran[0][ran[0].index("--model") + 1] == "small"
    assert "its layer table has no small" in capsys.readouterr().out
    ran.clear()
    table["models"]["small"] = row
    (probes / "cpu.json").write_text(json.dumps(with_table))
    assert cli.main(argv) == 0 and ran == []  # its table has it: no probe


def test_the_probe_cache_is_keyed_by_host_and_reuses_only_a_recent_probe_of_this_host_and_boot(tmp_path):
    root = tmp_path / "cache"

    def put(fingerprint, doc, device="cuda", model="small"):
        path = probecache.cache_path(fingerprint, device, model, root=root)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(doc))
        return path

    def find(fingerprint="host1", lease="thislease", device="cuda", model="small", hours=24.0):
        return probecache.find(device, model, fingerprint, lease, None, max_age_hours=hours, root=root)[0]

    mine = put("host1", now_probe("cuda", 1e13, hours_ago=2))
    put("host2", now_probe("cuda", 1e13, fingerprint="host2"))
    assert find() == mine and find("host2") != mine  # each host reads its own folder
    assert find("host3") is None  # a host never probed: nothing to reuse
    assert find(lease="next boot") is None  # a reboot (a rented machine's next lease) has its own pace
    assert find(hours=1.0) is None  # older than allowed
    put("host1", now_probe("cuda", 1e13, fingerprint="other hardware"))  # copied in from another machine
    assert find() is None
    # a CPU's probe is kept per model (its layer table times the model); a spec's key follows its file's content
    assert probecache.cache_path("h", "cpu", "resnet18").name == "cpu-resnet18.json"
    spec = "examples/mynet.py:build"
    assert probecache.model_key(spec, "a") != probecache.model_key(spec, "b")
    assert probecache.model_key(spec, "a").startswith("spec-") and "/" not in probecache.model_key(spec, "a")


def test_models_that_truly_differ_keep_their_own_ratio_and_one_lease_s_noise_is_shrunk_to_the_centre():
    probes = [lease_probe("cpu", 1e11, lease=str(i)) for i in range(3)]
    own = {"small": 0.5, "large": 2.0, "other": 1.0}
    noise = [1.0, 1.05, 1 / 1.05]
    leases = [
        transfer.Lease(str(i), {"cpu": p}, [observation(m, "cpu", own[m] * n * base(p, m)) for m in own])
        for i, (p, n) in enumerate(zip(probes, noise, strict=True))
    ]
    shape = transfer.shape(leases, FACTS, "cpu")
    assert shape.tau > 10 * shape.sd  # models differ far more than leases do
    for model, ratio in own.items():
        c, basis = shape.correction(model)
        assert basis == "model" and c == pytest.approx(ratio, rel=0.01)
    # the same three models measured in one lease each: a lone ratio is trusted only as far as tau allows
    w = shape.tau**2 / (shape.tau**2 + shape.sd**2 / 1)
    lone = transfer.Shape("cpu", ("0",), {"small": [0.5], "large": [2.0], "other": [1.0]}, shape.sd, shape.tau)
    assert lone.correction("small")[0] == pytest.approx(math.exp(w * math.log(0.5) + (1 - w) * 0.0))


def test_the_leases_probed_as_the_tool_probes_today_are_told_apart_and_summarised_beside_all_leases():
    def probes(harness: int | None = 2, source: str = "prepared data") -> dict:
        cpu, gpu = lease_probe("cpu", 1e11), lease_probe("cuda", 1e12)
        cpu["layer_table"] = {"models": {"small": {"seconds_per_image": 1e-3}}}
        if harness is not None:
            cpu["layer_table"]["harness"] = harness
        for doc in (cpu, gpu):
            doc["input_pipeline"]["source"] = source
        return {"cpu": cpu, "cuda": gpu}

    assert transfer.Lease("now", probes()).probed_as_today()
    assert not transfer.Lease("harness 1", probes(harness=1)).probed_as_today()
    assert not transfer.Lease("before harnesses were recorded", probes(harness=None)).probed_as_today()
    assert not transfer.Lease("synthetic images", probes(source="synthetic")).probed_as_today()
    assert not transfer.Lease("one device", {"cpu": probes()["cpu"]}).probed_as_today()

    def row(lease, error, today):
        return {
            "device": "speedup",
            "lease": lease,
            "model": "small",
            "error_percent": error,
            "inside": error < 20,
            "probed_as_today": today,
        }

    rows = [row("new", 10.0, True), row("new", -12.0, True), row("old", -50.0, False)]
    summary = validation.summarize(rows)
    assert [s["lease"] for s in summary] == [validation.ALL_LEASES, validation.PROBED_AS_TODAY, "new", "old"]
    today = summary[1]
    assert today["models"] == 2 and today["median_abs_error_percent"] == pytest.approx(11.0)
    assert today["worst_abs_error_percent"] == 12.0 and today["coverage_percent"] == 100.0
    assert summary[0]["models"] == 3 and summary[0]["worst_abs_error_percent"] == 50.0
    # where every lease (or none) is probed as today, the row would repeat another: none
    for same in ([row("new", 10.0, True)], [row("old", 10.0, False)]):
        assert validation.PROBED_AS_TODAY not in {s["lease"] for s in validation.summarize(same)}


SIX = {"a": 0.05, "b": 0.07, "c": 0.09, "d": 0.11, "e": 0.13, "f": 0.15}  # six models' layers per op


def structured(xs: dict[str, float]) -> dict[str, cm.ModelFacts]:
    """Models with 100 layers and 100 / x dispatched ops each: layers per op x."""
    return {
        m: cm.ModelFacts(m, 1_000, 1e9, {"conv": 1e9}, layers=100, ops_per_step=round(100 / x)) for m, x in xs.items()
    }


def line_leases(facts, log_ratio, noise=(1.0, 1.1, 0.9)) -> list[transfer.Lease]:
    """Three leases measuring every model at exp(log_ratio(x)) times its probe's prediction, times the lease's noise."""
    leases = []
    for i, n in enumerate(noise):
        probe = lease_probe("cuda", 1e12, lease=str(i))
        obs = [
            observation(m, "cuda", n * math.exp(log_ratio(transfer.layers_per_op(f))) * base(probe, m, facts))
            for m, f in facts.items()
        ]
        leases.append(transfer.Lease(str(i), {"cuda": probe}, obs))
    return leases


def test_a_model_no_lease_measured_is_priced_by_the_line_of_the_models_ratios_against_their_layers_per_op():
    """Where the measured models' ratios follow their layers per op (a model of many non-layer ops, a ViT or a
    DenseNet, runs below what a probe's conv-norm-ReLU stack prices per op), an unseen model takes the line's value at
    its own layers per op, not the median, and its band adds the line's own uncertainty there."""
    xs = SIX
    facts = structured({**xs, "new": 0.06, "far": 0.40})
    measured = {m: facts[m] for m in xs}
    off = {0.05: 0.02, 0.07: -0.02, 0.09: 0.02, 0.11: -0.02, 0.13: 0.02, 0.15: -0.02}  # each model a little off it
    leases = line_leases(measured, lambda x: 4.0 * (x - 0.10) + off[round(x, 2)])
    shape = transfer.shape(leases, measured, "cuda")
    line = shape.line
    assert line is not None and line.count == 6 and line.slope == pytest.approx(4.0, rel=0.1)
    assert line.intercept == pytest.approx(-0.4, abs=0.04)
    assert 0 < line.residual < 0.05 and line.tau == 0.0  # the models' spread about it: less than a lease's noise
    target = lease_probe("cuda", 1e12, lease="T")
    new = transfer.predict(target, shape, facts["new"], 1000, 100)
    assert new["shape"] == "device" and new["correction"] == pytest.approx(math.exp(4.0 * (0.06 - 0.10)), rel=0.05)
    assert new["target"] == "layers per op"
    _, se = line.at(transfer.layers_per_op(facts["new"]))
    assert new["log_error"] == pytest.approx(math.sqrt(shape.sd**2 + se**2))
    # the median of the measured models' ratios (exp(0)) is farther from its ratio than the line at its structure
    assert abs(math.log(new["correction"]) - 4.0 * (0.06 - 0.10)) < abs(shape.centre() - 4.0 * (0.06 - 0.10))
    # a structure far from every measured model's: the line held half the measured range past its end, the band wider
    far = transfer.predict(target, shape, facts["far"], 1000, 100)
    held = line.high + (line.high - line.low) / 2  # 0.15 + 0.05, up to the rounding of the op counts
    assert math.log(far["correction"]) == pytest.approx(line.intercept + line.slope * held)
    assert far["log_error"] > new["log_error"] and line.at(0.40)[1] > se
    # a measured model is shrunk towards the line at its own x, not towards the median
    c, basis = shape.correction("a", 0.05)
    assert basis == "model" and math.log(c) == pytest.approx(line.at(0.05)[0])  # tau 0: all of it the line's


def test_no_line_where_the_ratios_do_not_follow_layers_per_op_or_too_few_models_tell():
    xs = SIX
    facts = structured(xs)
    zigzag = {0.05: 0.3, 0.07: -0.3, 0.09: 0.3, 0.11: -0.3, 0.13: 0.3, 0.15: -0.3}  # differ, but not by x
    shape = transfer.shape(line_leases(facts, lambda x: zigzag[round(x, 2)]), facts, "cuda")
    assert shape.line is None and shape.tau > 0.2
    target = lease_probe("cuda", 1e12, lease="T")
    assert transfer.predict(target, shape, facts["a"], 1000, 100)["target"] == "median"
    # a slope the models' scatter could draw: a two-sided t test at 5% over 6 models needs t >= 2.78 (4 degrees of
    # freedom); these slopes stand 1.5, 2.2 and 3.7 standard errors from 0
    scatter = {0.05: 0.1, 0.07: -0.1, 0.09: 0.1, 0.11: -0.1, 0.13: 0.1, 0.15: -0.1}
    assert transfer.LINE_TEST_LEVEL == 0.05
    for table, freedom in ((3.182, 3), (2.776, 4), (2.228, 10), (2.042, 30)):  # Student's t, 97.5% quantile
        assert transfer.t_quantile(0.975, freedom) == pytest.approx(table, abs=0.005)
    for slope, drawn in ((3.0, False), (4.0, False), (6.0, True)):
        got = transfer.shape(line_leases(facts, lambda x, s=slope: s * x + scatter[round(x, 2)]), facts, "cuda")
        assert (got.line is not None) == drawn, slope
    assert got.line.slope == pytest.approx(5.14, abs=0.05)
    alike = transfer.shape(line_leases(facts, lambda x: 0.0), facts, "cuda")  # every model on a flat line, exactly
    assert alike.line is None
    assert transfer.MIN_LINE_MODELS == 5
    four = {m: facts[m] for m in "abcd"}  # an exact line through four models is still four models' quirk
    assert transfer.shape(line_leases(four, lambda x: 4.0 * x), four, "cuda").line is None
    # models whose facts lack the op count (no layers per op) neither make a line nor are priced by one
    assert transfer.layers_per_op(FACTS["small"]) is None
    assert transfer.shape(line_leases(FOUR, lambda x: 0.0), FOUR, "cuda").line is None


def test_leave_one_lease_out_prices_an_unseen_model_by_the_line_through_the_other_models():
    xs = SIX
    facts = structured(xs)
    leases = line_leases(facts, lambda x: 4.0 * (x - 0.10), noise=(1.0, 1.0, 1.0))
    rows = validation.leave_one_lease_out(leases, facts, unseen=True)
    assert len(rows) == 3 * 6 and all(r["shape"] == "device" for r in rows)
    # every model lies on the line the other five draw: each is predicted exactly, the ends by extrapolation
    assert all(abs(r["error_percent"]) < 1e-6 and r["inside"] for r in rows)


def test_a_line_with_models_truly_off_it_shrinks_measured_models_and_widens_every_band_by_its_uncertainty():
    """Models off the line by more than a lease's noise (tau > 0 about it): a measured model keeps part of its own
    ratio, w = tau² / (tau² + sd² / n), and its band holds the line's uncertainty as far as it leans on the line,
    (1 - w) se; an unseen model's band holds tau and se. The residual sd has k - 2 degrees of freedom."""
    xs = SIX
    facts = structured({**xs, "new": 0.10})
    measured = {m: facts[m] for m in xs}
    off = {0.05: 0.15, 0.07: -0.15, 0.09: 0.15, 0.11: -0.15, 0.13: 0.15, 0.15: -0.15}
    leases = line_leases(measured, lambda x: 10.0 * x + off[round(x, 2)], noise=(1.0, 1.02, 0.98))
    shape = transfer.shape(leases, measured, "cuda")
    line = shape.line
    x = [transfer.layers_per_op(f) for f in measured.values()]
    y = [statistics.fmean(math.log(r) for r in shape.by_model[m]) for m in measured]
    slope, intercept = np.polyfit(x, y, 1)
    left = sum((b - intercept - slope * a) ** 2 for a, b in zip(x, y, strict=True)) / (len(x) - 2)
    assert (line.slope, line.intercept, line.residual) == pytest.approx((slope, intercept, math.sqrt(left)))
    assert line.tau == pytest.approx(math.sqrt(left - shape.sd**2 / 3)) and line.tau > 3 * shape.sd
    target = lease_probe("cuda", 1e12, lease="T")
    w = line.tau**2 / (line.tau**2 + shape.sd**2 / 3)
    got = transfer.predict(target, shape, facts["a"], 1000, 100)
    at, se = line.at(transfer.layers_per_op(facts["a"]))
    assert got["shape"] == "model" and math.log(got["correction"]) == pytest.approx(w * y[0] + (1 - w) * at)
    assert got["log_error"] == pytest.approx(math.hypot(shape.sd, (1 - w) * se))
    new = transfer.predict(target, shape, facts["new"], 1000, 100)
    _, se_new = line.at(transfer.layers_per_op(facts["new"]))
    assert new["log_error"] == pytest.approx(math.sqrt(shape.sd**2 + line.tau**2 + se_new**2))
    # a model whose facts lack op counts has no place on the line: the device's median, its band tau about it
    plain = transfer.predict(target, shape, FACTS["small"], 1000, 100)
    assert plain["target"] == "median" and plain["correction"] == pytest.approx(math.exp(shape.centre()))
    assert plain["log_error"] == pytest.approx(math.hypot(shape.sd, shape.tau))
