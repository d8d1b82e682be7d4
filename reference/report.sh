#!/usr/bin/env bash
# Rebuild everything generated from a reference study's records (no training, no local records), in one command:
#   reference/report.sh reference/h200-2026-12-04
# - reference/NAME/report.html (from the records in reference/NAME alone, with the cost model's validation on them)
# - for the README's study (reference/h200-2026-12-04): docs/h200-study-*.png and README.md's headline block
# - docs/params.md's generated reference (from the params schema)
# Any number of models: nothing here lists them.
set -euo pipefail
DIR=${1%/}
README_STUDY=reference/h200-2026-12-04
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
P=(--params params.yaml --params "$DIR/report.yaml")
gpuscale aggregate "${P[@]}" --reference-only --out "$TMP/tables" --metrics "$TMP/metrics.json"
gpuscale charts "${P[@]}" --tables "$TMP/tables" --out "$TMP/charts"
# The cost model checked on these records (leave one model out) and the paper's points; no probe: no host rows.
gpuscale predict "${P[@]}" --probes "$TMP/no-probes" --out "$TMP/predict"
gpuscale report "${P[@]}" --tables "$TMP/tables" --charts "$TMP/charts" --predict "$TMP/predict" --out "$DIR/report.html"
if [ "$DIR" = "$README_STUDY" ]; then
  python3 - "$TMP/charts" docs <<'PY'
import json, pathlib, sys
import vl_convert
from gpuscale.present import charts
for name in ("speedup_vs_parameters", "speedup_vs_flops", "phases", "threads"):
    spec = json.loads((pathlib.Path(sys.argv[1]) / f"{name}.vl.json").read_text())
    png = vl_convert.vegalite_to_png(charts.fixed_width(spec), scale=1.5)
    (pathlib.Path(sys.argv[2]) / f"h200-study-{name}.png").write_bytes(png)
PY
  python3 -m gpuscale.present.docs readme "$TMP/tables"
fi
python3 -m gpuscale.present.docs params
