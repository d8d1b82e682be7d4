import copy
import subprocess
import sys

import pytest
import yaml
from conftest import REPO, write_yaml

from gpuscale.contract import params
from gpuscale.contract.params import ParamsError


def test_default_params_are_the_papers_protocol(base_params):
    params.validate(base_params)
    assert base_params["study"]["models"] == ["simplecnn", "resnet18", "resnet50"]
    assert base_params["study"]["devices"] == ["cpu", "cuda"]
    train = base_params["train"]
    assert (train["epochs"], train["batch_size"]) == (10, 128)
    assert train["optimizer"] == {"name": "adam", "lr": 0.001, "weight_decay": 0.0}
    assert train["scheduler"] == {"name": "steplr", "step_size": 5, "gamma": 0.1}
    assert train["augment"] == {"random_crop_padding": 4, "horizontal_flip": True}


def test_quick_preset_overlays_to_a_cpu_subset():
    config = params.load([REPO / "params.yaml", REPO / "config/quick.yaml"])
    assert config["study"]["devices"] == ["cpu"]
    assert config["train"]["epochs"] <= 2
    assert config["data"]["train_size"] and config["data"]["train_size"] < 50_000
    assert config["train"]["batch_size"] == 128  # untouched keys come from params.yaml


def test_per_model_override_replaces_only_that_models_key(base_params):
    config = copy.deepcopy(base_params)
    config["models"]["resnet50"] = {"batch_size": 64}
    assert params.train_settings(config, "resnet50")["batch_size"] == 64
    assert params.train_settings(config, "resnet18")["batch_size"] == 128
    assert params.run_settings(config, "resnet18", "cpu", "paper", 0) == params.run_settings(
        base_params, "resnet18", "cpu", "paper", 0
    )


def _set(config, dotted, value):
    *parents, last = dotted.split(".")
    node = config
    for part in parents:
        node = node[part]
    if value is DELETE:
        del node[last]
    else:
        node[last] = value


DELETE = object()
BAD = [
    # (key path, value, text the one-line error must contain)
    ("study.models", ["resnet19"], "study.models.0: unknown model 'resnet19'"),
    ("study.devices", ["gpu"], "study.devices.0"),
    ("study.devices", ["cuda:1"], "cuda-N"),
    ("train.epochs", -1, "train.epochs: -1 is out of range"),
    ("train.epochs", 2.5, "train.epochs: 2.5 has the wrong type"),
    ("train.epochs", "ten", "train.epochs"),
    ("train.epochz", 10, "train.epochz: unknown key"),
    ("train.optimizer.name", "adamw", "train.optimizer.name: 'adamw' is not allowed (allowed: adam, sgd)"),
    ("train.optimizer.lr", 0, "train.optimizer.lr"),
    ("train.batch_size", DELETE, "train.batch_size: missing required key"),
    ("data.source", "imagenet", "data.source: 'imagenet' is not allowed"),
    ("data.train_size", 5, "data.train_size: 5 is out of range"),
    ("study.on_missing_device", "skip", "study.on_missing_device"),
    ("models.resnet99", {}, "models.resnet99: unknown model"),
    ("models.resnet18", {"batch_sise": 64}, "models.resnet18.batch_sise: unknown key"),
    ("study.seeds", [0, 0], "study.seeds: entries must be unique"),
    ("study.models", "resnet18", "study.models: 'resnet18' has the wrong type (allowed: array)"),
    ("study.devices", [], "study.devices"),
    ("train.batch_size", 0, "train.batch_size: 0 is out of range (allowed: >= 1)"),
    ("data.md5", "xyz", "data.md5: 'xyz' is malformed"),
    ("train.normalize.std", [0.2, 0.2, 0], "train.normalize.std.2: 0 is out of range (allowed: > 0)"),
    ("report.accuracy_tolerance", 2, "report.accuracy_tolerance: 2 is out of range (allowed: <= 1)"),
    ("variants.paper.precision", "fp8", "variants.paper.precision: 'fp8' is not allowed"),
    ("sweeps.cpu_threads", [0], "sweeps.cpu_threads.0: 0 is out of range"),
    ("data.image_mode", "lenient", "data.image_mode: 'lenient' is not allowed (allowed: strict, convert)"),
    ("train", DELETE, "train: missing required key"),
    ("models.resnet18", "fast", "models.resnet18"),
    ("report.reference", ["/etc"], "report.reference.0: '/etc' is malformed"),
    ("study.devices", ["cuda-ddp1"], "study.devices.0: 'cuda-ddp1' is malformed"),
    (
        "train.distributed_batch",
        "split",
        "train.distributed_batch: 'split' is not allowed (allowed: per_process, global)",
    ),
    ("runtime.resume", "yes", "runtime.resume: 'yes' has the wrong type"),
    ("runtime", DELETE, "runtime: missing required key"),
]


def test_sweep_runs_take_their_own_train_keys_after_the_models_overrides(base_params):
    config = copy.deepcopy(base_params)
    config["models"]["resnet50"] = {"epochs": 5, "batch_size": 64}
    config["sweeps"]["train"] = {"epochs": 2, "max_steps_per_epoch": 100}
    params.validate(config)
    sweep = params.sweep_settings(config, "resnet50", "cpu", "threads", 4, "paper", 0)["train"]
    assert (sweep["epochs"], sweep["batch_size"], sweep["max_steps_per_epoch"], sweep["cpu_threads"]) == (2, 64, 100, 4)
    study = params.run_settings(config, "resnet50", "cpu", "paper", 0)["train"]
    assert (study["epochs"], study["max_steps_per_epoch"]) == (5, None)


def test_data_parallel_device_specs_are_accepted(base_params):
    config = copy.deepcopy(base_params)
    config["study"]["devices"] = ["cpu", "cuda", "cpu-ddp2", "cuda-ddp8"]
    params.validate(config)
    assert [params.data_parallel_size(d) for d in config["study"]["devices"]] == [1, 1, 2, 8]


BAD_IDS = [key + "=" + ("<deleted>" if value is DELETE else repr(value)) for key, value, _ in BAD]


@pytest.mark.parametrize("key, value, expected", BAD, ids=BAD_IDS)
def test_bad_params_rejected_in_one_line_naming_the_key(base_params, key, value, expected):
    config = copy.deepcopy(base_params)
    _set(config, key, value)
    with pytest.raises(ParamsError) as err:
        params.validate(config)
    message = str(err.value)
    assert expected in message
    assert "\n" not in message


def test_yaml_syntax_error_names_the_line(tmp_path):
    bad = tmp_path / "p.yaml"
    bad.write_text("study:\n  models: [simplecnn\n")
    with pytest.raises(ParamsError, match=r"line \d+.*YAML syntax"):
        params.load([bad])


def test_cli_refuses_bad_params_with_one_line_and_exit_2(tmp_path, base_params):
    config = copy.deepcopy(base_params)
    config["train"]["epochs"] = 0
    path = write_yaml(tmp_path / "bad.yaml", config)
    done = subprocess.run(
        [sys.executable, "-m", "gpuscale", "validate", "--params", str(path)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 2
    assert done.stderr.strip().count("\n") == 0
    assert "train.epochs: 0 is out of range (allowed: >= 1)" in done.stderr
    assert "Traceback" not in done.stderr


def test_schema_shipped_with_workflow_is_the_package_schema():
    workflow_schema = yaml.safe_load((REPO / "workflow/schemas/params.schema.yaml").read_text())
    assert workflow_schema == params.schema()


def test_run_keys_cover_the_study_matrix(base_params):
    keys = params.run_keys(base_params)
    assert len(keys) == 3 * 2 * 1 * 1
    assert {"model": "resnet50", "device": "cuda", "variant": "paper", "seed": 0} in keys


def test_sweeps_expand_to_their_own_runs_and_override_one_setting(base_params):
    config = copy.deepcopy(base_params)
    config["sweeps"].update(models=["resnet18"], cpu_threads=[1, 2, 4], gpu_batch_sizes=[256])
    keys = params.sweep_keys(config)
    assert [(k["device"], k["parameter"], k["value"]) for k in keys] == [
        ("cpu", "threads", 1),
        ("cpu", "threads", 2),
        ("cpu", "threads", 4),
        ("cuda", "batch", 256),
    ]
    settings = params.sweep_settings(config, "resnet18", "cuda", "batch", 256, "paper", 0)
    assert settings["train"]["batch_size"] == 256 and settings["sweep"] == {"parameter": "batch", "value": 256}
    assert params.sweep_record_path(**keys[0]) == "results/runs/resnet18/cpu/threads1-paper-seed0.json"
    with pytest.raises(ParamsError, match="--sweep"):
        params.sweep_settings(config, "resnet18", "cpu", "memory", 1, "paper", 0)
