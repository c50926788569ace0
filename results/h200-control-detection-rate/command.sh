#!/usr/bin/env bash
# Device call (one H200, nvidia-h200): the positive control's per-run detection rate, issue 22.
# per_device (the incident's code), small preset, 2 threads on one GPU, 10 µs switch interval,
# 8 runs per cache state × schedule, 16 isolated runs at once (outcome counts only), then the
# stress variants tried for the warm cache (issue 22 item 4). Run from the repo root:
#   OUT=<dir> bash results/h200-control-detection-rate/command.sh
set -uo pipefail
export PYTHONUNBUFFERED=1
nvidia-smi -L
python3 -c "import torch, transformers; print('torch', torch.__version__, 'transformers', transformers.__version__)"
run() {  # name, budget seconds, then harness run arguments
  local name=$1 budget=$2; shift 2
  local t0=$SECONDS
  timeout "$budget" python3 -m harness run --preset small --devices 0 --strategy per_device \
    --threads-per-device 2 --steps 8 --switch-interval 1e-5 --timeout 80 --jobs 16 \
    --out "$OUT/$name.jsonl" "$@" >"$OUT/$name.log" 2>&1
  echo "$name: rc=$? in $((SECONDS - t0)) s"
}
run control 420 --cache-state cold,warm,deleted --schedule recompile,staggered --repeat 8
run warm-stress 150 --cache-state warm --schedule recompile --repeat 8 --switch-interval 1e-6 \
  --threads-per-device 2,3
tail -n 30 "$OUT/control.log" "$OUT/warm-stress.log"
