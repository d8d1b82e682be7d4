#!/usr/bin/env bash
# Build reference/NAME/report.html from the records in reference/NAME alone (no training, no local records):
#   benchmarks/reference_report.sh reference/h200-2026-12-02
set -euo pipefail
DIR=${1%/}; TMP=$(mktemp -d)
P=(--params params.yaml --params "$DIR/report.yaml")
gpuscale aggregate "${P[@]}" --reference-only --out "$TMP/tables" --metrics "$TMP/metrics.json"
gpuscale charts "${P[@]}" --tables "$TMP/tables" --out "$TMP/charts"
gpuscale report "${P[@]}" --tables "$TMP/tables" --charts "$TMP/charts" --out "$DIR/report.html"
python3 - "$TMP/charts" docs <<'PY'
import json, pathlib, sys
import vl_convert
for name in ("speedup_vs_parameters", "speedup_vs_flops", "phases", "threads"):
    spec = json.loads((pathlib.Path(sys.argv[1]) / f"{name}.vl.json").read_text())
    (pathlib.Path(sys.argv[2]) / f"h200-study-{name}.png").write_bytes(vl_convert.vegalite_to_png(spec, scale=1.5))
PY
rm -rf "$TMP"
