#!/usr/bin/env bash
# The paired re-measurement on the H200: a lease's run list (research/leases/h200_pairs_A.txt: every
# registry model; _B.txt: eight of them again, as round 2, in a second lease), each model's CPU and GPU `paper`
# runs side by side in gpuscale's interleaved order, every record with its sentinels and lease (boot id). Runs
# one timing job at a time through research/leases/h200_study.sh inside BUDGET seconds; call it again on the same warm
# machine to go on (runs an earlier call of the lease finished are skipped). Prints the boot id first: calls that
# print the same one ran in one lease. Also takes a sentinel of each device at the start and at the end of the
# call (OUTDIR/sentinel-*.json). Brings back OUTDIR/records.tar and logs.tar (this call's runs).
#   research/leases/h200_pairs.sh A|B OUTDIR BUDGET_SECONDS
set -uo pipefail
LIST=research/leases/h200_pairs_$1.txt; OUT=$2; BUDGET=$3
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1
mkdir -p "$OUT"
boot=$(cat /proc/sys/kernel/random/boot_id)
echo "boot_id $boot"

for device in cpu cuda; do
  python3 -m gpuscale sentinel --device "$device" --threads "$(nproc)" --out "$OUT/sentinel-start-$device.json" \
    2>/dev/null | head -9
done
mapfile -t specs < <(grep -v '^#' "$LIST")
WORK=/tmp/pairs bash research/leases/h200_study.sh .carry/cifar-trim.zip "$OUT" $((BUDGET - SECONDS - 12)) \
  research/leases/h200_pairs_gpu.yaml "${specs[@]}"
for device in cpu cuda; do
  python3 -m gpuscale sentinel --device "$device" --threads "$(nproc)" --out "$OUT/sentinel-end-$device.json" \
    >/dev/null 2>&1
done
echo "[call done at ${SECONDS}s; records in this lease so far: $(find /tmp/pairs/runs -name '*.json' | wc -l)]"
