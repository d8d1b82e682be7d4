"""Environment capture: the CPU build and threading, CPU flags, memory, NVML facts, a GPU torch cannot use."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import types

import pytest

from gpuscale.measure import envinfo

SHOW = """PyTorch built with:
  - GCC 13.3
  - Intel(R) oneAPI Math Kernel Library Version 2024.2-Product Build 20240605 for Intel(R) 64 architecture applications
  - Intel(R) MKL-DNN v3.12.0 (Git Hash 80afa71049cd69a3df32adcccb623b12cd7baa22)
  - OpenMP 201511 (a.k.a. OpenMP 4.5)
  - CPU capability usage: AVX512
  - Build settings: BLAS_INFO=mkl, BUILD_TYPE=Release, CUDA_VERSION=13.0, LAPACK_INFO=mkl, USE_OPENMP=ON,
"""
PARALLEL = """ATen/Parallel:
\tat::get_num_threads() : 16
OpenMP 201511 (a.k.a. OpenMP 4.5)
\tomp_get_max_threads() : 16
Intel(R) oneAPI Math Kernel Library Version 2024.2-Product Build 20240605 for Intel(R) 64 architecture applications
\tmkl_get_max_threads() : 8
ATen parallel backend: OpenMP
"""


def fake_torch(show=SHOW, parallel=PARALLEL, capability="AVX512"):
    backends = types.SimpleNamespace(
        cpu=types.SimpleNamespace(get_cpu_capability=lambda: capability),
        mkldnn=types.SimpleNamespace(is_available=lambda: True),
        openmp=types.SimpleNamespace(is_available=lambda: True),
    )
    config = types.SimpleNamespace(show=lambda: show, parallel_info=lambda: parallel)
    return types.SimpleNamespace(__config__=config, backends=backends)


def test_torch_build_names_blas_onednn_openmp_and_threads(monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", "16")
    build = envinfo.torch_build(fake_torch())
    assert build["blas"] == "mkl" and build["lapack"] == "mkl"
    assert build["mkl"] == "Intel(R) oneAPI Math Kernel Library Version 2024.2-Product Build 20240605"
    assert build["onednn"] == "v3.12.0"
    assert build["openmp"] == "OpenMP 201511 (a.k.a. OpenMP 4.5)"
    assert build["cpu_capability"] == "AVX512" and build["parallel_backend"] == "OpenMP"
    assert (build["omp_max_threads"], build["mkl_max_threads"]) == (16, 8)
    assert build["thread_environment"]["OMP_NUM_THREADS"] == "16"
    assert build["config"] == SHOW and build["parallel_info"] == PARALLEL


def test_torch_build_of_another_blas_leaves_the_unknown_fields_empty():
    show = "PyTorch built with:\n  - Build settings: BLAS_INFO=open, LAPACK_INFO=open, USE_OPENMP=OFF,\n"
    build = envinfo.torch_build(fake_torch(show=show, parallel="ATen parallel backend: native thread pool\n"))
    assert build["blas"] == "open" and build["mkl"] is None and build["onednn"] is None
    assert build["parallel_backend"] == "native thread pool" and build["omp_max_threads"] is None


def test_capture_records_build_flags_and_memory():
    torch = pytest.importorskip("torch")
    from gpuscale.measure import devices

    env = devices.environment(torch.device("cpu"))
    assert env["gpu"] is None  # the CPU kind has no accelerator facts
    assert env["torch_build"]["blas"] and env["torch_build"]["parallel_backend"]
    assert env["torch_build"]["cpu_capability"] == torch.backends.cpu.get_cpu_capability()
    assert isinstance(env["cpu_flags"], list) and set(env["cpu_flags"]) <= set(envinfo.SIMD_FLAGS)
    assert env["memory_bytes"] > 0
    assert env["boot_id"] == envinfo.boot_id()


def test_the_boot_id_is_this_boot_s_or_none(tmp_path, monkeypatch):
    monkeypatch.setattr(envinfo, "BOOT_ID", tmp_path / "boot_id")
    assert envinfo.boot_id() is None  # not Linux, or no such file
    (tmp_path / "boot_id").write_text("dfacb20b-8cd1-41c5-86ae-ea7a15249d1d\n")
    assert envinfo.boot_id() == "dfacb20b-8cd1-41c5-86ae-ea7a15249d1d"


def test_memory_falls_back_without_psutil(monkeypatch):
    monkeypatch.setitem(sys.modules, "psutil", None)
    assert envinfo.memory_bytes() is None or envinfo.memory_bytes() > 0


def driver(cuda="12.2", version="535.104.05"):
    return {"driver_version": version, "cuda_driver_version": cuda, "gpus": ["NVIDIA H200"], "source": "nvml"}


def test_driver_too_old_for_the_build_names_driver_build_and_fix(monkeypatch):
    monkeypatch.setattr(envinfo, "nvidia_driver", lambda: driver())
    monkeypatch.setattr(envinfo, "torch_cuda_build", lambda: ("2.14.1+cu130", "13.0"))
    message = envinfo.cuda_mismatch()
    assert "\n" not in message
    assert "NVIDIA H200 (NVIDIA driver 535.104.05)" in message and "CUDA up to 12.2" in message
    assert "built for CUDA 13.0" in message and "driver >= 580.65.06" in message
    assert "update the NVIDIA driver" in message and "make install TORCH=cu12" in message


def test_cpu_build_on_a_gpu_host_is_named(monkeypatch):
    monkeypatch.setattr(envinfo, "nvidia_driver", lambda: driver(cuda="13.0", version="580.82.07"))
    monkeypatch.setattr(envinfo, "torch_cuda_build", lambda: ("2.14.1+cpu", None))
    assert "torch 2.14.1+cpu is a CPU-only build" in envinfo.cuda_mismatch()


@pytest.mark.parametrize(
    ("host", "build"),
    [(None, ("2.14.1", "13.0")), (driver(cuda="13.1"), ("2.14.1", "13.0")), (driver(cuda="12.8"), ("2.14.1", "12.6"))],
)
def test_no_message_when_driver_and_build_fit_or_no_gpu(monkeypatch, host, build):
    monkeypatch.setattr(envinfo, "nvidia_driver", lambda: host)
    monkeypatch.setattr(envinfo, "torch_cuda_build", lambda: build)
    assert envinfo.cuda_mismatch() is None


def test_train_reports_the_mismatch_instead_of_no_gpu(monkeypatch):
    torch = pytest.importorskip("torch")
    from gpuscale.measure import train

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(envinfo, "cuda_mismatch", lambda: "this host's NVIDIA H200 runs CUDA up to 12.2, ...")
    assert train.device_unavailable_reason(torch.device("cuda")).startswith("this host's NVIDIA H200")


def test_driver_facts_fall_back_to_nvidia_smi_without_nvml(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", None)
    answers = {
        "--query-gpu=name,driver_version": "NVIDIA H200, 570.86.15\nNVIDIA H200, 570.86.15",
        "": "| NVIDIA-SMI 570.86.15   Driver Version: 570.86.15   CUDA Version: 12.8     |",
    }
    monkeypatch.setattr(envinfo, "_run", lambda argv, timeout=10.0: answers["".join(argv[1:2])])
    envinfo.nvidia_driver.cache_clear()
    try:
        found = envinfo.nvidia_driver()
    finally:
        envinfo.nvidia_driver.cache_clear()
    assert found == {
        "driver_version": "570.86.15",
        "cuda_driver_version": "12.8",
        "gpus": ["NVIDIA H200", "NVIDIA H200"],
        "source": "nvidia-smi",
    }


def test_torch_cuda_build_is_read_without_importing_torch():
    script = textwrap.dedent(
        """
        import sys
        from gpuscale.measure import envinfo
        version, cuda = envinfo.torch_cuda_build()
        envinfo.cuda_mismatch(), envinfo.host_fingerprint()
        assert "torch" not in sys.modules, "torch was imported"
        import torch
        assert (version, cuda) == (torch.__version__, torch.version.cuda), (version, cuda)
        """
    )
    subprocess.run([sys.executable, "-c", script], check=True)


def test_envinfo_works_with_the_core_alone():
    """No NVML (the energy extra) and no psutil: the fallbacks answer."""
    script = "import sys; sys.modules['pynvml'] = sys.modules['psutil'] = None\n" + textwrap.dedent(
        """
        from gpuscale.measure import envinfo
        env = envinfo.capture()
        assert env["memory_bytes"] and env["torch_build"]["blas"], env
        """
    )
    subprocess.run([sys.executable, "-c", script], check=True)
