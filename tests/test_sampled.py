"""The sampled protocol against a full run of the same tiny config (CPU)."""

import statistics

import pytest

from conftest import REPO
from gpuscale import data, params, record, train


def test_sampled_extrapolation_agrees_with_a_full_run_within_ten_percent(tmp_path):
    data.prepare({"source": "synthetic", "path": None, "url": "http://x.invalid/a", "md5": "0" * 32,
                  "train_size": 1920, "test_size": 50, "subset_seed": 0, "download_timeout_seconds": 1,
                  "download_retries": 0}, tmp_path / "prepared")
    config = params.load([REPO / "params.yaml"])
    config["train"].update(epochs=3, batch_size=64, eval_batch_size=256, phase_profile_steps=0, log_every_steps=100,
                           loader={"num_workers": 0, "pin_memory": False, "persistent_workers": False})
    full = params.run_settings(config, "simplecnn", "cpu", "paper", 0)
    sampled = params.run_settings(config, "simplecnn", "cpu", "paper", 0)
    sampled["train"].update(max_steps_per_epoch=12, sample_warmup_steps=2)
    steady = {"full": [], "sampled": []}
    # interleaved, so a slow spell of a shared machine falls on both sides
    for i, (name, settings) in enumerate([("full", full), ("sampled", sampled)] * 2):
        train.run(settings, tmp_path / "prepared", tmp_path / f"{name}{i}.json", threads=1)
        epochs = record.load(tmp_path / f"{name}{i}.json")["epochs"]
        assert all(e["extrapolated"] == (name == "sampled") for e in epochs)
        steady[name] += [e["train_seconds"] for e in epochs[1:]]
    assert statistics.median(steady["sampled"]) == pytest.approx(statistics.median(steady["full"]), rel=0.10)
