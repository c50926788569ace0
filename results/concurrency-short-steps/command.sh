#!/usr/bin/env bash
# Issue 54: concurrency the way threads run. Steps that hold the GIL for 1 ms and 10 ms of CPU
# time (then one small torch op), two threads on one device (GPU 0; DEVICES=cpu for the CPU):
# free steps must come out `ok` (concurrent); the same steps under one lock around the whole
# step, and a thread parked in its first step until the other has done its steps,
# `not_concurrent`. From the repository root: bash results/concurrency-short-steps/command.sh
# (REPEAT runs a case, default 5; LOAD=N busy loops beside the runs; OUT the folder). It prints
# the outcome counts per case, each thread's interleaved/at-work steps (the runner's looks) and
# its met-at-work/met steps (the threads' own clocks); the records land in $OUT (default:
# results/concurrency-short-steps/gpu).
set -uo pipefail
py=${PYTHON:-.venv/bin/python}
out=${OUT:-results/concurrency-short-steps/gpu}
mkdir -p "$out"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > "$out/machine.txt" 2>&1 ||
  echo "cpu: $(nproc) cores, no GPU" > "$out/machine.txt"
"$py" -c "import torch; print('torch', torch.__version__)" >> "$out/machine.txt"
# LOAD=N: N busy loops beside the runs for their whole length (a loaded CI box), killed at exit
hogs=()
for _ in $(seq 1 "${LOAD:-0}"); do "$py" -c "while True: pass" & hogs+=($!); done
trap '[ ${#hogs[@]} -eq 0 ] || kill "${hogs[@]}" 2>/dev/null' EXIT
echo "load: ${LOAD:-0} busy loops beside the runs" >> "$out/machine.txt"
for kind in free locked serial; do
  for ms in 1 10; do
    "$py" -m racegate run --workload tests.step_length_workload:make_workload \
      --preset "$kind-${ms}ms" --strategies eager --devices "${DEVICES:-0}" --threads-per-device 2 --cache-states cold \
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
    met = "; ".join(
        " ".join(f"{t.get('steps_met_at_work')}/{t.get('steps_met')}" for t in r["threads"])
        for r in recs
    )
    print(f"{path.stem:12} {dict(counts)}  interleaved/at-work per thread: {each}")
    print(f"{'':12} met at work/met per thread: {met}")
PY
