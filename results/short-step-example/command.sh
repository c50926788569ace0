#!/usr/bin/env bash
# Issue 54, item 5: the short-step example (examples/short_step_workload.py: a plain-PyTorch
# model compiled whole, flex attention inside, steps of a few ms) gated on one GPU with its own
# roles: lazy_threads (control), warmed_up (production), processes. Its production strategy
# must reach SAFE and `processes` must never be UNSAFE. Outcome counts only: JOBS (default 4) runs
# side by side; REPEAT (default 8) runs of each strategy.
# Run from the repository root on a GPU host: bash results/short-step-example/command.sh
# Writes $OUT (default results/short-step-example/gpu): records.jsonl, verdict.txt (the whole
# output, the verdict block last), machine.txt, exit.txt.
set -uo pipefail
py=${PYTHON:-.venv/bin/python}
out=${OUT:-results/short-step-example/gpu}
mkdir -p "$out"
{ nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
  "$py" -c "import torch, transformers; print('torch', torch.__version__, 'transformers', transformers.__version__)"
  git rev-parse HEAD; } > "$out/machine.txt" 2>&1
"$py" -m racegate run --workload examples.short_step_workload:make_workload --preset small \
  --strategies lazy_threads,warmed_up,processes --devices 0 --threads-per-device 2 \
  --cache-states cold --repeat "${REPEAT:-8}" --jobs "${JOBS:-4}" --results "$out/records.jsonl" > "$out/verdict.txt" 2>&1
echo "exit $?" > "$out/exit.txt"
sed -n '/racegate verdict/,$p' "$out/verdict.txt"
cat "$out/exit.txt"
