#!/usr/bin/env bash
# A schema-3 probe of each device and the probe-alone check against this machine's step times, in one call of a
# bare GPU host (torch, torchvision, numpy; no workflow tools), before the same lease's runs (h200_study.sh):
#   research/leases/h200_probe_check.sh OUTDIR
# Writes OUTDIR/probe/{cuda,cpu}.json (+ .log) and OUTDIR/check-{cuda,cpu}.{json,txt} (research/prediction/probe_check.py:
# SYNTHETIC images, compute alone). Prints the boot id: calls that print the same one ran in one lease.
set -uo pipefail
OUT=$1
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1
echo "boot_id $(cat /proc/sys/kernel/random/boot_id)"
mkdir -p "$OUT/probe"
for device in cuda cpu; do
  python3 -m gpuscale probe --device "$device" --out "$OUT/probe/$device.json" --log "$OUT/probe/$device.log" >/dev/null 2>&1
  grep -E "layer table|fixed step|rror" "$OUT/probe/$device.log" | sed -E 's/^.*INFO gpuscale.probe: //'
done
python3 research/prediction/probe_check.py "$OUT/probe/cuda.json" --steps 5 --json "$OUT/check-cuda.json" > "$OUT/check-cuda.txt" 2>&1
tail -1 "$OUT/check-cuda.txt"
python3 research/prediction/probe_check.py "$OUT/probe/cpu.json" --steps 2 --json "$OUT/check-cpu.json" > "$OUT/check-cpu.txt" 2>&1
tail -1 "$OUT/check-cpu.txt"
echo "[probes and checks done at ${SECONDS}s]"
