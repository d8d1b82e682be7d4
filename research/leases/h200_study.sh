#!/usr/bin/env bash
# The reference study on a bare GPU host (torch, torchvision, numpy, pillow, pyyaml; no workflow
# tools): `gpuscale train` with params.yaml as it is (10 epochs, the paper's protocol) plus an overlay, one
# timing job at a time, for the runs named on the command line as DEVICE:MODEL:VARIANT:SEED:ESTIMATE_SECONDS, or
# DEVICE:MODEL:VARIANT:SEED:ESTIMATE_SECONDS:SWEEP for a sweep run (SWEEP = threads=N or batch=N; sweeps.train applies),
# DEVICE:MODEL:VARIANT:SEED:ESTIMATE_SECONDS:round=N for a later round of the same run (the record is
# VARIANT-seedSEED-roundN.json), or DEVICE:MODEL:VARIANT:SEED:ESTIMATE_SECONDS:resume for a run longer than one call: it checkpoints every epoch
# (runtime.resume), starts whatever its estimate, is cut at BUDGET, and the next call on the same (still warm)
# machine continues it from its last epoch; its record lists which process timed which epochs.
# An argument overlay=FILE switches the overlay for the runs after it; an overlay with a `data:` section gets
# its own prepared copy of the data (e.g. a smaller test set), prepared once. A run that would not finish inside
# BUDGET seconds is skipped and says so (so is one an earlier call of the same lease finished). Runs write under $WORK (/tmp/gpuscale-study: it outlives the call while
# the machine stays warm); the records and logs finished in this call are packed as OUTDIR/records.tar and
# OUTDIR/logs.tar (the device tool brings back no deep folders and a limited number of files).
#   research/leases/h200_study.sh ZIP OUTDIR BUDGET_SECONDS OVERLAY RUN|overlay=FILE...
set -uo pipefail
ZIP=$1; OUT=$2; BUDGET=$3; OVERLAY=$4; shift 4
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1
G=(python3 -m gpuscale)
WORK=${WORK:-/tmp/gpuscale-study}
mkdir -p "$WORK/runs" "$WORK/logs" "$OUT"
printf 'data: {source: imagefolder, path: %s}\n' "$(python3 -c 'import json, sys; print(json.dumps(sys.argv[1]))' "$ZIP")" > /tmp/gpuscale-zip.yaml
printf 'runtime: {resume: true}\n' > /tmp/gpuscale-resume.yaml
done_runs=(); done_logs=()
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,power.limit --format=csv,noheader

use_overlay() {  # sets P (the params chain) and DATA (the prepared data for it), preparing it if new
  OVERLAY=$1
  P=(--params params.yaml --params /tmp/gpuscale-zip.yaml --params "$OVERLAY")
  DATA=/tmp/prepared
  if grep -q '^data:' "$OVERLAY"; then DATA=/tmp/prepared-$(basename "$OVERLAY" .yaml); fi
  if [[ ! -d $DATA ]]; then
    "${G[@]}" data "${P[@]}" --out "$DATA" 2>&1 | tail -1; echo "[data for $OVERLAY ready at ${SECONDS}s]"
  fi
}

# the device tool returns neither deep folders nor many files: records and logs come back as two tars
pack() {  # pack TAR NAME...: those paths under $WORK (an empty tar when none)
  local tarfile=$1; shift
  if (( $# )); then tar -cf "$tarfile" -C "$WORK" "$@"; else tar -cf "$tarfile" -T /dev/null; fi
}
# packed again after every run, so that a call cut by the device's own limit still brings back what finished
# (on 2026-12-05 a call ran past 600 s and brought back no record of the runs it had finished)
pack "$OUT/records.tar" && pack "$OUT/logs.tar"
use_overlay "$OVERLAY"
for spec in "$@"; do
  if [[ $spec == overlay=* ]]; then use_overlay "${spec#overlay=}"; continue; fi
  IFS=: read -r device model variant seed estimate sweep <<<"$spec"
  resume=0; [[ ${sweep:-} == resume ]] && { resume=1; sweep=; }
  round=1; [[ ${sweep:-} == round=* ]] && { round=${sweep#round=}; sweep=; }
  if (( resume ? SECONDS + 60 >= BUDGET : SECONDS + estimate >= BUDGET )); then
    echo "[skipped $spec: ~${estimate}s would pass the ${BUDGET}s budget at ${SECONDS}s]"; continue
  fi
  file="$variant-seed$seed.json"; extra=(); RP=()
  if (( round > 1 )); then file="$variant-seed$seed-round$round.json"; extra=(--round "$round"); fi
  if [[ -n "${sweep:-}" ]]; then file="${sweep/=/}-$file"; extra=(--sweep "$sweep"); fi
  if (( resume )); then RP=(--params /tmp/gpuscale-resume.yaml); fi
  name="$model-$device-${file%.json}"
  if [[ -e $WORK/runs/$model/$device/$file ]] && (( ! resume )); then
    echo "[$name already done in an earlier call of this lease: skipped]"; continue
  fi
  log="$WORK/logs/$name.log"; n=1
  while [[ -e $log ]]; do n=$((n + 1)); log="$WORK/logs/$name.process$n.log"; done
  record="$WORK/runs/$model/$device/$file"
  timeout --signal=TERM $((BUDGET - SECONDS)) "${G[@]}" train "${P[@]}" "${RP[@]}" --model "$model" --device "$device" \
    --variant "$variant" --seed "$seed" --threads "$(nproc)" "${extra[@]}" --data "$DATA" --out "$record" \
    --log "$log" >/dev/null 2>&1
  rc=$?
  grep -hE "training in|phases per step|resumed from|rror" "$log" | sed -E "s/^.*INFO gpuscale.train: //"
  done_logs+=("logs/${log##*/}")
  if (( rc == 124 )); then
    echo "[cut $spec at the ${BUDGET}s budget$( ((resume)) && echo '; the next call on this machine resumes it')]"
  elif (( rc != 0 )); then echo "[failed $spec]"
  else done_runs+=("runs/$model/$device/$file"); echo "[$name finished at ${SECONDS}s]"
  fi
  pack "$OUT/records.tar" "${done_runs[@]}" && pack "$OUT/logs.tar" "${done_logs[@]}"
done
pack "$OUT/records.tar" "${done_runs[@]}" && pack "$OUT/logs.tar" "${done_logs[@]}"
