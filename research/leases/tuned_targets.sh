#!/usr/bin/env bash
# The speed targets on a bare GPU host (torch, torchvision, numpy, pillow, pyyaml; no workflow tools):
#   - `tuned` resnet18_cifar at batch 512 and `tuned` resnet50 at batch 128, through `gpuscale train`, with
#     torch.compile off, inductor, and inductor + CUDA graphs (variants defined in the overlay below);
#   - the `paper` variant through gpuscale against the bare loop (resnet50: GPU-bound, so the loader's
#     noise does not hide a 3% difference), epochs interleaved in one process.
# One timing job at a time. A run that would not finish inside BUDGET seconds is skipped and says so.
#   research/leases/tuned_targets.sh path/to/cifar10-jpeg.zip OUTDIR [BUDGET_SECONDS]
set -uo pipefail
ZIP=$1; OUT=$2; BUDGET=${3:-560}
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1
G=(python3 -m gpuscale)
yq() { python3 -c 'import json, sys; print(json.dumps(sys.argv[1]))' "$1"; }  # a YAML-safe quoted string
mkdir -p "$OUT/runs" "$OUT/logs"
cat > /tmp/gpuscale-targets.yaml <<YAML
data: {source: imagefolder, path: $(yq "$ZIP")}
study: {label: "H200 section 8 targets: tuned variants, 3 epochs"}
train: {epochs: 3, log_every_steps: 100, phase_profile_steps: 30}
models:
  resnet18_cifar: {batch_size: 512}
  resnet50: {batch_size: 128}
variants:
  tuned_inductor: {precision: bf16, memory_format: channels_last, compile: default, loader: device,
                   fused_optimizer: true, cudnn_benchmark: true}
  tuned_graphs: {precision: bf16, memory_format: channels_last, compile: reduce-overhead, loader: device,
                 fused_optimizer: true, cudnn_benchmark: true}
YAML
P=(--params params.yaml --params /tmp/gpuscale-targets.yaml)
fits() { (( SECONDS + $1 < BUDGET )) || { echo "[skipped: $2, ~$1 s would pass the ${BUDGET}s budget]"; false; }; }
train() {  # estimate model variant
  fits "$1" "$2 $3" || return 0
  "${G[@]}" train "${P[@]}" --model "$2" --device cuda --variant "$3" --threads "$(nproc)" --data /tmp/prepared \
    --out "$OUT/runs/$2/cuda/$3-seed0.json" --log "$OUT/logs/$2-$3.log" >/dev/null 2>&1
  grep -hE "epoch 3/3 done|phases per step|rror" "$OUT/logs/$2-$3.log" | sed "s/^/[$2 $3] /"
}
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,power.limit --format=csv,noheader
python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)"
"${G[@]}" data "${P[@]}" --out /tmp/prepared 2>&1 | tail -1
echo "[data prepared at ${SECONDS}s]"
train 40 resnet18_cifar tuned
train 40 resnet50 tuned
train 150 resnet50 tuned_graphs
train 150 resnet18_cifar tuned_inductor
if fits 150 "overhead check"; then
  python3 benchmarks/overhead_check.py --data /tmp/prepared --device cuda --model resnet50 --rounds 5 \
    --pairs gpuscale/gpuscale,bare/bare --threads "$(nproc)" | tee "$OUT/overhead_check_resnet50.jsonl"
fi
train 150 resnet18_cifar tuned_graphs
echo "[done at ${SECONDS}s]"
python3 - "$OUT/runs" <<'PY'
import json, pathlib, sys
for p in sorted(pathlib.Path(sys.argv[1]).rglob("*.json")):
    r = json.loads(p.read_text()); t = r["timing"]; v = r["variant"]
    print(f"{r['key']['model']:15s} {r['key']['variant']:15s} batch {r['settings']['train']['batch_size']:4d} "
          f"steady {t['steady_images_per_second'] or 0:9.0f} img/s  epochs "
          + " ".join(f"{e['train_seconds']:.2f}" for e in r["epochs"])
          + f"  acc {r['quality']['final_test_accuracy']:.3f}  notes {v['notes']}")
PY
