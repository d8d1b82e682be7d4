"""Wall time of gpuscale's small commands as a user meets them: each a fresh process, the commands interleaved
round by round, after one untimed call of each (disk caches warm).

    PYTHONPATH=src python benchmarks/models_latency.py [--rounds 3] [--with-predict MODEL]

`--with-predict MODEL` adds `gpuscale predict --model MODEL` (it probes the CPU: about a minute).
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time

COMMANDS = {
    "gpuscale --help": ["--help"],
    "gpuscale models": ["models"],
    "gpuscale predict --help": ["predict", "--help"],
    "gpuscale validate": ["validate"],
}


def once(argv: list[str]) -> float:
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "gpuscale", *argv], capture_output=True, text=True, check=False)
    seconds = time.perf_counter() - start
    if done.returncode != 0:
        sys.exit(f"gpuscale {' '.join(argv)} failed ({done.returncode}): {done.stderr.strip()[-1500:]}")
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--with-predict", metavar="MODEL")
    args = parser.parse_args()
    commands = dict(COMMANDS)
    if args.with_predict:
        commands[f"gpuscale predict --model {args.with_predict}"] = ["predict", "--model", args.with_predict]
    for argv in commands.values():
        once(argv)
    times: dict[str, list[float]] = {name: [] for name in commands}
    for _ in range(args.rounds):
        for name, argv in commands.items():
            times[name].append(once(argv))
    print("| command | seconds per call | median |\n|---|---|---|")
    for name, values in times.items():
        print(f"| `{name}` | {', '.join(f'{v:.2f}' for v in values)} | {statistics.median(values):.2f} |")


if __name__ == "__main__":
    main()
