#!/usr/bin/env bash
# The reference study (issue 5) on a bare GPU host (torch, torchvision, numpy, pillow, pyyaml; no workflow
# tools): `gpuscale train` with params.yaml as it is (10 epochs, the paper's protocol) plus OVERLAY, one
# timing job at a time, for the runs named on the command line as DEVICE:MODEL:VARIANT:SEED:ESTIMATE_SECONDS, or
# DEVICE:MODEL:VARIANT:SEED:ESTIMATE_SECONDS:SWEEP for a sweep run (SWEEP = threads=N or batch=N; sweeps.train applies).
# A run that would not finish inside BUDGET seconds is skipped and says so. Records land in OUTDIR/runs/ and
# are packed as OUTDIR/records.tar (the device tool brings back no deep folders).
#   benchmarks/h200_study.sh ZIP OUTDIR BUDGET_SECONDS OVERLAY RUN...
set -uo pipefail
ZIP=$1; OUT=$2; BUDGET=$3; OVERLAY=$4; shift 4
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1
G="python3 -m gpuscale"
mkdir -p "$OUT/runs" "$OUT/logs"
printf 'data: {source: imagefolder, path: %s}\n' "$ZIP" > /tmp/gpuscale-zip.yaml
P="--params params.yaml --params /tmp/gpuscale-zip.yaml --params $OVERLAY"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,power.limit --format=csv,noheader
$G data $P --out /tmp/prepared 2>&1 | tail -1
for spec in "$@"; do
  IFS=: read -r device model variant seed estimate sweep <<<"$spec"
  if (( SECONDS + estimate >= BUDGET )); then
    echo "[skipped $spec: ~${estimate}s would pass the ${BUDGET}s budget at ${SECONDS}s]"; continue
  fi
  file="$variant-seed$seed.json"; extra=()
  if [[ -n "${sweep:-}" ]]; then file="${sweep/=/}-$file"; extra=(--sweep "$sweep"); fi
  name="$model-$device-${file%.json}"
  $G train $P --model "$model" --device "$device" --variant "$variant" --seed "$seed" --threads "$(nproc)" \
    "${extra[@]}" --data /tmp/prepared --out "$OUT/runs/$model/$device/$file" --log "$OUT/logs/$name.log" \
    >/dev/null 2>&1 || echo "[failed $spec]"
  grep -hE "training in|phases per step|rror" "$OUT/logs/$name.log" | sed -E "s/^.*INFO gpuscale.train: //"
  echo "[$name finished at ${SECONDS}s]"
done
tar -cf "$OUT/records.tar" -C "$OUT" runs
