"""The GPU epochs the host's dispatch sets, against the probe's price of it: over the leases probed as
the tool probes today (transfer.Lease.probed_as_today), each GPU `paper` epoch whose probe-alone dispatch cost
(costmodel.host_and_device_seconds: the fixed step plus ops_per_step x op_seconds) exceeds both the device's FLOPs
and the loader by a fifth, as measured / that dispatch cost; per model the geometric mean, with its ops per step,
parameterised layers and layers per op (the probe's stack counted as the facts count layers: its blocks'
convolutions, half of costmodel.STACK_LAYERS, which counts the batch norms too, over STACK_OPS).

    python research/prediction/dispatch_bound.py [--mix FILE.json ...] [FOLDER ...]
        (default: reference/h200-2026-12-04 reference/h100-2026-12-05)

--mix: a dispatch_mix.py result (a GPU's step fitted as c + a layers + b ops): a column per file with
that split's price of each model's step over the probe's price measured the same minute (the tiny model's fixed
step plus ops x the stack's op_seconds): what the measured / dispatch column would read were the host's cost per
layer and per op what that file found. The file's lease is not the records' leases: a ratio, not an epoch.

Torch-free (the stored probes and the shipped model facts).
"""

from __future__ import annotations

import json
import math
import statistics
import sys
from pathlib import Path

from gpuscale.predict import costmodel as cm
from gpuscale.predict import prediction as predict
from gpuscale.predict import transfer

DEFAULT = ["reference/h200-2026-12-04", "reference/h100-2026-12-05"]
MARGIN = 1.2  # dispatch-bound: the dispatch cost over both the device's part and the loader by this factor


def split_over_probe(mix: dict, facts: cm.ModelFacts) -> float:
    """A dispatch_mix.py result's price of the model's step (c + a layers + b ops) over the probe's way of pricing it
    in the same minute (fixed + ops x op_seconds)."""
    fit = mix["fit"]
    split = fit["constant"] + fit["per_layer"] * facts.layers + fit["per_op"] * facts.ops_per_step
    return split / (mix["fixed_step_seconds"] + mix["probe_op_seconds"] * facts.ops_per_step)


def main(argv: list[str]) -> int:
    mixes = [json.loads(Path(argv[i + 1]).read_text()) for i, a in enumerate(argv) if a == "--mix"]
    folders = [a for i, a in enumerate(argv) if a != "--mix" and (i == 0 or argv[i - 1] != "--mix")] or DEFAULT
    facts = cm.load_facts()
    ratios: dict[str, list[tuple[str, float]]] = {}
    for folder in folders:
        for lease in transfer.leases_of(folder, predict.load_records, predict.load_probes):
            if not lease.probed_as_today() or "cuda" not in lease.probes:
                continue
            cal = cm.from_probe(lease.probes["cuda"])
            for o in lease.observations:
                if o.device != "cuda" or o.model not in facts or not facts[o.model].ops_per_step:
                    continue
                host, device = cm.host_and_device_seconds(cal, facts[o.model], o.images, o.steps)
                batch = math.ceil(o.images / o.steps)
                loader = cm.predict_epoch(cal, facts[o.model], o.images, batch)["loader_seconds"]
                if host > MARGIN * max(device, loader):
                    ratios.setdefault(o.model, []).append((Path(lease.name).name, o.epoch_seconds / host))
    # the facts count convolution, linear and attention layers (nets.layer_count); STACK_LAYERS counts each block's
    # batch norm as well, so the stack's blocks hold STACK_LAYERS / 2 layers as the facts count them
    print(f"the probe's stack: {cm.STACK_LAYERS / 2 / cm.STACK_OPS:.2f} layers per op, counted as the facts count")
    split = "".join(f" split {i + 1} / probe |" for i in range(len(mixes)))
    print(f"| model | leases | measured / dispatch cost (each lease) | ops per step | layers | layers per op |{split}")
    print("|---|---|---|---|---|---|" + "---|" * len(mixes))
    means = {model: math.exp(statistics.fmean(math.log(r) for _, r in got)) for model, got in ratios.items()}
    for model, mean in sorted(means.items(), key=lambda kv: kv[1]):
        f, got = facts[model], ratios[model]
        each = ", ".join(f"{r:.2f}" for _, r in got)
        print(
            f"| {model} | {len(got)} | {mean:.2f} ({each}) | {f.ops_per_step} | {f.layers} | "
            f"{transfer.layers_per_op(f):.2f} |" + "".join(f" {split_over_probe(m, f):.2f} |" for m in mixes)
        )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
