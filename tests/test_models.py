import pytest
import torch

from gpuscale import models, nets


def count(name: str) -> int:
    return nets.parameter_count(models.build(name))


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


@pytest.mark.parametrize("name", models.MODEL_NAMES)
def test_every_model_maps_cifar_images_to_ten_logits(name):
    model = models.build(name).eval()
    with torch.no_grad():
        assert model(torch.randn(2, 3, 32, 32)).shape == (2, 10)


def test_flops_positive_and_ordered_by_compute():
    flops = {name: nets.flops_per_image(models.build(name)) for name in models.MODEL_NAMES}
    train = {name: f["train_flops_per_image"] for name, f in flops.items()}
    assert all(f["forward_flops_per_image"] > 0 for f in flops.values())
    assert all(f["train_flops_per_image"] > 2 * f["forward_flops_per_image"] for f in flops.values())
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

    code = "import sys, gpuscale.models, gpuscale.params; print('torch' in sys.modules)"
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
    sizes = sorted(count(name) for name in models.MODEL_NAMES)
    assert len(sizes) >= 8 and sizes[0] < 200_000 and sizes[-1] > 50_000_000
