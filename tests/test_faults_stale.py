"""Stale partial files are cleaned by the next run and ignored by git; a checkpoint resumes only under the same
timing conditions (issue 16)."""

from __future__ import annotations

import os
import subprocess

import pytest
from conftest import REPO

from gpuscale.contract import fsutil
from gpuscale.measure import checkpoint


def dead_pid() -> int:
    proc = subprocess.Popen(["true"])
    proc.wait()
    return proc.pid  # reaped: no process has this id now (until the kernel reuses it, far later)


def test_a_killed_data_stage_leaves_a_partial_folder_that_the_next_run_removes(tmp_path):
    out = tmp_path / "data" / "prepared"
    stale = tmp_path / "data" / f".prepared.{dead_pid()}.abcd1234.partial"
    legacy = tmp_path / "data" / ".prepared.k3j4h5g6.partial"  # written before partial names held their writer
    live = tmp_path / "data" / f".prepared.{os.getpid()}.zzzz.partial"  # a writer still at work
    for folder in (stale, legacy, live):
        folder.mkdir(parents=True)
        (folder / "train_images.npy").write_bytes(b"\0" * 1000)
    with fsutil.atomic_directory(out) as tmp:
        (tmp / "x").write_text("done")
    assert (out / "x").read_text() == "done"
    assert not stale.exists() and not legacy.exists() and live.exists()


def test_a_stale_partial_file_beside_a_record_is_removed_by_the_next_write(tmp_path):
    stale = tmp_path / f".r.json.{dead_pid()}.q1w2e3.partial"
    stale.write_text("{")
    fsutil.write_json(tmp_path / "r.json", {"a": 1})
    assert not stale.exists() and [p.name for p in tmp_path.iterdir()] == ["r.json"]


@pytest.mark.parametrize(
    "path",
    [
        "data/.prepared.1234.abcd.partial",
        "results/runs/m/cpu/.paper-seed0.json.99.x.partial",
        "results/runs/m/cpu/.paper-seed0.ckpt.safetensors",
        "reports/.charts.1.a.partial",
        "data/.prepared.old",
    ],
)
def test_git_ignores_partial_files_and_checkpoints(path):
    done = subprocess.run(["git", "check-ignore", "-q", "--no-index", path], cwd=REPO, check=False)
    assert done.returncode == 0, f"{path} is not ignored"


def test_a_finished_run_removes_a_checkpoint_left_by_an_earlier_killed_run(prepared, tmp_path):
    from test_train import tiny_settings

    from gpuscale.measure import train

    out = tmp_path / "r.json"
    left = checkpoint.path_for(out)
    left.write_bytes(b"134 MB of a killed run's state")
    train.run(tiny_settings(epochs=1), prepared, out, threads=1, resume=False)
    assert out.exists() and not left.exists()


ENVIRONMENT = {
    "torch_threads": 4,
    "torch_version": "2.5.0",
    "torchvision_version": "0.20.0",
    "cuda_version": None,
    "cudnn_version": None,
    "cpu_model": "x",
    "cpu_logical_cores": 8,
    "gpu": None,
}


def ident(**environment) -> dict:
    return checkpoint.identity(
        host_fingerprint="h", settings={"a": 1}, manifest_sha256="m", environment={**ENVIRONMENT, **environment}
    )


@pytest.mark.parametrize(
    "change",
    [{"torch_threads": 2}, {"torch_version": "2.6.0"}, {"gpu": {"name": "H200", "index": 1}}],
    ids=["threads", "torch version", "gpu"],
)
def test_a_checkpoint_made_under_other_timing_conditions_is_not_resumed(tmp_path, caplog, change):
    import json

    import torch
    from safetensors.torch import save_file

    path = tmp_path / ".r.ckpt.safetensors"
    meta = {"version": checkpoint.VERSION, "identity": ident(), "epochs": [], "segments": []}
    save_file({"x": torch.zeros(1)}, str(path), metadata={"gpuscale": json.dumps(meta)})
    assert checkpoint.usable(path, ident()) is not None
    caplog.set_level("WARNING")
    assert checkpoint.usable(path, ident(**change)) is None
    assert any("another" in m and next(iter(change)).split("_")[0] in m for m in caplog.messages)
