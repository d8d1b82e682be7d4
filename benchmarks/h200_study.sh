#!/usr/bin/env bash
# The reference study (issue 5) on a bare GPU host (torch, torchvision, numpy, pillow, pyyaml; no workflow
# tools): `gpuscale train` with params.yaml as it is (10 epochs, the paper's protocol) plus an overlay, one
# timing job at a time, for the runs named on the command line as DEVICE:MODEL:VARIANT:SEED:ESTIMATE_SECONDS, or
# DEVICE:MODEL:VARIANT:SEED:ESTIMATE_SECONDS:SWEEP for a sweep run (SWEEP = threads=N or batch=N; sweeps.train applies).
# An argument overlay=FILE switches the overlay for the runs after it; an overlay with a `data:` section gets
# its own prepared copy of the data (e.g. a smaller test set), prepared once. A run that would not finish inside
# BUDGET seconds is skipped and says so. Records and logs are packed as OUTDIR/records.tar and OUTDIR/logs.tar
# (the device tool brings back no deep folders and a limited number of files).
#   benchmarks/h200_study.sh ZIP OUTDIR BUDGET_SECONDS OVERLAY RUN|overlay=FILE...
set -uo pipefail
ZIP=$1; OUT=$2; BUDGET=$3; OVERLAY=$4; shift 4
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1
G="python3 -m gpuscale"
mkdir -p "$OUT/runs" "$OUT/logs"
printf 'data: {source: imagefolder, path: %s}\n' "$ZIP" > /tmp/gpuscale-zip.yaml
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,power.limit --format=csv,noheader

use_overlay() {  # sets P (the params chain) and DATA (the prepared data for it), preparing it if new
  OVERLAY=$1
  P="--params params.yaml --params /tmp/gpuscale-zip.yaml --params $OVERLAY"
  DATA=/tmp/prepared
  if grep -q '^data:' "$OVERLAY"; then DATA=/tmp/prepared-$(basename "$OVERLAY" .yaml); fi
  if [[ ! -d $DATA ]]; then
    $G data $P --out "$DATA" 2>&1 | tail -1; echo "[data for $OVERLAY ready at ${SECONDS}s]"
  fi
}

use_overlay "$OVERLAY"
for spec in "$@"; do
  if [[ $spec == overlay=* ]]; then use_overlay "${spec#overlay=}"; continue; fi
  IFS=: read -r device model variant seed estimate sweep <<<"$spec"
  if (( SECONDS + estimate >= BUDGET )); then
    echo "[skipped $spec: ~${estimate}s would pass the ${BUDGET}s budget at ${SECONDS}s]"; continue
  fi
  file="$variant-seed$seed.json"; extra=()
  if [[ -n "${sweep:-}" ]]; then file="${sweep/=/}-$file"; extra=(--sweep "$sweep"); fi
  name="$model-$device-${file%.json}"
  $G train $P --model "$model" --device "$device" --variant "$variant" --seed "$seed" --threads "$(nproc)" \
    "${extra[@]}" --data "$DATA" --out "$OUT/runs/$model/$device/$file" --log "$OUT/logs/$name.log" \
    >/dev/null 2>&1 || echo "[failed $spec]"
  grep -hE "training in|phases per step|rror" "$OUT/logs/$name.log" | sed -E "s/^.*INFO gpuscale.train: //"
  echo "[$name finished at ${SECONDS}s]"
done
# the device tool returns neither deep folders nor many files: records and logs come back as two tars
tar -cf "$OUT/records.tar" -C "$OUT" runs && tar -cf "$OUT/logs.tar" -C "$OUT" logs && rm -rf "$OUT/runs" "$OUT/logs"
