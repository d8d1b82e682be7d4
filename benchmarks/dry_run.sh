#!/usr/bin/env bash
# How long `snakemake -n` takes on this checkout (issue 29: a no-op dry run of the default study under 2 s on
# 2 cores): N runs (default 5), each a fresh process, min / median / max wall seconds. Run it after a study
# (then nothing is pending and the figure is the no-op's), with the venv active. Extra arguments go to snakemake.
#   benchmarks/dry_run.sh [N] [snakemake args...]
set -euo pipefail
N=${1:-5}; shift || true
python3 - "$N" "$@" <<'PY'
import statistics, subprocess, sys, time
n, extra = int(sys.argv[1]), sys.argv[2:]
times = []
for _ in range(n):
    start = time.perf_counter()
    subprocess.run(["snakemake", "-n", "--cores", "4", *extra], check=True, capture_output=True)
    times.append(time.perf_counter() - start)
print(f"snakemake -n {' '.join(extra)}: min {min(times):.2f} s, median {statistics.median(times):.2f} s, "
      f"max {max(times):.2f} s over {n} runs")
PY
