import os
import tempfile

import numpy as np
import pytest
import torch
from conftest import REPO

from gpuscale.contract import params, record
from gpuscale.inputs import data
from gpuscale.measure import loaders, train, variants


def settings_for(variant: str) -> dict:
    config = params.load([REPO / "params.yaml"])
    config["train"].update(
        epochs=2,
        batch_size=32,
        eval_batch_size=64,
        log_every_steps=100,
        phase_profile_steps=3,
        loader={"num_workers": 0, "pin_memory": False, "persistent_workers": False},
    )
    return params.run_settings(config, "simplecnn", "cpu", variant, 0)


def test_device_loader_without_augmentation_equals_the_host_pipeline(prepared):
    dataset, _, _ = data.load_prepared(prepared)
    settings = settings_for("paper")["train"]
    _, host_test = loaders.host_loaders(dataset, settings, torch.device("cpu"), 0)
    device_test = loaders.DeviceLoader(
        dataset.test_images,
        dataset.test_labels,
        settings,
        torch.device("cpu"),
        settings["eval_batch_size"],
        train=False,
        seed=0,
    )
    for (a, la), (b, lb) in zip(host_test, device_test, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)
        assert torch.equal(la, lb)


def test_device_augmentation_is_a_padded_crop_and_maybe_a_flip(prepared):
    dataset, _, _ = data.load_prepared(prepared)
    settings = settings_for("tuned")["train"]
    loader = loaders.DeviceLoader(
        dataset.train_images, dataset.train_labels, settings, torch.device("cpu"), 16, train=True, seed=3
    )
    x = loader.images[:16].float()
    out = loader._augment(x)
    padded = torch.nn.functional.pad(x, (4, 4, 4, 4))
    for i in range(16):
        windows = [padded[i, :, dy : dy + 32, dx : dx + 32] for dy in range(9) for dx in range(9)]
        assert any(torch.equal(out[i], w) or torch.equal(out[i], w.flip(2)) for w in windows)
    assert sum(len(b[1]) for b in loader) == 200 and len(loader) == 13  # ceil(200 / 16)


def test_variants_give_distinct_labelled_records(prepared, tmp_path):
    for variant in ("paper", "tuned"):
        train.run(settings_for(variant), prepared, tmp_path / f"{variant}.json", threads=1)
    paper, tuned = (record.load(tmp_path / f"{v}.json") for v in ("paper", "tuned"))
    assert paper["key"]["variant"] == "paper" and tuned["key"]["variant"] == "tuned"
    assert paper["variant"]["knobs"]["loader"] == "host" and tuned["variant"]["knobs"]["loader"] == "device"
    assert tuned["variant"]["effective"]["memory_format"] == "channels_last"
    # bf16 on this CPU either ran or the record says why not; never silently
    assert tuned["variant"]["effective"]["autocast"] == "bfloat16" or any(
        "bf16" in n for n in tuned["variant"]["notes"]
    )
    assert "fused_optimizer" in tuned["variant"]["effective"]
    # tuned asks for CUDA graphs (compile: reduce-overhead): on a CPU that cannot apply,
    # so it ran uncompiled, and says so
    assert (
        tuned["variant"]["knobs"]["compile"] == "reduce-overhead" and tuned["variant"]["effective"]["compile"] == "none"
    )
    assert any("CUDA graphs" in n for n in tuned["variant"]["notes"])
    assert tuned["phase_profile"]["steps"] == 3
    assert all(np.isfinite(e["train_loss"]) for e in tuned["epochs"])


def test_undefined_variant_is_a_params_error(base_params):
    base_params["study"]["variants"] = ["turbo"]
    with pytest.raises(params.ParamsError, match="study.variants.0: 'turbo' is not defined under variants"):
        params.validate(base_params)


def test_a_run_that_compiles_nothing_on_its_device_gets_no_compile_cache(tmp_path, monkeypatch):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    tuned = params.load([REPO / "params.yaml"])["variants"]["tuned"]  # reduce-overhead: CUDA graphs
    with variants.compile_cache(tuned, "cpu") as cache:
        assert cache is None and not list(tmp_path.iterdir())


def test_compiled_runs_get_a_cold_private_cache_unless_told_to_share_one(prepared, tmp_path, monkeypatch):
    """A real torch.compile on this CPU, twice: cold compiles into a private cache it removes; shared uses and counts
    Inductor's usual cache (here a test directory holding one file from an 'earlier run')."""
    shared = tmp_path / "shared-cache"
    shared.mkdir()
    (shared / "left-by-an-earlier-run").write_text("x")
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(shared))
    monkeypatch.delenv("TRITON_CACHE_DIR", raising=False)
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    config = params.load([REPO / "params.yaml"])
    config["train"].update(
        epochs=1,
        batch_size=100,
        eval_batch_size=60,
        log_every_steps=100,
        phase_profile_steps=0,
        loader={"num_workers": 0, "pin_memory": False, "persistent_workers": False},
    )

    def run(policy: str) -> dict:
        config["variants"]["compiled"] = {**config["variants"]["paper"], "compile": "default", "compile_cache": policy}
        out = tmp_path / f"{policy}.json"
        train.run(params.run_settings(config, "simplecnn", "cpu", "compiled", 0), prepared, out, threads=1)
        return record.load(out)["variant"]["effective"]

    cold = run("cold")
    assert (cold["compile"], cold["compile_cache"], cold["compile_cache_files_at_start"]) == ("default", "cold", 0)
    assert [p.name for p in shared.iterdir()] == ["left-by-an-earlier-run"]  # compiled elsewhere ...
    assert not list(scratch.glob("gpuscale-compile-cache-*"))  # ... in a private cache, now gone
    assert os.environ["TORCHINDUCTOR_CACHE_DIR"] == str(shared) and "TRITON_CACHE_DIR" not in os.environ

    warm = run("shared")
    assert (warm["compile_cache"], warm["compile_cache_files_at_start"]) == ("shared", 1)
    assert sum(len(files) for _, _, files in os.walk(shared)) > 1  # this run compiled into the shared cache
