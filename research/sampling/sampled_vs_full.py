"""The sampled protocol against full runs of the same config, as separate processes (a timing comparison, so a
benchmark, not a test: on a shared machine the gap between two runs moves with the host, not only with the
extrapolation).

Runs `gpuscale train` full and sampled, interleaved so that a slow spell of the machine falls on both sides, on
synthetic data (timings only; the accuracy means nothing). Prints, per run, the steady epochs (warm-up left out),
the phase profile's instrumented step (run after training in both kinds of run: a gauge of the host's pace in
that process) and, from each full run's own step marks, what the sampled protocol would have estimated for that
very run: the first number mixes host drift with the extrapolation error, the second is the extrapolation error alone.

    python research/sampling/sampled_vs_full.py --threads 1 --rounds 3
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[2]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--model", default="simplecnn")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--train-size", type=int, default=1920)
    parser.add_argument(
        "--steps",
        type=int,
        default=10,
        help="train.max_steps_per_epoch of the sampled runs; the full runs' own estimate needs a "
        "step that gpuscale marks (10, 20, 40, 60, 100, 200, 400, 800)",
    )
    parser.add_argument("--warmup-steps", type=int, default=2, help="train.sample_warmup_steps")
    args = parser.parse_args()
    sys.path.insert(0, str(REPO / "src"))
    from gpuscale.contract import params, sampling
    from gpuscale.inputs import data

    with tempfile.TemporaryDirectory(prefix="gpuscale-sampled-bench-") as tmp:
        tmp = Path(tmp)
        data_settings = params.load([REPO / "params.yaml"])["data"]
        data.prepare(
            {**data_settings, "source": "synthetic", "train_size": args.train_size, "test_size": 50}, tmp / "prepared"
        )
        train = {
            "epochs": args.epochs,
            "batch_size": 64,
            "eval_batch_size": 256,
            "phase_profile_steps": 20,
            "log_every_steps": 100,
            "sample_warmup_steps": args.warmup_steps,
            "loader": {"num_workers": 0, "pin_memory": False, "persistent_workers": False},
        }
        overlays = {"full": {"train": train}, "sampled": {"train": {**train, "max_steps_per_epoch": args.steps}}}
        for name, overlay in overlays.items():
            (tmp / f"{name}.yaml").write_text(yaml.safe_dump(overlay))
        env = {**os.environ, "PYTHONPATH": str(REPO / "src"), "PYTHONUNBUFFERED": "1"}
        steady: dict[str, list[float]] = {"full": [], "sampled": []}
        own_errors = []
        instrumented: dict[str, list[float]] = {}
        print(
            f"{'run':12s} {'steady epochs s':>40s} {'instrumented step s':>20s}  own {args.steps}-step estimate error"
        )
        for i in range(args.rounds):
            for name in ("full", "sampled"):
                out = tmp / f"{name}{i}.json"
                subprocess.run(
                    [
                        sys.executable,
                        "-m",
                        "gpuscale",
                        "train",
                        "--params",
                        str(REPO / "params.yaml"),
                        "--params",
                        str(tmp / f"{name}.yaml"),
                        "--model",
                        args.model,
                        "--device",
                        args.device,
                        "--threads",
                        str(args.threads),
                        "--data",
                        str(tmp / "prepared"),
                        "--out",
                        str(out),
                    ],
                    env=env,
                    check=True,
                    capture_output=True,
                )
                rec = json.loads(out.read_text())
                epochs = rec["epochs"][1:]
                instrumented.setdefault(name, []).append(rec["phase_profile"]["instrumented_step_seconds"])
                steady[name] += [e["train_seconds"] for e in epochs]
                own = ""
                if name == "full":  # what the sampled protocol would have said for this very run
                    errors = []
                    for e in epochs:
                        marks = dict(e["step_marks"])
                        if args.warmup_steps in marks and args.steps in marks:
                            estimate = sampling.extrapolate(
                                marks[args.warmup_steps], marks[args.steps], args.warmup_steps, args.steps, e["steps"]
                            )
                            errors.append(estimate / e["train_seconds"] - 1)
                    own_errors += errors
                    own = " ".join(f"{x:+.1%}" for x in errors) or "(no step marks at those steps)"
                seconds = " ".join(f"{e['train_seconds']:.3f}" for e in epochs)
                print(f"{name + str(i):12s} {seconds:>40s} {instrumented[name][-1]:20.4f}  {own}")
        full, sampled = statistics.median(steady["full"]), statistics.median(steady["sampled"])
        print(
            f"median steady epoch: full {full:.3f} s, sampled {sampled:.3f} s ({sampled / full - 1:+.1%}, "
            "between processes)"
        )
        # the phase profile's instrumented steps run after training in every process, alike in both kinds of
        # run, so they gauge how fast each process's host was, independent of any extrapolation
        full_i, sampled_i = statistics.median(instrumented["full"]), statistics.median(instrumented["sampled"])
        print(
            f"median instrumented step (after training, the same in both): full {full_i:.4f} s, sampled "
            f"{sampled_i:.4f} s ({sampled_i / full_i - 1:+.1%})"
        )
        if own_errors:
            print(
                f"{args.steps}-step estimates from the full runs' own clocks: {min(own_errors):+.1%} to "
                f"{max(own_errors):+.1%} per epoch"
            )


if __name__ == "__main__":
    main()
