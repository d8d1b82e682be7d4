#!/usr/bin/env bash
# Reference measurements on a bare GPU host (torch, torchvision, numpy, pillow, pyyaml; no workflow tools),
# one timing job at a time. Writes OUTDIR/runs/ (reference records), OUTDIR/sampled-check/runs/ (the sampled
# protocol beside a full run of the same config) and OUTDIR/bare_loop.jsonl.
#   research/leases/h200_reference.sh path/to/cifar10-jpeg.zip OUTDIR [CPU_THREADS]
set -uo pipefail
ZIP=$1; OUT=$2; THREADS=${3:-$(nproc)}
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1
G=(python3 -m gpuscale)
yq() { python3 -c 'import json, sys; print(json.dumps(sys.argv[1]))' "$1"; }  # a YAML-safe quoted string
mkdir -p "$OUT/runs" "$OUT/sampled-check/runs" "$OUT/logs"
cat > /tmp/gpuscale-ref.yaml <<YAML
data: {source: imagefolder, path: $(yq "$ZIP")}
study: {label: "H200 reference: paper variant, 2 epochs"}
train: {epochs: 2, log_every_steps: 100, phase_profile_steps: 50}
YAML
printf 'train: {max_steps_per_epoch: 60, sample_warmup_steps: 5}\n' > /tmp/gpuscale-sampled.yaml
P=(--params params.yaml --params /tmp/gpuscale-ref.yaml)
S=("${P[@]}" --params /tmp/gpuscale-sampled.yaml)
record() { echo "$1/$2/$3/paper-seed0.json"; }
train() {  # dir model device params...
  local dir=$1 model=$2 device=$3; shift 3
  "${G[@]}" train "$@" --model "$model" --device "$device" --threads "$THREADS" --data /tmp/prepared \
    --out "$(record "$dir" "$model" "$device")" --log "$OUT/logs/$(basename "$dir")-$model-$device.log" >/dev/null 2>&1
  grep -hE "done:|phases per step|error" "$OUT/logs/$(basename "$dir")-$model-$device.log" | sed "s/^/[$(basename "$dir")] /"
}
"${G[@]}" data "${P[@]}" --out /tmp/prepared 2>&1 | tail -1
for m in simplecnn resnet18 resnet50; do train "$OUT/runs" $m cuda "${P[@]}"; done
python3 benchmarks/bare_loop.py --data /tmp/prepared --model resnet18 --device cuda --epochs 2 --threads "$THREADS" \
  | tee "$OUT/bare_loop.jsonl"
train "$OUT/runs" simplecnn cpu "${P[@]}"
train "$OUT/sampled-check/runs" simplecnn cpu "${S[@]}"
for m in resnet18 resnet50; do train "$OUT/runs" $m cpu "${S[@]}"; done
