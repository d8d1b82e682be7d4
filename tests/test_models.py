import json
from pathlib import Path

import pytest
import torch
import yaml

from gpuscale.models import facts as factsfile
from gpuscale.models import nets
from gpuscale.models import registry as models

REPO = Path(__file__).resolve().parents[1]


def count(name: str) -> int:
    return nets.parameter_count(models.build(name))


# the slowest to build, step and count on a CPU (deep, wide or 32x32-map models): marked heavy
HEAVY = {"resnet101", "resnet152", "resnet50_cifar", "convnext_tiny", "densenet121"}


def with_heavy_marked(names):
    return [pytest.param(name, marks=pytest.mark.heavy) if name in HEAVY else name for name in names]


@pytest.mark.parametrize(
    "name, expected",
    [
        ("resnet18", 11_181_642),  # torchvision resnet18, 10 classes
        ("resnet50", 23_528_522),
        ("resnet18_cifar", 11_173_962),  # 7x7x3x64 stem replaced by 3x3x3x64
        ("resnet50_cifar", 23_520_842),
    ],
)
def test_resnet_parameter_counts(name, expected):
    assert count(name) == expected


def test_simplecnn_is_three_conv_two_linear_about_half_a_million():
    model = models.build("simplecnn")
    kinds = [type(m) for m in model.modules()]
    assert kinds.count(torch.nn.Conv2d) == 3 and kinds.count(torch.nn.Linear) == 2
    assert 500_000 <= nets.parameter_count(model) <= 600_000


@pytest.mark.parametrize("name", with_heavy_marked(models.MODEL_NAMES))
def test_every_model_maps_cifar_images_to_ten_logits(name):
    model = models.build(name).eval()
    with torch.no_grad():
        assert model(torch.randn(2, 3, 32, 32)).shape == (2, 10)


def test_ladder_spans_eighteen_models_in_six_families():
    families = {spec.family for spec in models.MODELS.values()}
    assert len(models.MODEL_NAMES) >= 18 and len(families) >= 6
    assert {"mobilenet", "efficientnet", "shufflenet", "vgg", "densenet", "regnet", "convnext"} <= families


@pytest.mark.parametrize(
    "name, expected",
    [
        ("mobilenet_v2", 2_236_682),
        ("mobilenet_v3_small", 1_528_106),
        ("efficientnet_b0", 4_020_358),
        ("vgg11_bn", 9_231_114),  # the 512-to-10 classifier, not torchvision's 120M-parameter one
        ("convnext_tiny", 27_827_818),
        ("vit_small_p8", 21_379_210),
    ],
)
def test_ladder_parameter_counts(name, expected):
    assert count(name) == expected


def test_flops_by_kind_hand_counted():
    """Dense, depthwise and grouped convolutions and a linear layer on 8x8 maps, counted by hand (2 FLOPs a
    multiply-add; backward: an input and a weight gradient, each as costly as the forward, except that the
    first layer's input needs no gradient)."""
    model = torch.nn.Sequential(
        torch.nn.Conv2d(3, 8, 3, padding=1, bias=False),
        torch.nn.Conv2d(8, 8, 3, padding=1, groups=8, bias=False),
        torch.nn.Conv2d(8, 16, 3, padding=1, groups=4, bias=False),
        torch.nn.Flatten(),
        torch.nn.Linear(16 * 8 * 8, 10),
    )
    kinds = nets.training_cost(model, image_shape=(3, 8, 8))["flops_by_kind"]
    pixels = 8 * 8
    assert kinds["conv"] == 2 * pixels * 8 * 3 * 9 * 2  # forward + weight gradient
    assert kinds["depthwise_conv"] == 2 * pixels * 8 * 1 * 9 * 3
    assert kinds["grouped_conv"] == 2 * pixels * 16 * 2 * 9 * 3
    assert kinds["linear"] == 2 * 1024 * 10 * 3
    assert kinds["attention"] == 0


def test_attention_counted_on_the_cpu():
    """torch's counter has no formula for the CPU's fused attention: vit_tiny_p4's 6 layers of 65 tokens at
    width 192 cost 2 matmuls of 65x65x192 forward and 5 backward."""
    kinds = nets.training_cost(models.build("vit_tiny_p4"))["flops_by_kind"]
    assert kinds["attention"] == 6 * 7 * 2 * 65 * 65 * 192


def test_facts_file_is_torch_free_and_lists_the_registry():
    import subprocess
    import sys

    code = (
        "import sys, json, gpuscale.models.registry as m; f = m.facts(); "
        "print(json.dumps([sorted(f['models']), 'torch' in sys.modules]))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    names, torch_loaded = json.loads(out)
    assert names == sorted(models.MODEL_NAMES) and not torch_loaded


@pytest.mark.parametrize("name", with_heavy_marked(models.MODEL_NAMES))
def test_every_model_trains_a_step_on_the_cpu_and_its_facts_are_current(name):
    """One training step on 2 images, then its cost against modelfacts.json, which fails when the file is stale
    (regenerate it with `python -m gpuscale.models.facts --facts`). The counts of non-matmul work (flops_by_kind.other,
    ops_per_step) follow torch's dispatch, which may shift a little between torch versions; the rest is exact."""
    torch.manual_seed(0)
    model = models.build(name).train()
    logits = model(torch.randn(2, 3, 32, 32))
    loss = torch.nn.functional.cross_entropy(logits, torch.tensor([3, 7]))
    loss.backward()
    assert logits.shape == (2, 10) and torch.isfinite(loss)
    assert all(p.grad is not None and torch.isfinite(p.grad).all() for p in model.parameters() if p.requires_grad)

    fresh = factsfile.model_facts([name])["models"][name]
    assert fresh["train_flops_per_image"] > 2 * fresh["forward_flops_per_image"] > 0
    kinds = fresh["flops_by_kind"]
    assert set(kinds) == set(nets.FLOP_KINDS) and all(v >= 0 for v in kinds.values())
    assert sum(v for k, v in kinds.items() if k != "other") == fresh["train_flops_per_image"]
    assert kinds["other"] > 0 and fresh["ops_per_step"] > 0

    stored = models.facts()
    assert stored["schema"] == 1 and name in stored["models"], "stale: run python -m gpuscale.models.facts --facts"
    entry = stored["models"][name]
    approximate = {"ops_per_step": (entry.pop("ops_per_step"), fresh.pop("ops_per_step"))}
    approximate["other"] = (entry["flops_by_kind"].pop("other"), fresh["flops_by_kind"].pop("other"))
    assert entry == fresh, "stale: run python -m gpuscale.models.facts --facts"
    for key, (old, new) in approximate.items():
        assert new == pytest.approx(old, rel=0.05), f"{key} stale: run python -m gpuscale.models.facts --facts"


def test_flops_ordered_by_compute():
    train = {name: f["train_flops_per_image"] for name, f in models.facts()["models"].items()}
    assert train["simplecnn"] < train["resnet18"] < train["resnet50"]
    # the CIFAR stem keeps 32x32 maps in layer1: about 15x the compute of the ImageNet stem
    assert 10 < train["resnet18_cifar"] / train["resnet18"] < 20
    assert train["resnet50_cifar"] > train["resnet18_cifar"]


def test_flop_count_leaves_model_and_random_state_untouched():
    model = models.build("simplecnn")
    before = {k: v.clone() for k, v in model.state_dict().items()}
    torch.manual_seed(0)
    expected = torch.rand(1)
    torch.manual_seed(0)
    nets.flops_per_image(model)
    assert torch.equal(torch.rand(1), expected)
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())
    assert all(p.grad is None for p in model.parameters())


def test_registry_is_torch_free_to_list():
    import subprocess
    import sys

    code = "import sys, gpuscale.models.registry, gpuscale.contract.params; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"


@pytest.mark.parametrize(
    "name, expected",
    [
        ("resnet34", 21_289_802),
        ("resnet101", 42_520_650),
        ("resnet152", 58_164_298),
        ("vit_tiny_p4", 2_693_578),
        ("simplecnn_half", 139_514),
        ("simplecnn_double", 2_210_762),
    ],
)
def test_scale_models_parameter_counts(name, expected):
    assert count(name) == expected


def test_registry_spans_the_scale_for_fits():
    sizes = sorted(f["parameters"] for f in models.facts()["models"].values())
    assert len(sizes) >= 8 and sizes[0] < 200_000 and sizes[-1] > 50_000_000


def test_models_command_lists_the_shipped_facts_without_torch(tmp_path):
    """`gpuscale models` reads modelfacts.json: no network is built, torch is never imported."""
    import subprocess
    import sys

    code = "import sys\nfrom gpuscale import cli\ncode = cli.main(['models'])\nprint('TORCH', 'torch' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, check=True)
    lines = done.stdout.splitlines()
    assert lines[-1] == "TORCH False", done.stdout + done.stderr
    stored = models.facts()["models"]
    rows = {line.split()[0]: line.split()[1] for line in lines[1:-1]}
    assert set(rows) == set(models.MODEL_NAMES)
    assert rows["resnet18"] == f"{stored['resnet18']['parameters']:,}" == "11,181,642"


def test_models_command_counts_a_spec_model_once_then_reads_its_cache(tmp_path, monkeypatch, capsys):
    """A model named by spec is built and counted on the first call, cached under .gpuscale/cache/models/ by its
    files' sha256; the next call reads the cache (no build), and an edit to the file counts it again."""
    from gpuscale import cli
    from gpuscale.models import facts as facts_module

    monkeypatch.chdir(tmp_path)
    (tmp_path / "net.py").write_text(
        "import torch.nn as nn\n\ndef build(num_classes):\n"
        "    return nn.Sequential(nn.Flatten(), nn.Linear(3 * 32 * 32, num_classes))\n"
    )
    base = yaml.safe_load((REPO / "params.yaml").read_text())
    base["study"]["models"] = ["simplecnn", "net.py:build"]
    (tmp_path / "p.yaml").write_text(yaml.safe_dump(base))
    built = []
    real = facts_module.model_facts
    monkeypatch.setattr(facts_module, "model_facts", lambda names=None: built.append(names) or real(names))

    def listed() -> dict:
        assert cli.main(["models", "--params", "p.yaml"]) == 0
        return {line.split()[0]: line.split()[1] for line in capsys.readouterr().out.splitlines()[1:]}

    first = listed()
    assert first["net.py:build"] == f"{3 * 32 * 32 * 10 + 10:,}" and built == [["net.py:build"]]
    assert (tmp_path / ".gpuscale/cache/models").is_dir()
    assert listed() == first and len(built) == 1  # read from the cache
    with (tmp_path / "net.py").open("a") as fh:
        fh.write("# edited\n")
    listed()
    assert len(built) == 2
