#!/usr/bin/env bash
# How long `snakemake -n` takes on this checkout (a no-op dry run of the default study under 2 s on
# 2 cores), beside Snakemake's own start: N rounds (default 7), each running, in a random order, this workflow's
# `snakemake -n --cores 4 [args]` and the same command on a one-rule Snakefile in an empty folder, each a fresh
# process; min / median / max wall seconds of both, and the median of the per-round differences (the workflow's
# own part, its two halves taken side by side on the same load). One untimed run of each first: it fills the
# Snakefile's cache of the stages' code files (.snakemake/gpuscale/), which a parse after an edit to src/gpuscale
# computes again (about 0.4 s more, once). Run it with the venv active; after a study, the figure is the no-op's.
# Extra arguments go to this workflow's snakemake only.
#   benchmarks/dry_run.sh [N] [snakemake args...]
set -euo pipefail
N=${1:-7}; shift || true
python3 - "$N" "$@" <<'PY'
import os, random, shutil, statistics, subprocess, sys, tempfile, time
n, extra = int(sys.argv[1]), sys.argv[2:]
empty = tempfile.mkdtemp(prefix="gpuscale-dry-run-")
with open(os.path.join(empty, "Snakefile"), "w") as fh:
    fh.write("rule all:\n    default_target: True\n")
runs = {"workflow": (os.getcwd(), extra), "empty Snakefile": (empty, [])}
times = {name: [] for name in runs}
rng = random.Random(0)
for where, args in runs.values():
    subprocess.run(["snakemake", "-n", "--cores", "4", *args], cwd=where, check=True, capture_output=True)
for _ in range(n):
    for name in rng.sample(sorted(runs), len(runs)):
        where, args = runs[name]
        start = time.perf_counter()
        subprocess.run(["snakemake", "-n", "--cores", "4", *args], cwd=where, check=True, capture_output=True)
        times[name].append(time.perf_counter() - start)
load = os.getloadavg()[0]
shutil.rmtree(empty)
for name, got in times.items():
    label = f"snakemake -n {' '.join(extra)}".strip() if name == "workflow" else "empty Snakefile"
    print(f"{label}: min {min(got):.2f} s, median {statistics.median(got):.2f} s, max {max(got):.2f} s over {n} runs")
diff = [w - e for w, e in zip(times["workflow"], times["empty Snakefile"])]
print(f"the workflow's own part (per-round difference): median {statistics.median(diff):.2f} s, "
      f"min {min(diff):.2f} s, max {max(diff):.2f} s; load average at the end {load:.2f}")
PY
