"""How much of a compiled run's first epoch is compilation, and how much a warm torch.compile cache saves.

Three runs of one model with `compile: default` on synthetic data (timings only; the accuracy means nothing):
`cold` (a private, empty cache), then `shared` twice on one fresh cache directory (the first fills it, the
second finds it warm). Each run is its own process, as in the workflow. Prints the warm-up and steady epochs.

    python benchmarks/compile_cache.py --device cpu --model simplecnn
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--model", default="simplecnn")
    parser.add_argument("--threads", type=int, default=None)
    args = parser.parse_args()
    sys.path.insert(0, str(REPO / "src"))
    from gpuscale.contract import params
    from gpuscale.inputs import data

    with tempfile.TemporaryDirectory(prefix="gpuscale-compile-bench-") as tmp:
        tmp = Path(tmp)
        config = params.load([REPO / "params.yaml"])
        data.prepare({**config["data"], "source": "synthetic", "train_size": 2000, "test_size": 200}, tmp / "prepared")
        config["train"].update(
            epochs=3,
            batch_size=100,
            eval_batch_size=100,
            phase_profile_steps=0,
            loader={"num_workers": 0, "pin_memory": False, "persistent_workers": False},
        )
        env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": str(tmp / "shared-cache"), "PYTHONPATH": str(REPO / "src")}
        env.pop("TRITON_CACHE_DIR", None)
        print(f"{'cache':16s} {'files at start':>14s} {'warm-up epoch s':>16s} {'steady epoch s':>15s}")
        for name, policy in (("cold", "cold"), ("shared (empty)", "shared"), ("shared (warm)", "shared")):
            config["variants"]["bench"] = {**config["variants"]["paper"], "compile": "default", "compile_cache": policy}
            settings = params.run_settings(config, args.model, args.device, "bench", 0)
            settings_file, out = tmp / "settings.json", tmp / f"{policy}.json"
            settings_file.write_text(json.dumps(settings))
            code = (
                "import json, sys; from pathlib import Path; from gpuscale.measure import train; "
                "train.run(json.load(open(sys.argv[1])), Path(sys.argv[2]), Path(sys.argv[3]), "
                f"threads={args.threads!r})"
            )
            subprocess.run(
                [sys.executable, "-c", code, settings_file, tmp / "prepared", out],
                env=env,
                check=True,
                stderr=subprocess.DEVNULL,
            )
            rec = json.loads(out.read_text())
            effective, timing = rec["variant"]["effective"], rec["timing"]
            print(
                f"{name:16s} {effective['compile_cache_files_at_start']:14d} {timing['warmup_epoch_seconds']:16.2f} "
                f"{timing['steady_epoch_seconds_median']:15.2f}"
            )


if __name__ == "__main__":
    main()
