import json

import pytest
from conftest import REPO

from gpuscale.contract import params, record
from gpuscale.measure import epoch as epoch_mod
from gpuscale.measure import train


def tiny_settings(device="cpu", epochs=2, on_missing="record", deterministic=False):
    config = params.load([REPO / "params.yaml"])
    config["study"]["on_missing_device"] = on_missing
    config["train"].update(
        epochs=epochs,
        batch_size=32,
        eval_batch_size=64,
        log_every_steps=2,
        deterministic=deterministic,
        loader={"num_workers": 0, "pin_memory": False, "persistent_workers": False},
    )
    return params.run_settings(config, "simplecnn", device, "paper", 0)


def test_tiny_run_writes_a_valid_record(prepared, tmp_path, caplog):
    out = tmp_path / "run.json"
    caplog.set_level("INFO")
    train.run(tiny_settings(), prepared, out, threads=1, label="tiny")
    rec = record.load(out)
    assert rec["status"] == "measured"
    assert rec["key"] == {"model": "simplecnn", "device": "cpu", "variant": "paper", "seed": 0}
    assert rec["environment"]["torch_threads"] == 1
    assert rec["data"]["synthetic"] is True and rec["data"]["train_images"] == 200
    assert [e["epoch"] for e in rec["epochs"]] == [1, 2]
    assert [e["warmup"] for e in rec["epochs"]] == [True, False]
    assert all(e["train_images"] == 200 and e["steps"] == 7 for e in rec["epochs"])
    timing = rec["timing"]
    assert timing["total_train_seconds"] == pytest.approx(sum(e["train_seconds"] for e in rec["epochs"]))
    assert timing["warmup_epoch_seconds"] == rec["epochs"][0]["train_seconds"]
    assert timing["steady_epoch_seconds_mean"] == rec["epochs"][1]["train_seconds"]
    assert timing["total_eval_seconds"] > 0 and timing["extrapolated"] is False
    assert rec["quality"]["final_test_accuracy"] == rec["epochs"][-1]["test_accuracy"]
    assert rec["model"]["parameters"] == 554_474
    assert rec["settings"]["train"]["epochs"] == 2
    assert any("step 2/7" in m for m in caplog.messages)  # progress is logged while it runs
    # the clock at sample_warmup_steps (5 of 7 steps): a synchronised mark inside each epoch, for the sampling check
    for epoch in rec["epochs"]:
        [[step, seconds]] = epoch["step_marks"]
        assert step == 5 and 0 < seconds < epoch["train_seconds"]


def test_learning_rate_follows_steplr(prepared, tmp_path):
    settings = tiny_settings(epochs=3)
    settings["train"]["scheduler"] = {"name": "steplr", "step_size": 2, "gamma": 0.5}
    train.run(settings, prepared, tmp_path / "r.json", threads=1)
    rates = [e["learning_rate"] for e in record.load(tmp_path / "r.json")["epochs"]]
    assert rates == pytest.approx([1e-3, 1e-3, 5e-4])


def test_missing_gpu_gives_not_measured_record_never_a_timing(prepared, tmp_path):
    pytest.importorskip("torch")
    import torch

    if torch.cuda.is_available():
        pytest.skip("this host has a GPU")
    out = tmp_path / "cuda.json"
    train.run(tiny_settings(device="cuda"), prepared, out, threads=1)
    rec = record.load(out)
    assert rec["status"] == "not_measured"
    assert "no CUDA GPU" in rec["not_measured_reason"]
    assert rec["timing"] is None and rec["epochs"] == [] and rec["quality"] is None


def test_missing_gpu_in_strict_mode_is_an_error_and_writes_nothing(prepared, tmp_path):
    import torch

    if torch.cuda.is_available():
        pytest.skip("this host has a GPU")
    out = tmp_path / "cuda.json"
    with pytest.raises(train.TrainError, match="on_missing_device"):
        train.run(tiny_settings(device="cuda-3", on_missing="error"), prepared, out, threads=1)
    assert not out.exists()
    assert not list(tmp_path.iterdir())


def test_same_seed_deterministic_mode_gives_identical_losses(prepared, tmp_path):
    runs = []
    for name in ("a.json", "b.json"):
        train.run(tiny_settings(deterministic=True), prepared, tmp_path / name, threads=1)
        runs.append(record.load(tmp_path / name)["epochs"])
    assert record.load(tmp_path / "a.json")["environment"]["deterministic_algorithms"] is True
    assert [e["train_loss"] for e in runs[0]] == [e["train_loss"] for e in runs[1]]
    assert [e["test_accuracy"] for e in runs[0]] == [e["test_accuracy"] for e in runs[1]]


def test_record_schema_rejects_a_not_measured_record_with_a_timing(prepared, tmp_path):
    out = tmp_path / "cuda.json"
    import torch

    if torch.cuda.is_available():
        pytest.skip("this host has a GPU")
    train.run(tiny_settings(device="cuda"), prepared, out, threads=1)
    forged = json.loads(out.read_text())
    forged["timing"] = {"total_train_seconds": 1.0}
    out.write_text(json.dumps(forged))
    with pytest.raises(record.RecordError, match=str(out)):
        record.load(out)


def test_device_slugs():
    assert str(train.torch_device("cuda-2")) == "cuda:2"
    assert str(train.torch_device("cpu")) == "cpu"


def test_phase_profile_splits_a_step_and_its_phases_add_up(prepared, tmp_path):
    settings = tiny_settings(epochs=2)
    settings["train"]["phase_profile_steps"] = 6
    train.run(settings, prepared, tmp_path / "p.json", threads=1)
    profile = record.load(tmp_path / "p.json")["phase_profile"]
    assert profile["steps"] == 6
    phases = profile["phase_seconds_per_step"]
    assert set(phases) == set(epoch_mod.PHASES)
    assert all(v > 0 for k, v in phases.items() if k != "host_to_device")
    # the phases are disjoint spans inside the instrumented step (so they never add up to more), and together
    # they are most of it: what is left is loop bookkeeping (a generous bound: a loaded machine may preempt there)
    assert (
        0.5 * profile["instrumented_step_seconds"]
        <= profile["phase_sum_seconds_per_step"]
        <= profile["instrumented_step_seconds"]
    )
    assert sum(profile["phase_fractions"].values()) == pytest.approx(1.0)
    assert profile["clean_step_seconds"] > 0


def test_energy_is_marked_unavailable_with_a_reason(prepared, tmp_path):
    train.run(tiny_settings(epochs=1), prepared, tmp_path / "e.json", threads=1)
    rec = record.load(tmp_path / "e.json")
    gpu, cpu = rec["energy"]["gpu"], rec["energy"]["cpu"]
    assert gpu == {
        "available": False,
        "source": "none",
        "reason": "no GPU in this run",
        "joules_per_epoch": None,
        "images_per_joule": None,
    }
    from gpuscale.measure import energy

    if not energy.RaplMeter().available:
        assert cpu["available"] is False and cpu["reason"] and cpu["joules_per_epoch"] is None
    else:
        assert cpu["joules_per_epoch"] > 0


def test_sampled_epoch_is_marked_extrapolated_and_counts_the_whole_epoch(prepared, tmp_path):
    settings = tiny_settings(epochs=2)
    settings["train"].update(max_steps_per_epoch=3, sample_warmup_steps=1)
    train.run(settings, prepared, tmp_path / "s.json", threads=1)
    rec = record.load(tmp_path / "s.json")
    assert rec["timing"]["extrapolated"] is True
    for epoch in rec["epochs"]:
        assert epoch["extrapolated"] and epoch["measured_steps"] == 3 and epoch["steps"] == 7
        assert epoch["train_images"] == 200
        assert epoch["train_seconds"] > epoch["measured_seconds"]


def test_thread_sweep_run_uses_the_swept_threads_and_keys_the_record(prepared, tmp_path):
    config = params.load([REPO / "params.yaml"])
    config["train"].update(
        epochs=1,
        batch_size=32,
        phase_profile_steps=0,
        loader={"num_workers": 0, "pin_memory": False, "persistent_workers": False},
    )
    settings = params.sweep_settings(config, "simplecnn", "cpu", "threads", 1, "paper", 0)
    train.run(settings, prepared, tmp_path / "t.json", threads=2)
    rec = record.load(tmp_path / "t.json")
    assert rec["environment"]["torch_threads"] == 1
    assert rec["key"]["sweep"] == {"parameter": "threads", "value": 1}
    assert record.key(rec) == ("simplecnn", "cpu", "paper", 0, "threads", 1)


def test_deterministic_mode_is_switched_off_again_for_the_next_run(prepared, tmp_path):
    train.run(tiny_settings(deterministic=True, epochs=1), prepared, tmp_path / "d.json", threads=1)
    train.run(tiny_settings(deterministic=False, epochs=1), prepared, tmp_path / "n.json", threads=1)
    assert record.load(tmp_path / "n.json")["environment"]["deterministic_algorithms"] is False
