"""The machine-state witness (gpuscale.measure.sentinel), the record's conditions and their upgrade, and the interleaved
timing order (study.order, study.rounds)."""

from __future__ import annotations

import json
import logging

import pytest
import torch
from conftest import REPO, run
from test_train import tiny_settings

from gpuscale.contract import conditions, params, record
from gpuscale.contract.settings import TrainSettings
from gpuscale.measure import sentinel, train


def fake(values: dict[str, float], spread: float = 0.01) -> dict:
    """A sentinel with the given component values (hand-made numbers, not a measurement)."""
    return {
        "device": "cpu",
        "threads": 1,
        "loader_workers": 0,
        "taken_at": "2026-01-01T00:00:00+00:00",
        "seconds": 1.0,
        "components": {
            name: {
                "value": v,
                "unit": conditions.unit_of(name)[0],
                "faster": conditions.unit_of(name)[1],
                "spread": spread,
                "repeats": 3,
            }
            for name, v in values.items()
        },
    }


def test_drift_is_a_speed_ratio_judged_against_the_sentinels_own_noise():
    before = fake({"pipeline_workers": 1000.0, "gpu_launch": 10e-6})
    same = fake({"pipeline_workers": 1030.0, "gpu_launch": 10.2e-6})
    drifted, ratios = conditions.drift(before, same)
    assert drifted is False
    assert ratios["pipeline_workers"] == pytest.approx(1.03)
    assert ratios["gpu_launch"] == pytest.approx(10 / 10.2)  # lower is faster: inverted, >1 = faster
    slower = fake({"pipeline_workers": 800.0, "gpu_launch": 10e-6})
    assert conditions.drift(before, slower) == (True, {"pipeline_workers": pytest.approx(0.8), "gpu_launch": 1.0})
    # the same 20% move inside a noisy sentinel's own spread (2 x 0.15 = 30%) is no drift
    assert (
        conditions.drift(fake({"pipeline_workers": 1000.0}, 0.15), fake({"pipeline_workers": 800.0}, 0.15))[0] is False
    )
    # a launch that got 1.5x slower (more seconds per op) drifted, and reads as a speed ratio below 1
    drifted, ratios = conditions.drift(before, fake({"pipeline_workers": 1000.0, "gpu_launch": 15e-6}))
    assert drifted is True and ratios["gpu_launch"] == pytest.approx(2 / 3)
    assert conditions.drift(None, before) == (None, {})


def test_conditions_name_the_lease_and_a_drifted_job_says_so():
    before, after = fake({"memory_bandwidth": 1e10}), fake({"memory_bandwidth": 0.5e10})
    cond = conditions.conditions(None, before, after)
    assert cond["lease"] == "unknown" and cond["drifted"] is True
    assert "memory_bandwidth x0.50" in conditions.drift_line(cond)
    assert conditions.drift_line(conditions.conditions("b00t", before, before)) is None


def test_a_dropped_component_is_shown_but_no_witness_of_drift():
    # cpu_training was measured by the first sentinel (the records of 2026-12-04) and dropped: it tracked nothing
    before = fake({"cpu_training": 1e12, "memory_bandwidth": 1e10})
    after = fake({"cpu_training": 0.4e12, "memory_bandwidth": 1e10})
    assert conditions.drift(before, after) == (False, {"memory_bandwidth": 1.0})
    assert "cpu_training" in conditions.table(before) and "TFLOP/s" in conditions.table(before)


def test_sentinel_measures_the_host_in_seconds_on_fixed_inputs():
    config = params.load([REPO / "params.yaml"])
    config["train"]["loader"] = {"num_workers": 0, "pin_memory": False, "persistent_workers": False}
    torch.set_num_threads(1)
    doc = sentinel.measure(TrainSettings.from_dict(config["train"]), torch.device("cpu"))
    assert set(doc["components"]) == set(conditions.HOST_COMPONENTS)  # no GPU parts on a CPU
    for name, comp in doc["components"].items():
        assert comp["value"] > 0 and comp["unit"] == conditions.COMPONENTS[name][0], name
        assert comp["spread"] >= 0 and comp["repeats"] >= sentinel.REPEATS
    assert doc["threads"] == 1 and doc["loader_workers"] == 0
    table = conditions.table(doc)
    assert "pipeline_one_process" in table and "images/s" in table and "GB/s" in table


def test_every_timed_run_carries_its_lease_and_sentinels(prepared, tmp_path):
    out = tmp_path / "run.json"
    train.run(tiny_settings(), prepared, out, threads=1, round_=2)
    rec = record.load(out)
    cond = rec["conditions"]
    assert rec["schema_version"] == 4 and rec["key"]["round"] == 2
    assert record.key(rec) == ("simplecnn", "cpu", "paper", 0, "round", 2)
    assert cond["lease"] == (rec["environment"].get("boot_id") or "unknown")
    assert set(cond["before"]["components"]) == set(cond["after"]["components"]) == set(conditions.HOST_COMPONENTS)
    assert cond["drifted"] in (True, False) and set(cond["drift"]) == set(conditions.HOST_COMPONENTS)
    # taken inside the job, around its epochs
    assert rec["started_at"] <= cond["before"]["taken_at"] <= cond["after"]["taken_at"] <= rec["finished_at"]


def test_a_drifted_job_ends_with_a_warning(prepared, tmp_path, monkeypatch, caplog):
    readings = iter([fake({"pipeline_workers": 1000.0}), fake({"pipeline_workers": 500.0})])
    monkeypatch.setattr(sentinel, "measure", lambda *_: next(readings))
    caplog.set_level(logging.INFO)
    train.run(tiny_settings(), prepared, tmp_path / "run.json", threads=1)
    assert record.load(tmp_path / "run.json")["conditions"]["drifted"] is True
    last = [r for r in caplog.records if r.name == "gpuscale.train"][-1]
    assert last.levelno == logging.WARNING and "drifted" in last.getMessage() and "x0.50" in last.getMessage()


def old_record(boot_id: str | None) -> dict:
    path = next((REPO / "research/reference-archive/h200-2026-12-03-lease3/runs").rglob("*.json"))
    rec = json.loads(path.read_text())
    rec.pop("conditions", None)
    rec["schema_version"] = 3
    rec["environment"]["boot_id"] = boot_id
    return rec


def test_older_records_upgrade_with_their_boot_id_or_an_unknown_lease(tmp_path):
    for boot, lease in (("dfacb20b-8cd1", "dfacb20b-8cd1"), (None, "unknown")):
        path = tmp_path / "old.json"
        path.write_text(json.dumps(old_record(boot)))
        rec = record.load(path)
        assert rec["conditions"] == {"lease": lease, "before": None, "after": None, "drifted": None, "drift": {}}
        assert "round" not in rec["key"] and len(record.key(rec)) == 4  # the first round: its key as before


def study(**changes) -> dict:
    config = params.load([REPO / "params.yaml"])
    config["study"].update(models=["simplecnn", "resnet18", "resnet50"], devices=["cpu", "cuda"], seeds=[0, 1])
    config["study"].update(changes)
    return config


def test_interleaved_order_keeps_each_models_devices_side_by_side_and_is_recorded_by_its_seed():
    keys = params.timing_order(study())
    assert len(keys) == 3 * 2 * 2 and len({json.dumps(k, sort_keys=True) for k in keys}) == len(keys)
    pairs = [keys[i : i + 2] for i in range(0, len(keys), 2)]
    for a, b in pairs:  # a (model, variant, seed) block: its two devices next to each other
        assert (a["model"], a["seed"]) == (b["model"], b["seed"]) and {a["device"], b["device"]} == {"cpu", "cuda"}
    assert keys == params.timing_order(study())  # the same order on every call
    orders = {json.dumps(params.timing_order(study(order_seed=s))) for s in range(6)}
    assert len(orders) > 1  # the seed reorders
    firsts = {params.timing_order(study(order_seed=s))[0]["device"] for s in range(12)}
    assert firsts == {"cpu", "cuda"}  # neither device always goes first
    grouped = params.timing_order(study(order="grouped"))
    assert [(k["model"], k["seed"], k["device"]) for k in grouped[:4]] == [
        ("simplecnn", 0, "cpu"),
        ("simplecnn", 0, "cuda"),
        ("simplecnn", 1, "cpu"),
        ("simplecnn", 1, "cuda"),
    ]


def test_rounds_take_the_whole_set_again_each_in_its_own_order():
    keys = params.timing_order(study(rounds=3))
    by_round = {r: [k for k in keys if k.get("round", 1) == r] for r in (1, 2, 3)}
    assert all(len(v) == 12 for v in by_round.values())
    strip = [[{k: v for k, v in key.items() if k != "round"} for key in by_round[r]] for r in (1, 2, 3)]
    assert all(sorted(map(json.dumps, s)) == sorted(map(json.dumps, strip[0])) for s in strip)
    assert strip[0] != strip[1] or strip[1] != strip[2]  # each round drawn anew
    assert keys.index(by_round[2][0]) == 12  # round 2 starts when round 1 is done
    paths = {params.record_path(**k) for k in keys}
    assert "results/runs/resnet18/cpu/paper-seed1-round3.json" in paths and len(paths) == 36


def test_a_dry_run_shows_the_timing_order(tmp_path):
    overlay = tmp_path / "order.yaml"
    overlay.write_text("study: {models: [simplecnn, resnet18], devices: [cpu, cuda], rounds: 2, order_seed: 5}\n")
    done = run(["snakemake", "-n", "--cores", "1", "--configfile", str(overlay)], REPO)
    order = params.timing_order(study(models=["simplecnn", "resnet18"], seeds=[0], rounds=2, order_seed=5))
    lines = [line.split(". ", 1)[1] for line in done.stderr.splitlines() if line.startswith("  ") and ". " in line]
    expected = [
        f"{k['model']} {k['device']} paper seed 0" + (f" round {k['round']}" if "round" in k else "") for k in order
    ]
    assert lines == expected
    assert "results/runs/simplecnn/cuda/paper-seed0-round2.json" in done.stdout
    assert "interleaved, RMIT under study.order_seed 5" in done.stderr


def test_round_numbers_are_checked_before_any_work(tmp_path):
    done = run(
        ["gpuscale", "train", "--model", "simplecnn", "--device", "cpu", "--round", "0", "--out", str(tmp_path / "r")],
        REPO,
        check=False,
    )
    assert done.returncode == 2 and "--round: 0 is out of range" in done.stderr
    assert done.stderr.count("\n") == 1


def test_one_run_per_key_and_lease_a_repeat_in_another_lease_is_kept(tmp_path):
    from gpuscale.analyze import aggregate

    recs = sorted((REPO / "reference/h200-2026-12-04/leases").glob("*/runs/simplecnn/cpu/paper-seed0.json"))
    assert len(recs) >= 2  # taken in several leases, under one key
    loaded, _ = aggregate.load_all({"study": recs})
    assert len(loaded) == len(recs)
    for path, (_, _, rec) in zip(recs, loaded, strict=True):  # leases/<boot id's first 8>/runs/...
        assert rec["conditions"]["lease"].startswith(
            path.relative_to(REPO / "reference/h200-2026-12-04/leases").parts[0]
        )
    copy = tmp_path / "copy.json"
    copy.write_text(recs[0].read_text())
    with pytest.raises(aggregate.AggregateError, match="two records for study/"):
        aggregate.load_all({"study": [recs[0], copy]})
