#!/bin/sh
# The datasheet figures a VM hides, measured on the host itself: CPU model number, one-core and all-core clock
# (clock.c), memory bandwidth of a many-threaded copy (torch), printed as lines `key value`.
set -u
dir=$(dirname "$0")
gcc -O2 -o /tmp/gpuscale-clock "$dir/clock.c" || exit 1
grep -m1 -E '^model name' /proc/cpuinfo | sed 's/^/cpuinfo /'
grep -m1 -E '^model\s' /proc/cpuinfo | sed 's/^/cpuinfo /'
grep -m1 -E '^cpu family' /proc/cpuinfo | sed 's/^/cpuinfo /'
grep -m1 -E '^cpu MHz' /proc/cpuinfo | sed 's/^/cpuinfo /'
echo "nproc $(nproc)"
echo "one_core_clock_ghz $(/tmp/gpuscale-clock)"
n=$(nproc); i=0; : > /tmp/gpuscale-clock.out
while [ $i -lt $n ]; do /tmp/gpuscale-clock >> /tmp/gpuscale-clock.out & i=$((i+1)); done; wait
echo "all_core_clock_ghz $(sort -n /tmp/gpuscale-clock.out | head -1) (slowest of $n at once)"
python3 - <<'PY'
import time
try:
    import torch
except ImportError:
    print('copy_bandwidth_gb_s unknown (no torch here)'); raise SystemExit
for threads in (1, torch.get_num_threads()):
    torch.set_num_threads(threads)
    a = torch.ones(64 * 2**20); b = torch.empty_like(a)
    best = 0.0
    for _ in range(10):
        t = time.perf_counter(); b.copy_(a); dt = time.perf_counter() - t
        best = max(best, 2 * a.numel() * 4 / dt)
    print(f"copy_bandwidth_gb_s threads={threads} {best / 1e9:.1f}")
PY
