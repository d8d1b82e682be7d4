"""Data-parallel training: the gloo path with 2 CPU processes, launched the way `cuda-ddpN` is (torchrun's
launcher), and the scaling table built from such records."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
import records as fixtures
import torch
from conftest import REPO, TINY, tool_env, write_yaml
from test_aggregate import run as aggregate_run

from gpuscale.contract import params, record
from gpuscale.measure import loaders


def test_two_gloo_processes_train_one_run_and_rank_zero_writes_its_record(tmp_path):
    overlay = write_yaml(
        tmp_path / "o.yaml",
        {
            **TINY,
            "study": {**TINY["study"], "devices": ["cpu", "cpu-ddp2"]},
            "data": {"source": "synthetic", "train_size": 640, "test_size": 60},
            "train": {**TINY["train"], "epochs": 3, "phase_profile_steps": 3},
        },
    )
    argv = [sys.executable, "-m", "gpuscale"]
    common = ["--params", str(REPO / "params.yaml"), "--params", str(overlay)]
    subprocess.run(
        [*argv, "data", *common, "--out", str(tmp_path / "prepared")], check=True, env=tool_env(), capture_output=True
    )
    out = tmp_path / "runs" / "simplecnn" / "cpu-ddp2" / "paper-seed0.json"
    done = subprocess.run(
        [
            *argv,
            "train",
            *common,
            "--model",
            "simplecnn",
            "--device",
            "cpu-ddp2",
            "--threads",
            "2",
            "--data",
            str(tmp_path / "prepared"),
            "--out",
            str(out),
            "--log",
            str(tmp_path / "t.log"),
        ],
        env=tool_env(),
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    rec = record.load(out)
    assert rec["key"]["device"] == "cpu-ddp2" and rec["status"] == "measured"
    dist = rec["distributed"]
    assert (dist["world_size"], dist["backend"]) == (2, "gloo")
    assert (dist["per_process_batch_size"], dist["global_batch_size"]) == (32, 64)
    assert rec["environment"]["torch_threads"] == 1  # the job's 2 threads shared out
    # each process trained on its half: 320 images = 10 steps of 32; the epoch counts both halves
    assert all(e["steps"] == 10 and e["train_images"] == 640 for e in rec["epochs"])
    losses = [e["train_loss"] for e in rec["epochs"]]
    assert all(np.isfinite(losses)) and losses[-1] < losses[0]
    assert rec["quality"]["final_test_accuracy"] > 0.5  # separable synthetic classes: DDP learns them
    assert [p.name for p in out.parent.iterdir()] == ["paper-seed0.json"]  # one record, from rank 0
    log = (tmp_path / "t.log").read_text()
    assert "epoch 3/3 done" in log and "[rank 1]" not in log


def test_device_loader_shards_are_disjoint_and_cover_the_data(prepared):
    from gpuscale.inputs import data

    dataset, _, _ = data.load_prepared(prepared)
    settings = params.train_settings(params.load([REPO / "params.yaml"]), "simplecnn")
    ids = np.arange(len(dataset.train_labels))  # each image's own id in place of its label
    for train in (False, True):
        seen = []
        for rank in range(3):
            loader = loaders.DeviceLoader(
                dataset.train_images,
                ids,
                settings,
                torch.device("cpu"),
                batch_size=32,
                train=train,
                seed=0,
                rank=rank,
                world_size=3,
            )
            batches = list(loader)
            assert len(batches) == len(loader) == 3
            seen.append(torch.cat([labels for _, labels in batches]).tolist())
        assert [len(s) for s in seen] == [67, 67, 67]  # 200 images in 3 equal shards, padded by one
        union = sorted(i for shard in seen for i in shard)
        assert sorted(set(union)) == list(range(200)) and len(union) == 201  # all covered, one repeated


def test_scaling_table_compares_data_parallel_runs_with_one_device(tmp_path):
    one = fixtures.make("resnet50", "cuda", [30.0, 10.0, 10.0])
    four = fixtures.make("resnet50", "cuda-ddp4", [40.0, 3.0, 3.0])
    four["distributed"] = {
        "world_size": 4,
        "backend": "nccl",
        "launcher": "test",
        "clock": "test",
        "distributed_batch": "per_process",
        "per_process_batch_size": 128,
        "global_batch_size": 512,
    }
    cpu = fixtures.make("resnet50", "cpu", [100.0, 100.0, 100.0])
    paths = [fixtures.write(tmp_path / "r", r) for r in (one, four, cpu)]
    out = aggregate_run(tmp_path, paths)
    row = out["scaling"].row(0, named=True)
    assert (row["device"], row["base_device"], row["world_size"], row["global_batch_size"]) == (
        "cuda-ddp4",
        "cuda",
        4,
        512,
    )
    assert row["speedup"] == pytest.approx(10.0 / 3.0) and row["efficiency"] == pytest.approx(10.0 / 12.0)
    # the data-parallel run is no "GPU" in the CPU/GPU speedup table: only cuda pairs with cpu there
    assert out["speedup"]["gpu_device"].to_list() == ["cuda"]


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the answer of a host without a GPU")
def test_a_multi_gpu_device_on_a_host_without_gpus_is_not_measured(prepared, tmp_path):
    from test_train import tiny_settings

    from gpuscale.measure import train

    assert "no CUDA GPU" in train.spec_unavailable_reason("cuda-ddp4")
    assert train.spec_unavailable_reason("cpu-ddp2") is None
    settings = tiny_settings()
    settings["device"] = "cuda-ddp2"
    rec = train.run(settings, prepared, tmp_path / "r.json", threads=1)
    assert rec["status"] == "not_measured" and rec["timing"] is None and "no CUDA GPU" in rec["not_measured_reason"]
