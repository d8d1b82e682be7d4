"""The sampled protocol against a full run of the same tiny config (CPU).

Each run is its own `gpuscale train` process, as in use: timings taken inside the test process would share
the CPU with whatever earlier tests left running there (thread pools of other libraries).
"""

import statistics
import subprocess
import sys

import pytest
from conftest import REPO, tool_env, write_yaml

from gpuscale import data, record


def test_sampled_extrapolation_agrees_with_a_full_run_within_ten_percent(tmp_path):
    data.prepare({"source": "synthetic", "path": None, "url": "http://x.invalid/a", "md5": "0" * 32,
                  "train_size": 1920, "test_size": 50, "subset_seed": 0, "download_timeout_seconds": 1,
                  "download_retries": 0}, tmp_path / "prepared")
    train = {"epochs": 3, "batch_size": 64, "eval_batch_size": 256, "phase_profile_steps": 0, "log_every_steps": 100,
             "loader": {"num_workers": 0, "pin_memory": False, "persistent_workers": False}}
    full = write_yaml(tmp_path / "full.yaml", {"train": train})
    sampled = write_yaml(tmp_path / "sampled.yaml", {"train": {**train, "max_steps_per_epoch": 12,
                                                               "sample_warmup_steps": 2}})
    steady = {"full": [], "sampled": []}
    # interleaved, so a slow spell of a shared machine falls on both sides
    for i, (name, overlay) in enumerate([("full", full), ("sampled", sampled)] * 3):
        out = tmp_path / f"{name}{i}.json"
        subprocess.run([sys.executable, "-m", "gpuscale", "train", "--params", str(REPO / "params.yaml"),
                        "--params", str(overlay), "--model", "simplecnn", "--device", "cpu", "--threads", "1",
                        "--data", str(tmp_path / "prepared"), "--out", str(out)],
                       check=True, capture_output=True, env=tool_env())
        epochs = record.load(out)["epochs"]
        assert all(e["extrapolated"] == (name == "sampled") for e in epochs)
        steady[name] += [e["train_seconds"] for e in epochs[1:]]
    assert statistics.median(steady["sampled"]) == pytest.approx(statistics.median(steady["full"]), rel=0.10)
