#!/usr/bin/env bash
# Issue 17's GPU evidence in one device call on one H200: the co-activity check
# (harness.judge.decide.coactive_shares) on real GPU runs, in priority order:
#   serial (~50 s): the built-in drafter with one lock around every step
#      (tests/serial_workload.py), `small`, 2 threads on cuda:0, warmup_locked and eager, cold,
#      SERIAL_REPEAT (2) runs each, side by side: every one must come out `not_concurrent`.
#   cell (~300 s): the race selection of one cell, `pytest cases -m "not throughput"` with the
#      image's torch and transformers (as `nox -s gpu_matrix` runs it, without nox: its wheels
#      are not carried), --devices 0, 2 threads, 3 runs per case, 8 cases at once: real passes
#      must stay passes.
#   8b (~110 s a run): qwen3-8b-drafter, warmup_locked, 2 threads on cuda:0, cold, one run of
#      the built-in workload, then one of the serial one, alone, each while 130 s are left.
# PARTS (default "serial cell") picks them, in that order. Records are appended as they land;
# summary.txt tabulates every thread's co-activity.
#   OUT=<empty dir> bash benchmarks/gpu_evidence_17.sh
#   PARTS="cell 8b" OUT=<empty dir> bash benchmarks/gpu_evidence_17.sh
#   then: tar xzf all.tar.gz -C results/<date>-h200-coactivity/ and read summary.txt
set -uo pipefail
source "$(dirname "$0")/device_call.sh"  # $OUT, cd to the repo, $W (packed), log, scratch
SERIAL=tests.serial_workload:make_workload
PARTS=${PARTS:-serial cell}
left() { echo $((${CALL_S:-560} - (SECONDS - t0))); }
has() { [[ " $PARTS " == *" $1 "* ]]; }

if has serial; then
  log "serial: start"
  timeout -s INT -k 10 150 python3 -m harness run --preset small --devices 0 \
    --strategies warmup_locked,eager --threads-per-device 2 --cache-states cold \
    --repeat "${SERIAL_REPEAT:-2}" --jobs 4 --run-timeout 120 --workload "$SERIAL" \
    --results "$W/serial.jsonl" >"$W/serial.log" 2>&1
  log "serial: exit $?"
fi
if has cell; then
  budget=$(($(left) - 15))
  has 8b && budget=${CELL_S:-320}
  log "cell: start (budget $budget s)"
  mkdir -p "$W/cell"
  timeout -s INT -k 20 "$budget" python3 -m pytest cases -m "not throughput" -n 8 --share-gpus \
    --case-jobs=8 --results="$W/cell/records.jsonl" --junitxml="$W/cell/junit-race.xml" \
    --devices 0 --threads-per-device 2 --repeat 3 --run-timeout 90 -rA -p no:benchmark \
    >"$W/cell/pytest.log" 2>&1
  log "cell: pytest exit $?"
fi
if has 8b; then
  for wl in "" "$SERIAL"; do
    if (($(left) < 130)); then
      log "8B ${wl:-built-in}: not started ($(left) s left)"
      continue
    fi
    log "8B ${wl:-built-in}: start ($(left) s left)"
    timeout -s INT -k 10 "$(($(left) - 5))" python3 -m harness run --preset qwen3-8b-drafter \
      --devices 0 --strategies warmup_locked --threads-per-device 2 --cache-states cold \
      --repeat 1 --steps 4 --warmup-steps 2 --run-timeout 240 ${wl:+--workload "$wl"} \
      --results "$W/8b${wl:+-serial}.jsonl" >>"$W/8b.log" 2>&1
    log "8B ${wl:-built-in}: exit $?"
  done
fi

python3 - "$W" >"$W/summary.txt" 2>&1 <<'PY'
import sys
from collections import defaultdict
from pathlib import Path
sys.path.insert(0, ".")
from harness.record import read_jsonl
rows = defaultdict(list)
for path in sorted(Path(sys.argv[1]).rglob("*.jsonl")):
    for rec in read_jsonl(path, skip_torn=True):
        sc = rec.scenario
        key = (path.stem, sc["preset"], sc["strategy"], sc.get("cache_state"), rec.outcome)
        rows[key].append([t.coactive_share for t in rec.threads])
print("file preset strategy cache outcome runs | co-activity per thread (min, max)")
for key, shares in sorted(rows.items(), key=str):
    vals = [s for run in shares for s in run if s is not None]
    none = sum(s is None for run in shares for s in run)
    span = f"{min(vals):.3f}-{max(vals):.3f}" if vals else "-"
    print(*key, len(shares), "|", span, f"({none} None)" if none else "")
PY
log "done"
