"""gpuscale models: list the model registry with parameters and FLOPs."""

from __future__ import annotations


def add_arguments(parser) -> None:
    pass


def run(args) -> int:
    from gpuscale.models import nets
    from gpuscale.models import registry as models

    print(f"{'model':<16} {'parameters':>12} {'train GFLOPs/image':>19}  description")
    for name, spec in models.MODELS.items():
        model = spec.build(10)
        flops = nets.flops_per_image(model)
        print(
            f"{name:<16} {nets.parameter_count(model):>12,} "
            f"{flops['train_flops_per_image'] / 1e9:>19.4f}  {spec.description}"
        )
    return 0
