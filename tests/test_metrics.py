"""results/metrics.json: this host's figures under short stable keys (gpuscale.analyze.metrics)."""

from __future__ import annotations

import json
import subprocess
import sys

import records

from gpuscale.analyze import aggregate, metrics


def row(model, gpu="cuda", variant="paper", **values):
    base = {
        "variant": variant,
        "model": model,
        "gpu_device": gpu,
        "steady_speedup": 3.14159,
        "cpu_epoch_seconds": 21.5912,
        "gpu_epoch_seconds": 6.95123,
        "cpu_accuracy": 0.74621,
        "gpu_accuracy": 0.75312,
        "cpu_extrapolated": False,
        "gpu_extrapolated": False,
    }
    return {**base, **values}


def test_keys_are_short_and_grouped_speedups_first():
    out = metrics.build([row("simplecnn"), row("resnet18", cpu_extrapolated=True)])
    assert list(out) == ["x", "s", "acc"]
    assert out["x"] == {"paper": {"simplecnn": 3.14, "resnet18": 3.14}}
    assert out["s"]["paper"]["simplecnn"] == {"cuda": 6.951, "cpu": 21.591}
    assert out["acc"]["paper"]["simplecnn"] == {"cuda": 0.7531, "cpu": 0.7462}
    assert out["acc"]["paper"]["resnet18"] == {"cuda": 0.7531}  # a sampled CPU run has no comparable accuracy


def test_missing_figures_have_no_key_and_other_gpus_are_named():
    cpu_only = row("simplecnn", gpu=None, steady_speedup=None, gpu_epoch_seconds=None, gpu_accuracy=None)
    one_epoch = row("resnet18", gpu="cuda-1", steady_speedup=float("nan"))
    out = metrics.build([cpu_only, one_epoch])
    assert out["x"] == {}
    assert out["s"]["paper"] == {"simplecnn": {"cpu": 21.591}, "resnet18": {"cuda-1": 6.951, "cpu": 21.591}}
    out = metrics.build([row("resnet18", gpu="cuda-1")])
    assert out["x"] == {"paper": {"resnet18@cuda-1": 3.14}}


def test_aggregate_writes_this_hosts_figures_and_no_reference_constants(tmp_path):
    local = records.study(tmp_path / "runs", records.SPEEDUPS, records.CPU_EPOCH)
    ref = tmp_path / "reference" / "bigbox"
    records.write(ref / "runs", records.make("resnet18", "cuda", [2.0, 2.0], host="bigbox"))
    records.write(ref / "runs", records.make("resnet18", "cpu", [20.0, 20.0], host="bigbox"))
    aggregate.run(local, [str(ref)], tmp_path / "tables", tmp_path / "metrics.json", 0.02)
    out = json.loads((tmp_path / "metrics.json").read_text())
    assert out["x"]["paper"] == {"simplecnn": 2.0, "resnet18": 7.5, "resnet50": 40.0}
    assert out["s"]["paper"]["resnet50"]["cpu"] == 500.0
    assert "bigbox" not in json.dumps(out) and "reference" not in json.dumps(out)


def test_metrics_module_imports_neither_torch_nor_polars():
    code = "import sys, gpuscale.analyze.metrics; sys.exit(sorted({'torch', 'polars'} & set(sys.modules)) or 0)"
    subprocess.run([sys.executable, "-c", code], check=True)
