"""The installation: the lock agrees with pyproject.toml, the torch flavours, the version, the training core."""

from __future__ import annotations

import importlib.util
import json
import shutil
import subprocess
import sys
import textwrap
import tomllib

import pytest
from conftest import REPO, run

import gpuscale

spec = importlib.util.spec_from_file_location("lockfiles", REPO / "requirements" / "lock.py")
lockfiles = importlib.util.module_from_spec(spec)
spec.loader.exec_module(lockfiles)

# What the training stage must run without: the workflow and report extras.
NOT_CORE = ["snakemake", "dvc", "polars", "altair", "great_tables", "jinja2", "vl_convert", "pandas", "pynvml"]


def test_locks_agree_with_pyproject():
    assert lockfiles.problems("lock.txt") == []
    assert lockfiles.problems("core.txt") == []


def test_lock_check_fails_when_pyproject_changes(tmp_path):
    (tmp_path / "requirements").mkdir()
    for name in ("lock.py", "lock.txt", "core.txt"):
        shutil.copy(REPO / "requirements" / name, tmp_path / "requirements" / name)
    text = (REPO / "pyproject.toml").read_text()
    (tmp_path / "pyproject.toml").write_text(text)
    check = [sys.executable, str(tmp_path / "requirements" / "lock.py"), "check"]
    assert subprocess.run(check, capture_output=True, text=True, check=False).returncode == 0
    (tmp_path / "pyproject.toml").write_text(text.replace('"numpy>=2.0,<3"', '"numpy>=3"'))
    done = subprocess.run(check, capture_output=True, text=True, check=False)
    assert done.returncode == 1
    assert "run `make lock`" in done.stderr
    assert "numpy==" in done.stderr and "does not satisfy" in done.stderr


def test_every_dependency_is_pinned_with_hashes_and_bounded():
    meta = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    locked = lockfiles.pins(REPO / "requirements" / "lock.txt")
    assert locked["torch"] == "2.14.1" and locked["torchvision"] == "0.29.1"
    assert set(lockfiles.pins(REPO / "requirements" / "core.txt")) < set(locked)
    text = (REPO / "requirements" / "lock.txt").read_text()
    assert text.count("==") <= text.count("--hash=sha256:")
    # the fast movers have an upper bound, so a fresh unlocked install does not jump a major release
    for line in meta["dependencies"] + [r for extra in meta["optional-dependencies"].values() for r in extra]:
        if not line.startswith("gpuscale["):
            assert "<" in line or "==" in line, line


def test_core_leaves_out_the_workflow_and_report():
    core = lockfiles.pins(REPO / "requirements" / "core.txt")
    assert {"torch", "torchvision", "numpy", "pillow", "pyyaml", "safetensors", "psutil"} <= set(core)
    assert not {"snakemake", "dvc", "polars", "altair", "great-tables", "vl-convert-python", "pandas"} & set(core)


def test_without_torch_drops_the_cuda_stack_and_keeps_the_rest_hashed():
    text = lockfiles.without_torch(REPO / "requirements" / "lock.txt")
    kept = {lockfiles.normalize(m.group(1)) for m in map(lockfiles.PIN.match, text.splitlines()) if m}
    assert not {"torch", "torchvision", "triton"} & kept
    assert [name for name in kept if name.startswith(("nvidia-", "cuda-"))] == ["nvidia-ml-py"]
    # nvidia-ml-py is NVML's Python binding, not part of torch's CUDA stack: it stays
    assert {"numpy", "polars", "snakemake", "sympy", "filelock", "nvidia-ml-py"} <= kept
    assert all(line.startswith(("#", " ")) or "==" in line or not line for line in text.splitlines())


def test_advice_names_the_cpu_wheels_when_there_is_no_gpu(monkeypatch):
    monkeypatch.setattr(lockfiles, "has_nvidia_gpu", lambda: False)
    assert "make reproduce TORCH=cpu" in lockfiles.advise("default")
    monkeypatch.setattr(lockfiles, "has_nvidia_gpu", lambda: True)
    assert "TORCH=cpu" not in lockfiles.advise("default")
    assert "download.pytorch.org/whl/cpu" in lockfiles.advise("cpu")


def test_make_installs_the_chosen_torch_flavour():
    """`make -n` shows the commands: hash-checked lock by default, the PyTorch index for TORCH=cpu."""
    if shutil.which("make") is None:
        pytest.skip("make is not installed")
    default = run(["make", "-n", "-B", "install", "VENV=/nonexistent/venv"], cwd=REPO).stdout
    assert "--require-hashes -r requirements/lock.txt" in default and "download.pytorch.org" not in default
    cpu = run(["make", "-n", "-B", "install", "VENV=/nonexistent/venv", "TORCH=cpu"], cwd=REPO).stdout
    assert "torch==2.14.1+cpu torchvision==0.29.1+cpu --index-url https://download.pytorch.org/whl/cpu" in cpu
    assert "without-torch" in cpu and "--require-hashes" in cpu


def test_version_comes_from_one_place():
    done = run([sys.executable, "-m", "gpuscale", "--version"], cwd=REPO)
    assert done.stdout.strip() == f"gpuscale {gpuscale.__version__}"
    pyproject = tomllib.loads((REPO / "pyproject.toml").read_text())
    assert "version" in pyproject["project"]["dynamic"]
    assert pyproject["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "gpuscale.__version__"}
    assert (REPO / "LICENSE").read_text().startswith("MIT License")


def test_the_core_trains_without_the_workflow_and_report_extras(tmp_path):
    """`gpuscale data` and `gpuscale train` in a process where the extras' modules cannot be imported."""
    script = textwrap.dedent(
        f"""
        import sys
        BLOCKED = {NOT_CORE!r}

        for name in BLOCKED:  # None in sys.modules: `import name` fails as if it were not installed
            sys.modules[name] = None
        from gpuscale.cli import main

        cut = sys.argv.index("::")
        for argv in (sys.argv[1:cut], sys.argv[cut + 1 :]):
            if main(argv):
                sys.exit(f"gpuscale {{argv[0]}} failed")
        loaded = sorted(n for n, m in sys.modules.items() if m is not None and n.split(".")[0] in BLOCKED)
        sys.exit(f"imported: {{loaded}}" if loaded else 0)
        """
    )
    overlay = tmp_path / "tiny.yaml"
    overlay.write_text(
        "data: {source: synthetic, train_size: 64, test_size: 32}\n"
        "train: {epochs: 1, batch_size: 32, eval_batch_size: 32,"
        " loader: {num_workers: 0, pin_memory: false, persistent_workers: false}}\n"
    )
    params = ["--params", str(REPO / "params.yaml"), "--params", str(overlay)]
    prepared, out = tmp_path / "prepared", tmp_path / "run.json"
    data_argv = ["data", *params, "--out", str(prepared)]
    train_argv = ["train", *params, "--model", "simplecnn", "--device", "cpu", "--threads", "1"]
    train_argv += ["--data", str(prepared), "--out", str(out)]
    run([sys.executable, "-c", script, *data_argv, "::", *train_argv], cwd=tmp_path)
    assert json.loads(out.read_text())["status"] == "measured"
