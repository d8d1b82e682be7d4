#!/usr/bin/env bash
# A third one-lease ladder for the cost-model check: schema-3 probes of both devices, then 16 models of
# 9 families on the GPU (3 epochs: two steady) and on the CPU (3 epochs sampled at 10 of 391 steps), one run at a
# time, inside BUDGET seconds. Call it again on the same warm machine to go on: probes and runs an earlier call of
# the lease finished are skipped (they live under /tmp/lease3). Prints the boot id: calls that print the same one
# ran in one lease. Brings back OUTDIR/probe.tar (always all probes), records.tar and logs.tar (this call's runs).
#   research/leases/h200_lease3.sh OUTDIR BUDGET_SECONDS
set -uo pipefail
OUT=$1; BUDGET=$2
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1
W=/tmp/lease3
echo "boot_id $(cat /proc/sys/kernel/random/boot_id)"
mkdir -p "$W/probe" "$OUT"
for device in cuda cpu; do
  if [[ ! -e $W/probe/$device.json ]]; then
    python3 -m gpuscale probe --device "$device" --out "$W/probe/$device.json" --log "$W/probe/$device.log" >/dev/null 2>&1
    grep -E "layer table|fixed step|rror" "$W/probe/$device.log" | sed -E 's/^.*INFO gpuscale.probe: //'
  fi
done
tar -cf "$OUT/probe.tar" -C "$W" probe
echo "[probes done at ${SECONDS}s]"
MODELS=(resnet18 resnet50 simplecnn mobilenet_v2 efficientnet_b0 shufflenet_v2 regnet_y_400mf densenet121 vit_small_p8
  vit_tiny_p4 convnext_tiny vgg16_bn mobilenet_v3_large resnet34 resnet101 simplecnn_half)
# seconds each run is expected to take (3 epochs, from the reference study's epochs), in MODELS' order
GPU_S=(36 44 36 43 53 50 57 78 55 34 46 40 48 37 67 33)
CPU_S=(20 26 17 29 41 22 23 27 33 25 25 30 32 23 35 17)
specs=()
for i in "${!MODELS[@]}"; do specs+=("cuda:${MODELS[$i]}:paper:0:${GPU_S[$i]}"); done
specs+=(overlay=research/leases/h200_lease_cpu3.yaml)
for i in "${!MODELS[@]}"; do specs+=("cpu:${MODELS[$i]}:paper:0:${CPU_S[$i]}"); done
WORK=$W bash research/leases/h200_study.sh .carry/cifar-trim.zip "$OUT" $((BUDGET - SECONDS)) \
  research/leases/h200_lease_gpu3.yaml "${specs[@]}"
echo "[call done at ${SECONDS}s; records so far: $(find "$W/runs" -name '*.json' 2>/dev/null | wc -l)]"
