"""The probe on the CPU with a tiny budget, and the predict preset end to end through Snakemake."""

from __future__ import annotations

import json
import statistics
import types

import pytest
from conftest import TINY, copy_project, run, write_yaml

from gpuscale.measure import probe
from gpuscale.predict import costmodel, prediction

SMALL_TRAIN = {
    "batch_size": 8,
    "loader": {"num_workers": 0, "pin_memory": False, "persistent_workers": False},
    "cpu_threads": 1,
}


def test_probe_on_cpu_writes_a_valid_record_the_cost_model_reads(tmp_path):
    from gpuscale.contract import params

    config = params.deep_merge(params.load(), {"train": SMALL_TRAIN})
    doc = probe.run("cpu", config["train"], budget_seconds=1.0, threads=1)
    path = tmp_path / "probe" / "cpu.json"
    probe.write(path, doc)
    doc = probe.load(path)
    assert doc["status"] == "measured" and doc["threads"] == 1 and doc["batch_size"] == 8
    assert set(doc["kinds"]) == {"conv", "depthwise_conv", "grouped_conv", "linear", "attention", "other"}
    assert all(k["flops_per_second"] > 0 for k in doc["kinds"].values())
    assert doc["fixed_step_seconds"] > 0 and doc["layer_seconds"] >= 0 and doc["op_seconds"] >= 0
    assert doc["host_to_device_bytes_per_second"] is None  # cpu
    assert doc["input_pipeline_images_per_second"] > 0
    assert doc["environment"]["host_fingerprint"]
    cal = costmodel.from_probe(doc)
    facts = costmodel.ModelFacts("m", 100, 1e8, {"conv": 9e7, "linear": 1e7}, layers=4)
    assert costmodel.predict_epoch(cal, facts, 1000, 8)["epoch_seconds"] > 0


def test_the_probe_counts_a_layer_s_work_in_the_model_facts_units():
    """A depthwise 3x3 layer of 16 channels at 8x8, 4 images: forward 2 x 9 taps x 16 x 64 outputs per image, and
    its input and weight gradients as much again each (torch's own formula counts the weight gradient 16 times)."""
    from torch import nn

    conv = nn.Conv2d(16, 16, 3, padding=1, groups=16, bias=False)
    assert probe.train_flops(conv, (4, 16, 8, 8), "depthwise_conv") == 4 * 3 * 2 * 9 * 16 * 64
    norm = nn.Sequential(nn.BatchNorm2d(16), nn.ReLU())
    elements = probe.train_flops(norm, (4, 16, 8, 8), "other")
    assert elements >= 4 * 4 * 16 * 64  # output elements as modelfacts' "other": forward and backward of both ops


def test_the_cost_model_s_record_of_the_probe_s_layer_stack_is_what_the_stack_counts():
    """costmodel prices an op from schema-3 records made before op_seconds was recorded with the stack's counts:
    they must be the stack's and the tiny model's as nets counts them."""
    from gpuscale.models import nets

    stack, tiny = nets.training_cost(probe.stacked_model(probe.LAYER_STACK)), nets.training_cost(probe.tiny_model())
    assert costmodel.STACK_LAYERS == 2 * probe.LAYER_STACK
    assert stack["ops_per_step"] - tiny["ops_per_step"] == costmodel.STACK_OPS
    other = stack["flops_by_kind"]["other"] - tiny["flops_by_kind"]["other"]
    assert other == costmodel.STACK_ELEMENTS_PER_IMAGE


def test_layer_calls_name_each_distinct_call_as_the_network_makes_it():
    """A module called twice counts twice; the first layer's input needs no gradient, later ones do; a
    channels-last input (convnext's permutes) is a different call from a contiguous one of the same shape."""
    import torch
    from torch import nn

    from gpuscale.models import nets

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = nn.Conv2d(3, 8, 3, padding=1)
            self.relu = nn.ReLU()
            self.mix = nn.Conv2d(8, 8, 1)
            self.head = nn.Linear(8, 2)

        def forward(self, x):
            x = self.relu(self.conv(x))
            x = self.relu(self.mix(x))
            x = self.mix(x.contiguous(memory_format=torch.channels_last))
            return self.head(x.mean((2, 3)))

    calls, protos = nets.layer_calls(Net(), (3, 8, 8))
    assert calls == {
        "Conv2d(3, 8, kernel_size=(3, 3), stride=(1, 1), padding=(1, 1)) <- (3, 8, 8):0123:nograd": 1,
        "ReLU() <- (8, 8, 8):0123": 2,
        "Conv2d(8, 8, kernel_size=(1, 1), stride=(1, 1)) <- (8, 8, 8):0123": 1,
        "Conv2d(8, 8, kernel_size=(1, 1), stride=(1, 1)) <- (8, 8, 8):0231": 1,
        "Linear(in_features=8, out_features=2, bias=True) <- (8,):01": 1,
    }
    made = protos["Conv2d(8, 8, kernel_size=(1, 1), stride=(1, 1)) <- (8, 8, 8):0231"].inputs(4, "cpu")[0]
    assert made.shape == (4, 8, 8, 8) and made.is_contiguous(memory_format=torch.channels_last) and made.requires_grad


def test_the_layer_table_sums_each_model_s_timed_calls_per_image_and_says_what_the_budget_left_out():
    import torch

    from gpuscale.models import nets
    from gpuscale.models import registry as models

    table = probe.layer_table(torch.device("cpu"), 4, 30.0, names=["simplecnn_half"])
    calls, _ = nets.layer_calls(models.MODELS["simplecnn_half"].build(10))
    seconds = {row["layer"]: row["seconds_per_call"] for row in table["layers"]}
    assert set(seconds) == set(calls)
    expected = sum(n * seconds[key] for key, n in calls.items()) / 4
    assert table["models"]["simplecnn_half"]["seconds_per_image"] == pytest.approx(expected, rel=1e-12)
    assert table["models"]["simplecnn_half"]["layer_calls"] == sum(calls.values()) == 13
    assert table["harness"] == 2  # the network's work only (measure/layertable.py; absent in older records: 1)
    none = probe.layer_table(torch.device("cpu"), 4, 0.0, names=["simplecnn_half", "resnet18"])
    assert none["models"] == {} and none["models_not_timed"] == ["simplecnn_half", "resnet18"]


class _FakeClock:
    """The layer table's perf_counter, moved only by the steps it times: a loaded machine's own pauses (other
    processes, pytest-xdist workers) never land in a pass, so the pauses a test plants are the only ones."""

    def __init__(self) -> None:
        self.now = 0.0

    def advance(self, seconds: float) -> None:
        self.now += seconds

    def __call__(self) -> float:
        return self.now


def fake_clock(monkeypatch) -> _FakeClock:
    from gpuscale.measure import layertable

    clock = _FakeClock()
    monkeypatch.setattr(layertable, "time", types.SimpleNamespace(perf_counter=clock))
    return clock


def test_the_layer_table_keeps_the_median_of_interleaved_passes_so_one_pause_of_the_host_prices_nothing(monkeypatch):
    import torch

    ran: list[str] = []
    clock = fake_clock(monkeypatch)

    def step(name: str, slow_call: int):
        def run():
            ran.append(name)
            clock.advance(0.04 if ran.count(name) == slow_call else 0.002)

        return run

    # one window per call (0 s): warm-up a, b, then passes a b | a b | a b; a's second timed call pauses 20x, so
    # a (its passes disagree) is timed in RETIME_PASSES more passes of its own, b (they agree) is not
    from gpuscale.measure import layertable

    got = layertable.timed_passes({"a": step("a", 3), "b": step("b", 0)}, torch.device("cpu"), 3, 0.0)
    assert ran == ["a", "b"] + ["a", "b"] * 3 + ["a"] * layertable.RETIME_PASSES
    assert got["a"]["seconds_per_call"] < 0.01 and got["a"]["spread"] > 5
    assert got["a"]["passes"] == 3 + layertable.RETIME_PASSES == len(got["a"]["pass_seconds"])
    assert got["b"]["seconds_per_call"] < 0.01 and got["b"]["spread"] < 5 and got["b"]["passes"] == 3


def test_a_layer_paused_in_two_of_its_three_passes_is_priced_from_its_unpaused_ones(monkeypatch):
    """Issue 27: on two H100 leases the resnets' stem convolution was slow in two of three passes (28 and 52 ms
    against 0.6-0.7 ms elsewhere) and the median of three kept the pause; more passes keep the layer's own time."""
    import torch

    from gpuscale.measure import layertable

    calls = {"stem": 0}
    clock = fake_clock(monkeypatch)

    def stem():
        calls["stem"] += 1
        clock.advance(0.05 if calls["stem"] in (3, 4) else 0.002)  # warm-up, pass 1 fast; passes 2, 3 paused

    got = layertable.timed_passes({"stem": stem}, torch.device("cpu"), 3, 0.0)["stem"]
    assert got["passes"] == 7 and sorted(got["pass_seconds"])[-2] > 0.04  # the two pauses are kept in the row
    assert got["seconds_per_call"] < 0.02  # the median of 7 is an unpaused pass; the median of the first 3 was not
    assert statistics.median(got["pass_seconds"][:3]) > 0.04


def test_a_call_still_paused_after_re_timing_is_counted_and_its_share_of_each_model_s_table_warned_of(
    monkeypatch, caplog
):
    """Issue 27: the median of 7 passes keeps a pause that lands in 4 of them; the table says which share of each
    model it holds (layertable.settled) and the probe warns where a model's share passes UNSETTLED_WARNING."""
    import torch

    from gpuscale.measure import layertable
    from gpuscale.models import nets
    from gpuscale.models import registry as models

    calls, _ = nets.layer_calls(models.MODELS["simplecnn_half"].build(10))
    first = sorted(calls)[0]
    assert not layertable.settled({"seconds_per_call": 0.05, "pass_seconds": [0.001, 0.05, 0.05, 0.06, 0.001]})
    assert layertable.settled({"seconds_per_call": 0.001, "pass_seconds": [0.001, 0.05, 0.05, 0.001, 0.001]})
    assert layertable.settled({"seconds_per_call": 0.001})  # a row of before 2026-12-06: no passes kept

    def fake_passes(steps, device, passes, seconds):  # every call 1 ms, the first one paused in 4 of 7 passes
        row = {"seconds_per_call": 0.001, "spread": 1.0, "passes": 3, "pass_seconds": [0.001] * 3}
        paused = {"seconds_per_call": 0.05, "spread": 50.0, "passes": 7, "pass_seconds": [0.001] * 3 + [0.05] * 4}
        return {key: dict(paused if key == first else row) for key in steps}

    monkeypatch.setattr(layertable, "timed_passes", fake_passes)
    table = layertable.layer_table(torch.device("cpu"), 4, 30.0, names=["simplecnn_half"])
    assert table["retimed_calls"] == 1 and table["unsettled_calls"] == 1
    total = sum(n * (0.05 if key == first else 0.001) for key, n in calls.items())
    share = table["models"]["simplecnn_half"]["unsettled_share"]
    assert share == pytest.approx(calls[first] * 0.05 / total)
    with caplog.at_level("WARNING", logger="gpuscale.probe"):
        assert probe.warn_unsettled(table, "cpu")
    assert "simplecnn_half" in caplog.text and "probe again" in caplog.text
    table["models"]["simplecnn_half"]["unsettled_share"] = probe.UNSETTLED_WARNING / 2
    assert not probe.warn_unsettled(table, "cpu")


def test_probe_of_a_missing_device_records_why():
    import torch

    if torch.cuda.is_available():
        pytest.skip("this host has a GPU")
    from gpuscale.contract import params
    from gpuscale.contract.settings import Params

    train = Params.from_dict(params.deep_merge(params.load(), {"train": SMALL_TRAIN})).train
    doc = probe.run("cuda", train, budget_seconds=1.0)
    probe.validate(doc)
    assert doc["status"] == "not_measured" and doc["not_measured_reason"]
    assert doc["kinds"] == {}


@pytest.mark.e2e
def test_predict_preset_runs_host_probe_predict_without_training(tmp_path):
    repo = copy_project(tmp_path / "repo")
    write_yaml(
        repo / "small.yaml",
        {"data": TINY["data"], "train": SMALL_TRAIN, "predict": {"probe_seconds": 2}},
    )
    done = run(
        ["snakemake", "--cores", "2", "--configfile", "config/predict.yaml", "small.yaml"],
        repo,
    )
    assert not (repo / "results/runs").exists()
    cpu = json.loads((repo / "results/probe/cpu.json").read_text())
    assert cpu["status"] == "measured"
    # the input pipeline is timed on the dataset training reads (issue 27), in windows whose spread is kept
    assert (repo / "data/prepared/manifest.json").is_file()
    pipeline = cpu["input_pipeline"]["with_step"]
    assert pipeline["source"] == "prepared data" and len(pipeline["passes"]) == 3 and pipeline["spread"] >= 0
    names = set(prediction.TABLES)  # each table the stage lists, as CSV and JSON, and nothing else
    assert {p.name for p in (repo / "results/predict").iterdir()} == {
        f"{n}.{e}" for n in names for e in ("csv", "json")
    }
    from gpuscale.models import registry as models
    from gpuscale.predict import prediction as predict

    tables = predict.tables(repo / "results/predict")
    predicted = {(r["model"], r["device"]) for r in tables["host"]}
    assert {(m, "cpu") for m in models.MODEL_NAMES} <= predicted
    assert all(r["label"] == "prediction" for r in tables["host"])
    assert set(tables) == {"host", "constants", "skipped"}  # no validation at run time: research/prediction/'s
    assert "predicted duration" not in done.stdout + done.stderr  # no training: no up-front estimate
    # the report: the reference study beside this host's predictions, labelled as such (issue 18 item 5)
    html = (repo / "reports/index.html").read_text()
    assert '<section id="predicted"' in html and "PREDICTION" in html
    assert "CPU epoch, PREDICTED (s, band)" in html and "research/prediction/results/validation.md" in html


def test_training_progress_lines_carry_the_jobs_eta(prepared, tmp_path, caplog):
    import re

    from test_train import tiny_settings

    from gpuscale.measure import train

    caplog.set_level("INFO")
    train.run(tiny_settings(epochs=2), prepared, tmp_path / "run.json", threads=1)
    progress = [m for m in caplog.messages if " step " in m and "loss" in m]
    assert progress and all(re.search(r"job ETA \d+ s$", m) for m in progress)
    assert progress[-1].endswith("job ETA 0 s")  # the last step of the last epoch: nothing left


@pytest.mark.e2e
def test_the_workflow_prints_the_predicted_duration_before_any_training_job(tmp_path):
    repo = copy_project(tmp_path / "repo")
    write_yaml(repo / "tiny.yaml", {**TINY, "study": {**TINY["study"], "models": ["simplecnn", "resnet18"]}})
    done = run(["snakemake", "results/host.json", "--cores", "1", "--configfile", "tiny.yaml"], repo)
    out = done.stdout + done.stderr
    assert "predicted duration of the 2 timing jobs to run" in out
    assert "results/runs/resnet18/cpu/paper-seed0.json: " in out and "total predicted" in out


def test_with_a_study_plan_progress_lines_add_the_jobs_still_to_come(prepared, tmp_path, caplog, monkeypatch):
    from test_train import tiny_settings

    from gpuscale.measure import train

    (tmp_path / "logs").mkdir()
    plan = tmp_path / "logs" / "study-plan.json"
    (tmp_path / "results").mkdir()
    (tmp_path / "results" / "done.json").write_text("{}")
    jobs = {"results/run.json": 5.0, "results/next.json": 1000.0, "results/done.json": 50.0}
    plan.write_text(json.dumps({"jobs": jobs}))
    monkeypatch.setenv("GPUSCALE_STUDY_PLAN", str(plan))
    caplog.set_level("INFO")
    train.run(tiny_settings(epochs=1), prepared, tmp_path / "results" / "run.json", threads=1)
    progress = [m for m in caplog.messages if " step " in m and "loss" in m]
    # the last step: nothing left of this job; of the others only next.json (done.json exists, run.json is this)
    assert progress[-1].endswith("job ETA 0 s, study ETA 1000 s")


def test_the_figures_quoted_on_how_far_prediction_erred_are_the_committed_research_result():
    """docs/prediction.md's generated block, results/validation.json and .md are what research/prediction/validate.py
    gives from the shipped lease folders now (a figure edited by hand, or a folder changed without rerunning it,
    fails here: rerun `python research/prediction/validate.py`)."""
    import sys
    from pathlib import Path

    from conftest import REPO

    from gpuscale.present import docs

    sys.path.insert(0, str(REPO))
    from research.prediction import validate

    doc = json.loads(validate.RESULT.read_text())
    block = docs.block(validate.BLOCK, (REPO / "docs" / "prediction.md").read_text())
    assert block == validate.headline_table(doc["headline"])
    assert "| H200 | speedup | unmeasured |" in block and "probe alone" in block
    assert validate.main(["--check"]) == 0
    assert Path(validate.RESULT).stat().st_size < 200_000  # summaries only: every row with --rows, not committed
