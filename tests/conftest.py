"""Shared fixtures. Tests build their own tiny data and never touch the network."""

from __future__ import annotations

import io
import os
import shutil
import signal
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

import numpy as np
import pytest
import yaml

REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
# The host-wide timing lock of this test session's own (tests must not wait for, nor block, real timing jobs).
os.environ["GPUSCALE_LOCK_DIR"] = tempfile.mkdtemp(prefix="gpuscale-test-lock-")
# A suite started in the background by a shell without job control (`pytest ... &`) inherits SIGINT ignored, and so
# does every command it starts: gpuscale then keeps it ignored, as a background job should, and the Ctrl-C tests
# (tests/test_interrupts*.py) saw the command finish. They test a terminal's Ctrl-C: the children get it as one does.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


def tool_env() -> dict:
    """The environment for the real tools: this venv's bin first, no stray DVC/Snakemake settings."""
    env = dict(os.environ)
    env["PATH"] = f"{BIN}{os.pathsep}{env.get('PATH', '')}"
    env.setdefault("DVC_NO_ANALYTICS", "1")
    env["PYTHONUNBUFFERED"] = "1"
    return env


def run(argv, cwd, check=True, **kwargs) -> subprocess.CompletedProcess:
    done = subprocess.run(argv, cwd=cwd, env=tool_env(), text=True, capture_output=True, check=False, **kwargs)
    if check and done.returncode != 0:
        raise AssertionError(f"{argv} failed ({done.returncode}):\n{done.stdout[-4000:]}\n{done.stderr[-4000:]}")
    return done


def project_files() -> list[str]:
    out = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard"],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return [line for line in out.splitlines() if line and ((REPO / line).exists() or (REPO / line).is_symlink())]


def copy_project(dest: Path, git: bool = False) -> Path:
    """A copy of the project as a clone would have it (tracked and unignored files), optionally a git repo."""
    for name in project_files():
        src, dst = REPO / name, dest / name
        dst.parent.mkdir(parents=True, exist_ok=True)
        if src.is_symlink():
            os.symlink(os.readlink(src), dst)
        else:
            shutil.copy2(src, dst)
    if git:
        for argv in (
            ["git", "init", "-q", "-b", "main"],
            ["git", "add", "-A"],
            ["git", "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "copy"],
        ):
            subprocess.run(argv, cwd=dest, check=True, capture_output=True)
    use_params(dest)
    return dest


def use_params(repo: Path) -> None:
    """What `gpuscale use` writes once in a fresh clone (git-ignored .gpuscale/: the merged params and what dvc.yaml's
    templates read): DVC cannot parse dvc.yaml without it. Again after an edit to params.yaml's study or sweeps lists,
    where a test then runs DVC (Snakemake brings it up to date itself)."""
    from gpuscale.commands import use

    use.refresh(repo)


def write_yaml(path: Path, value: dict) -> Path:
    path.write_text(yaml.safe_dump(value, sort_keys=False))
    return path


def data_settings(**overrides) -> dict:
    """A whole `data:` section (every key the schema requires): synthetic and offline unless overridden."""
    base = {
        "source": "synthetic",
        "path": None,
        "url": "http://example.invalid/cifar-10-binary.tar.gz",
        "md5": "0" * 32,
        "train_size": None,
        "test_size": None,
        "subset_seed": 0,
        "download_timeout_seconds": 5,
        "download_retries": 0,
        "image_mode": "strict",
    }
    return {**base, **overrides}


def gpuscale_argv(command: str, overlay: Path, *args) -> list[str]:
    """`python -m gpuscale COMMAND --params params.yaml --params OVERLAY ARGS...`: a stage in its own process."""
    params = ["--params", str(REPO / "params.yaml"), "--params", str(overlay)]
    return [sys.executable, "-m", "gpuscale", command, *params, *map(str, args)]


def prepare_data(overlay: Path, out: Path) -> Path:
    """`gpuscale data` in its own process: the data section of params.yaml + overlay, prepared into out."""
    subprocess.run(gpuscale_argv("data", overlay, "--out", out), check=True, env=tool_env(), capture_output=True)
    return out


TINY = {
    "study": {"models": ["simplecnn"], "devices": ["cpu"], "label": "test run"},
    "data": {"source": "synthetic", "train_size": 200, "test_size": 50},
    "train": {
        "epochs": 2,
        "batch_size": 32,
        "eval_batch_size": 64,
        "log_every_steps": 2,
        "loader": {"num_workers": 0, "pin_memory": False, "persistent_workers": False},
    },
    "predict": {"probe_seconds": 2},
}


@pytest.fixture(scope="module")
def prepared(tmp_path_factory) -> Path:
    """A prepared synthetic dataset: 200 train / 60 test images (7 steps of 32 per epoch)."""
    from gpuscale.inputs import data

    out = tmp_path_factory.mktemp("prepared")
    data.prepare(data_settings(train_size=200, test_size=60), out)
    return out


@pytest.fixture
def tiny_overlay(tmp_path) -> Path:
    return write_yaml(tmp_path / "tiny.yaml", TINY)


@pytest.fixture
def base_params() -> dict:
    return yaml.safe_load((REPO / "params.yaml").read_text())


def cifar_archive(path: Path, per_batch: int = 20, seed: int = 0) -> tuple[Path, np.ndarray, np.ndarray]:
    """A CIFAR-10 binary archive in the official layout with `per_batch` records per batch file.

    Returns the path and the train images/labels it holds, so tests can check the parse.
    """
    rng = np.random.default_rng(seed)
    all_images, all_labels = [], []
    with tarfile.open(path, "w:gz") as tar:
        for name in [f"data_batch_{i}.bin" for i in range(1, 6)] + ["test_batch.bin"]:
            labels = (np.arange(per_batch) % 10).astype(np.uint8)
            planes = rng.integers(0, 256, size=(per_batch, 3, 32, 32), dtype=np.uint8)
            raw = np.concatenate([labels[:, None], planes.reshape(per_batch, -1)], axis=1).tobytes()
            info = tarfile.TarInfo(f"cifar-10-batches-bin/{name}")
            info.size = len(raw)
            tar.addfile(info, io.BytesIO(raw))
            if name != "test_batch.bin":
                all_images.append(planes.transpose(0, 2, 3, 1))
                all_labels.append(labels.astype(np.int64))
    return path, np.concatenate(all_images), np.concatenate(all_labels)


# What config/quick.yaml's settings cannot keep on data a test builds: the subset is smaller than the preset's
# 5,000/1,000 images (the archive holds 200/40), the batch smaller so an epoch still has several steps, and the
# phase profile shorter (its 50 instrumented steps would cost more than the training).
QUICK_ON_TINY_DATA = {
    "data": {"source": "cifar10", "train_size": 100, "test_size": 40},
    "train": {"batch_size": 25, "eval_batch_size": 40, "phase_profile_steps": 4},
}


@pytest.fixture(scope="session")
def quick_preset(tmp_path_factory) -> Path:
    """The quick preset's pipeline run for real, once per session, on a tiny CIFAR-10-format archive: gpuscale data,
    train (every model of the study, the preset's CPU only, 1 epoch), aggregate (beside the shipped reference study),
    charts, report, with config/quick.yaml over params.yaml. The folder holds tables/, charts/ and index.html (and
    the records under results/runs/, which the page links to)."""
    from gpuscale.contract import fsutil

    work = tmp_path_factory.mktemp("quick-preset")
    archive, _, _ = cifar_archive(work / "cifar-10-binary.tar.gz", per_batch=40)
    quick = yaml.safe_load((REPO / "config/quick.yaml").read_text())
    base = yaml.safe_load((REPO / "params.yaml").read_text())
    overlay = {
        **QUICK_ON_TINY_DATA,
        "data": {**QUICK_ON_TINY_DATA["data"], "path": str(archive), "md5": fsutil.md5_file(archive)},
    }
    # report.reference's folders, relative as params want them, and copied: a reference folder lies inside the project
    shutil.copytree(REPO / "reference", work / "reference", symlinks=True)
    files = [REPO / "params.yaml", REPO / "config/quick.yaml", write_yaml(work / "tiny-data.yaml", overlay)]
    args = [arg for path in files for arg in ("--params", str(path))]
    gpuscale = [str(BIN / "gpuscale")]
    run([*gpuscale, "data", *args], work)
    for model in base["study"]["models"]:
        for device in quick["study"]["devices"]:
            run([*gpuscale, "train", *args, "--model", model, "--device", device, "--threads", "2"], work)
    run([*gpuscale, "aggregate", *args, "--out", "tables", "--metrics", "metrics.json"], work)
    run([*gpuscale, "charts", *args, "--tables", "tables", "--out", "charts"], work)
    run([*gpuscale, "report", *args, "--tables", "tables", "--charts", "charts", "--out", "index.html"], work)
    return work


# `make check`'s tier leaves these out with the e2e and heavy tests: each of their tests starts the real commands in
# processes of their own and waits for them to work (signals mid-run, resumed runs, DVC experiments, spec models
# through DVC), tens of seconds each on 2 cores. `make test` runs everything.
SLOW_MODULES = {
    "test_interrupts",
    "test_interrupts_commands",
    "test_faults",
    "test_experiments",
    "test_slurm",
    "test_workflow",
    "test_faults_snakemake",
    "test_faults_runlock",
    "test_distributed",
    "test_install",
    "test_variants",
}


def pytest_collection_modifyitems(config, items):
    """Under pytest-xdist (`make test` runs two workers, `--dist loadgroup`), the tests that share a module- or
    session-scoped fixture run in one worker, so the fixture is built once, not once per worker (the quick preset's
    whole pipeline is such a fixture). Tests of SLOW_MODULES are marked `slow`."""
    for item in items:
        if item.module.__name__.rsplit(".", 1)[-1] in SLOW_MODULES:
            item.add_marker(pytest.mark.slow)
        shared = [
            (name, defs[-1].baseid)
            for name, defs in item._fixtureinfo.name2fixturedefs.items()
            if defs and defs[-1].scope in ("module", "session") and name not in ("tmp_path_factory", "worker_id")
        ]
        if shared:
            name, baseid = min(shared, key=lambda pair: pair[0] != "quick_preset")
            item.add_marker(pytest.mark.xdist_group(f"{baseid or 'session'}::{name}"))
