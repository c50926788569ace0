#!/usr/bin/env bash
# Issue 54: concurrency the way threads run, on one GPU. Steps that hold the GIL for 1 ms and
# 10 ms of CPU time (then one small kernel on the GPU), two threads on GPU 0: free steps must
# come out `ok` (concurrent), the same steps under one lock around the whole step, and a thread
# parked in its first step until the other has done its steps, `not_concurrent`.
# Run from the repository root on the GPU host: bash results/concurrency-short-steps/command.sh
# It prints the outcome counts per case and each thread's interleaved/at-work steps; the records
# land in $OUT (default: results/concurrency-short-steps/gpu).
set -uo pipefail
py=${PYTHON:-.venv/bin/python}
out=${OUT:-results/concurrency-short-steps/gpu}
mkdir -p "$out"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > "$out/machine.txt" 2>&1
"$py" -c "import torch; print('torch', torch.__version__)" >> "$out/machine.txt"
for kind in free locked serial; do
  for ms in 1 10; do
    "$py" -m racegate run --workload tests.step_length_workload:make_workload \
      --preset "$kind-${ms}ms" --strategies eager --devices 0 --threads-per-device 2 --cache-states cold \
      --steps $(( ms == 1 ? 40 : 20 )) --warmup-steps 1 --repeat "${REPEAT:-5}" --run-timeout 180 \
      --results "$out/$kind-${ms}ms.jsonl" > "$out/$kind-${ms}ms.log" 2>&1
  done
done
"$py" - "$out" <<'PY'
import collections, json, pathlib, sys
for path in sorted(pathlib.Path(sys.argv[1]).glob("*.jsonl")):
    recs = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    counts = collections.Counter(r["outcome"] for r in recs)
    each = "; ".join(
        " ".join(f"{t.get('steps_interleaved')}/{t.get('steps_at_work')}" for t in r["threads"])
        for r in recs
    )
    print(f"{path.stem:12} {dict(counts)}  interleaved/at-work per thread: {each}")
PY
