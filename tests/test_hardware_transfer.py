"""The transfer's arithmetic on hand-made numbers: a target identical to the source predicts the source, and each
term scales with its own datasheet figure and no other."""

from __future__ import annotations

import math

import pytest

from gpuscale.hardware import transfer
from gpuscale.hardware.catalog import CPU, GPU, Device, HardwareError, MissingFigure
from gpuscale.hardware.transfer import Machine, Measured, ModelCost, ProbeRates

CARD = {
    "fp32_tflops": 50.0,
    "tf32_tflops": 400.0,
    "bf16_tflops": 800.0,
    "memory_bandwidth_gb_s": 3000.0,
    "host_link_gb_s": 64.0,
}
CHIP = {
    "performance_cores": 8,
    "efficiency_cores": 0,
    "performance_boost_ghz": 4.0,
    "fp32_flops_per_cycle_performance": 32,
    "memory_bandwidth_gb_s": 100.0,
}


def gpu(**figures) -> Device:
    return Device("card", GPU, {**CARD, **figures}, source="hand-made")


def cpu(name="chip", **figures) -> Device:
    return Device(name, CPU, {**CHIP, **figures}, source="hand-made")


COST = ModelCost("net", {"conv": 1e9, "linear": 1e8, "other": 1e7}, ops_per_step=100)
# the probe's rates: conv far from the card's peak (latency-bound), as on the reference H200
PROBE = ProbeRates({"conv": 40e12, "linear": 20e12, "other": 20e9}, fixed_step_seconds=1e-3, op_seconds=20e-6)


def run(device=GPU, wait=0.1, copy=0.01, epoch=10.0, workers=2, rate=None):
    return Measured(
        model="net",
        device=device,
        epoch_seconds=epoch,
        steps=100,
        batch_size=128,
        wait_fraction=wait,
        copy_fraction=copy if device == GPU else 0.0,
        loader_workers=workers,
        workers_images_per_second=rate,
        precision={"conv": "tf32", "matmul": "fp32"} if device == GPU else {},
    )


def predict(measured, source, target, cost=COST, probe=PROBE):
    return transfer.transfer_epoch(measured, cost, probe, source, target)


@pytest.mark.parametrize("device", [GPU, CPU])
@pytest.mark.parametrize("wait", [0.05, 0.5])
def test_a_target_identical_to_the_source_predicts_the_source(device, wait):
    m = Machine(gpu(), cpu()) if device == GPU else Machine(cpu(), cpu())
    out = predict(run(device, wait=wait, rate=20_000), m, m)
    assert out["predicted_epoch_seconds"] == pytest.approx(10.0, rel=1e-9)


def test_a_cpu_compute_term_scales_with_cores_clock_and_simd_width():
    src = Machine(cpu(), cpu())
    base = predict(run(CPU, wait=0.0), src, src)["target_terms"]
    for figures, factor in (
        ({"performance_cores": 16}, 2),
        ({"performance_boost_ghz": 2.0}, 0.5),
        ({"fp32_flops_per_cycle_performance": 64}, 2),
    ):
        t = cpu(**figures)
        terms = predict(run(CPU, wait=0.0), src, Machine(t, t))["target_terms"]
        assert terms["compute_conv"] == pytest.approx(base["compute_conv"] / factor)
        assert terms["compute_matmul"] == pytest.approx(base["compute_matmul"] / factor)
        assert terms["memory"] == pytest.approx(base["memory"])  # bandwidth unchanged
    t = cpu(memory_bandwidth_gb_s=50.0)
    terms = predict(run(CPU, wait=0.0), src, Machine(t, t))["target_terms"]
    assert terms["memory"] == pytest.approx(2 * base["memory"])
    assert terms["compute_conv"] == pytest.approx(base["compute_conv"])


def test_a_hybrid_cpu_is_paced_by_its_efficiency_cores():
    hybrid = cpu(efficiency_cores=8, efficiency_boost_ghz=2.0, fp32_flops_per_cycle_efficiency=16)
    # 16 threads, each at the slower core's 16 x 2 GHz: a quarter of the P-core rate each, so half of 8 P-cores' total
    assert transfer.cpu_peak_flops(hybrid, None, "test") == pytest.approx(16 * 32e9)
    assert transfer.cpu_peak_flops(hybrid, 8, "test") == pytest.approx(8 * 128e9)  # P-cores alone


def test_the_dispatch_and_loader_terms_scale_with_the_host_clock():
    src = Machine(gpu(), cpu())
    m = run(GPU, wait=0.5)  # loader-bound: the loader is the whole step
    slow_host = cpu(performance_boost_ghz=2.0)
    a = predict(m, src, src)
    b = predict(m, src, Machine(gpu(), slow_host))
    assert b["target_terms"]["dispatch"] == pytest.approx(2 * a["target_terms"]["dispatch"])
    assert b["target_terms"]["loader"] == pytest.approx(2 * a["target_terms"]["loader"])
    assert b["predicted_epoch_seconds"] == pytest.approx(20.0)  # still loader-bound: the epoch doubles
    more_workers = predict(m, src, Machine(gpu(), cpu(), loader_workers=4))
    assert more_workers["target_terms"]["loader"] == pytest.approx(a["target_terms"]["loader"] / 2)


def test_the_copy_scales_with_the_host_link():
    src = Machine(gpu(), cpu())
    a = predict(run(GPU, wait=0.0), src, src)
    b = predict(run(GPU, wait=0.0), src, Machine(gpu(host_link_gb_s=16.0), cpu()))
    assert b["target_terms"]["copy"] == pytest.approx(4 * a["target_terms"]["copy"])


def test_a_gpu_kernel_that_did_not_fill_the_source_fills_a_small_card():
    # conv ran at 40 of the source's 400 TF32 TFLOP/s: latency-bound. On a card of 40 TFLOP/s it runs at 60% of that
    # peak (24), on a card of 4000 at its source rate (40): neither scales with the peak ratio.
    src = Machine(gpu(), cpu())
    base = predict(run(GPU, wait=0.0), src, src)
    small = predict(run(GPU, wait=0.0), src, Machine(gpu(tf32_tflops=40.0), cpu()))
    big = predict(run(GPU, wait=0.0), src, Machine(gpu(tf32_tflops=4000.0), cpu()))
    assert small["target_terms"]["compute_conv"] == pytest.approx(base["target_terms"]["compute_conv"] * 40 / 24)
    assert big["target_terms"]["compute_conv"] == pytest.approx(base["target_terms"]["compute_conv"])
    # a kind that filled the source scales with the peak ratio
    filled = ProbeRates({"conv": 300e12, "linear": 20e12, "other": 20e9}, 1e-3, 20e-6)
    a = predict(run(GPU, wait=0.0), src, src, probe=filled)
    b = predict(run(GPU, wait=0.0), src, Machine(gpu(tf32_tflops=4000.0), cpu()), probe=filled)
    assert b["target_terms"]["compute_conv"] == pytest.approx(a["target_terms"]["compute_conv"] / 10)


def test_the_precision_decides_which_rate_is_read():
    src = Machine(gpu(), cpu())
    m = run(GPU, wait=0.0)
    # matmul ran in FP32: the TF32 rate does not move it; conv ran in TF32: the FP32 rate does not move it
    a = predict(m, src, Machine(gpu(fp32_tflops=25.0), cpu()))["target_terms"]
    base = predict(m, src, src)["target_terms"]
    assert a["compute_conv"] == pytest.approx(base["compute_conv"])
    assert a["compute_matmul"] > base["compute_matmul"]
    # a card with no TF32 path runs TF32-allowed convolutions in FP32
    no_tf32 = predict(m, src, Machine(gpu(tf32_tflops="unsupported", fp32_tflops=10.0), cpu()))["target_terms"]
    assert no_tf32["compute_conv"] > base["compute_conv"]


def test_no_figure_for_the_precision_asked_says_so_before_any_arithmetic():
    bf16 = Measured("net", GPU, 10.0, 100, 128, 0.0, 0.0, 2, precision={"conv": "bf16", "matmul": "bf16"})
    src = Machine(gpu(), cpu())
    with pytest.raises(MissingFigure, match="has no bf16_tflops: the hardware has no such path"):
        predict(bf16, src, Machine(gpu(bf16_tflops="unsupported"), cpu()))
    with pytest.raises(MissingFigure, match="no datasheet figure for performance_boost_ghz"):
        predict(run(), src, Machine(gpu(), cpu(performance_boost_ghz="unknown")))
    with pytest.raises(HardwareError, match="cannot transfer a gpu run"):
        predict(run(), src, Machine(cpu(), cpu()))


def test_the_band_comes_from_the_checks_errors():
    errors = [math.log(1.1), math.log(0.9), math.log(1.2)]
    f = transfer.band_factor(errors)
    rms = math.sqrt(sum(e * e for e in errors) / 3)
    assert f == pytest.approx(math.exp(transfer.Z * rms))
    assert transfer.band_factor([0.0, 0.0]) == pytest.approx(math.exp(transfer.Z * transfer.MIN_LOG_SD))
    assert transfer.band_factor([math.log(2.0)]) > f  # a worse check, a wider band
    with pytest.raises(HardwareError, match="no band"):
        transfer.band_factor([])
    assert transfer.inside(10.0, 12.0, 1.3) and not transfer.inside(10.0, 14.0, 1.3)


def test_precision_of_a_record():
    assert transfer.precision_of({"cudnn_tf32": True, "matmul_tf32": False}) == {"conv": "tf32", "matmul": "fp32"}
    assert transfer.precision_of({"autocast": "bf16"}) == {"conv": "bf16", "matmul": "bf16"}


def test_the_all_core_clock_sets_the_compute_rate_where_printed():
    # dispatch and loader stay on the single-core turbo; the many-thread compute takes the all-core clock
    assert transfer.cpu_peak_flops(cpu(all_core_ghz=2.0), None, "test") == pytest.approx(8 * 32 * 2e9)
    assert transfer.cpu_peak_flops(cpu(), None, "test") == pytest.approx(8 * 32 * 4e9)
