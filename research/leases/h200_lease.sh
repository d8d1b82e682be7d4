#!/usr/bin/env bash
# One lease of the fresh-lease check (and the remaining pairs) on the H200, in ONE device call (a
# later call is usually a fresh lease): the prepared data, a probe of each device on it (gpuscale probe --data),
# then the `paper` runs of LIST (research/leases/h200_lease_<LIST>.txt: CPU and GPU of each model side by side, in an
# interleaved order, through research/leases/h200_study.sh with the pairs' overlays), then the GPU probe again: its
# input pipeline before and after the runs is the lease's own spread. Brings back OUTDIR/probe/*.json,
# OUTDIR/records.tar and OUTDIR/logs.tar; prints the boot id first.
#   [FIRST_PROBES=...] [CHECK=1] [END_PROBE=0] research/leases/h200_lease.sh LIST OUTDIR BUDGET_SECONDS
set -uo pipefail
LIST=research/leases/h200_lease_$1.txt; OUT=$2; BUDGET=$3
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1
G=(python3 -m gpuscale)
mkdir -p "$OUT/probe"
# the zip travels xz-compressed (15.6 of 50.4 MiB: its members' JPEG headers repeat), under the call's 64 MiB
if [[ ! -e .carry/cifar-trim.zip && -e .carry/cifar-trim.zip.xz ]]; then
  python3 -c 'import lzma, shutil; shutil.copyfileobj(lzma.open(".carry/cifar-trim.zip.xz"), open(".carry/cifar-trim.zip", "wb"))'
fi
echo "boot_id $(cat /proc/sys/kernel/random/boot_id)"
printf 'data: {source: imagefolder, path: %s}\n' "$(python3 -c 'import json, sys; print(json.dumps(sys.argv[1]))' .carry/cifar-trim.zip)" > /tmp/gpuscale-zip.yaml
P=(--params params.yaml --params /tmp/gpuscale-zip.yaml --params research/leases/h200_pairs_gpu.yaml)
[[ -d /tmp/prepared ]] || "${G[@]}" data "${P[@]}" --out /tmp/prepared 2>&1 | tail -1
echo "[data ready at ${SECONDS}s]"
probe() {  # probe DEVICE NAME
  "${G[@]}" probe "${P[@]}" --device "$1" --threads "$(nproc)" --data /tmp/prepared --out "$OUT/probe/$2.json" \
    --log "$OUT/probe/$2.log" >/dev/null 2>&1 || echo "[probe $2 failed]"
  grep -hE "input pipeline|layer table" "$OUT/probe/$2.log" | sed -E "s/^.*INFO gpuscale.probe: //"
  echo "[probe $2 done at ${SECONDS}s]"
}
# FIRST_PROBES="DEVICE:NAME ...": probes before the lease's own (e.g. cuda:first/cuda-cold cuda:first/cuda-again, the
# GPU probed twice before anything else: whether a lease's first probe runs cold); kept under probe/ in subfolders,
# which the transfer does not read
for first in ${FIRST_PROBES:-}; do mkdir -p "$OUT/probe/$(dirname "${first#*:}")"; probe "${first%%:*}" "${first#*:}"; done
probe cpu cpu
probe cuda cuda
if [[ -n ${CHECK:-} ]]; then  # CHECK=1: each probe alone against this machine's compute per step, all models
  timeout 150 python3 research/prediction/probe_check.py "$OUT/probe/cuda.json" --steps 5 --json "$OUT/check-cuda.json" \
    > "$OUT/check-cuda.txt" 2>&1; tail -1 "$OUT/check-cuda.txt"
  timeout 200 python3 research/prediction/probe_check.py "$OUT/probe/cpu.json" --threads "$(nproc)" --steps 2 \
    --json "$OUT/check-cpu.json" > "$OUT/check-cpu.txt" 2>&1; tail -1 "$OUT/check-cpu.txt"
  echo "[checks done at ${SECONDS}s]"
fi
mapfile -t specs < <(grep -v '^#' "$LIST")
# the runs get what is left after the data and the probes, less the end probe's ~40 s (BUDGET - 22 from the call's
# start ran a call past the device's 600 s on 2026-12-05: the probes had taken ~100 s of it)
WORK=/tmp/lease bash research/leases/h200_study.sh .carry/cifar-trim.zip "$OUT" $((BUDGET - SECONDS - 40)) \
  research/leases/h200_pairs_gpu.yaml "${specs[@]}"
[[ ${END_PROBE:-1} == 0 ]] || probe cuda cuda-end  # END_PROBE=0: none (a short call)
echo "[call done at ${SECONDS}s]"
