"""Writes src/gpuscale/models/modelfacts.json, the registry's sizes and costs for code that must not import torch.

    python -m gpuscale.models.facts --facts

It sits apart from nets (which counts) and models (which names the registry and reads the file), so neither of
those imports the other back. tests/test_models.py fails when the file is stale.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
from pathlib import Path

import torch

from gpuscale.models import nets, specbuild
from gpuscale.models import registry as models
from gpuscale.models import spec as model_spec

FACTS_NOTES = (
    "Per registry model, for 10 classes and 32x32x3 images, counted on the CPU by gpuscale.models.nets.training_cost "
    "(forward + backward of one training step, optimizer excluded): train_flops_per_image is the sum of the "
    "flops_by_kind entries conv (dense), depthwise_conv, grouped_conv, linear (mm/addmm) and attention "
    "(bmm/baddbmm/fused attention); flops_by_kind.other is not FLOPs by torch's formulas but the output elements "
    "of every other computing op (normalisation, activations, pooling, elementwise), one per element per image: "
    "a measure of memory-bound work, not in train_flops_per_image. ops_per_step: computing ops dispatched in a "
    "forward + backward step (a proxy for kernel launches; batch-independent). layers: convolution, linear and "
    "attention layers. parameter_tensors: what the optimizer steps over."
)


def model_facts(names: list[str] | None = None) -> dict:
    """The facts file's content: {"schema": 1, "models": {name: {...}}} for `names` (default: the registry)."""
    facts = {}
    for name in names or list(models.MODEL_NAMES):
        spec = models.get(name)
        torch.manual_seed(0)
        model = spec.build(10)
        cost = nets.training_cost(model)
        facts[name] = {
            "family": spec.family,
            "description": spec.description,
            "parameters": nets.parameter_count(model),
            "parameter_tensors": sum(1 for _ in model.parameters()),
            "layers": nets.layer_count(model),
            "forward_flops_per_image": cost["forward_flops_per_image"],
            "train_flops_per_image": cost["train_flops_per_image"],
            "flops_by_kind": cost["flops_by_kind"],
            "ops_per_step": cost["ops_per_step"],
        }
    return {"schema": 1, "notes": FACTS_NOTES, "models": facts}


def spec_facts(name: str, folder: Path | str | None = model_spec.FACTS_FOLDER) -> dict:
    """One model's facts entry, for a model named by spec: read from its cache file in `folder` where the spec and
    its source files' sha256 match, else built (gpuscale.models.specbuild.preflight first, so a bad model says why in
    one line), counted and, with a folder, written there. Never into the shipped modelfacts.json."""
    cached = model_spec.read_facts(name, folder) if folder is not None else None
    if cached is not None:
        return cached
    specbuild.preflight(name)
    with contextlib.redirect_stdout(sys.stderr):  # what its forward prints while counted, off a command's answer
        entry = model_facts([name])["models"][name]
    if folder is not None:
        path = model_spec.facts_path(name, folder)
        path.parent.mkdir(parents=True, exist_ok=True)
        partial = path.with_name(f".{path.name}.partial")
        partial.write_text(json.dumps(model_spec.facts_document(name, entry), indent=1) + "\n")
        partial.replace(path)
    return entry


def write_facts(path: Path | None = None) -> Path:
    path = path or models.FACTS_PATH
    path.write_text(json.dumps(model_facts(), indent=1) + "\n")
    return path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m gpuscale.models.facts", description=__doc__.splitlines()[0])
    parser.add_argument("--facts", action="store_true", help="write the registry's facts file (modelfacts.json)")
    parser.add_argument("--out", type=Path, default=None, help="where to write it (default: the package's)")
    args = parser.parse_args(argv)
    if not args.facts:
        parser.print_help()
        return 2
    print(f"wrote {write_facts(args.out)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
