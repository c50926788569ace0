#!/usr/bin/env bash
# Issue 20's GPU evidence in one device call on one H200 (nvidia-h200: 16 cores):
#   1. one gpu_matrix cell's one-GPU race selection through `nox -s gpu_matrix` itself, timed
#      whole (every GPU strategy × cold/warm/deleted × 2 threads on cuda:0, 3 runs per case,
#      the probes; the production case among them), at the host's own race workers
#      (noxfile.host_race_workers) unless RACE_WORKERS says otherwise: target ≤ 6 min;
#   2. in what is left of CALL_S: detection runs, 2 threads on cuda:0, 10 µs switch interval:
#      per_device warm in arms of DETECT_REPEAT (4) runs, each run priming its own cache
#      (--prime-each-run) or copying one shared priming run, counterbalanced (own shared shared
#      own), then singleton warm with own priming. CELL=0 skips part 1 (a call of detection).
#      Shared priming's warm rate (9/16, results/2026-12-02-h200-cell) came out below own
#      priming's (16/19) at p = 0.13: side by side on one host this tells whether the copy
#      makes a warm run less race-prone.
# Records are appended as they land. The device returns at most 8 files, so everything is
# written to a private dir and packed into $OUT/all.tar.gz at exit; $OUT/summary.txt holds the
# tables (also in the pack). Needs .whl carried (nox and its wheels for the image's python).
#   OUT=<empty dir> bash benchmarks/gpu_evidence_20.sh
#   then: tar xzf all.tar.gz -C results/<date>-h200-cell-…/ and read summary.txt
set -uo pipefail
source "$(dirname "$0")/device_call.sh"  # $OUT, cd to the repo, $W (packed), log, scratch
scratch SITE
python3 -m pip install -q --no-index --no-deps --target "$SITE" .whl/*.whl >>"$W/session.log" 2>&1 \
  || { log "cannot install .whl (carry it)"; exit 2; }

# ---- 1. the cell ------------------------------------------------------------------------
cell_t0=$SECONDS  # the cell's own clock: t0 (device_call.sh) also counts the wheel install
if [[ ${CELL:-1} != 0 ]]; then
  workers=()
  [[ -n ${RACE_WORKERS:-} ]] && workers=(RACEGATE_RACE_WORKERS="$RACE_WORKERS")
  log "cell: start (budget ${BUDGET:-420} s${RACE_WORKERS:+, $RACE_WORKERS race workers})"
  timeout -s INT -k 20 "${BUDGET:-420}" env PYTHONPATH="$SITE" RACEGATE_WHEELHOUSE="$PWD/.whl" \
    RACEGATE_RESULTS_DIR="$W/m" "${workers[@]}" \
    python3 -m nox -s "gpu_matrix(torch='system', transformers='5.17.0')" \
    -- -m "not throughput" --devices 0 --threads-per-device 2 --repeat 3 --run-timeout 90 -rA \
    >"$W/nox.log" 2>&1
  log "cell: nox exit $? after $((SECONDS - cell_t0)) s"
fi
cell_s=$((SECONDS - cell_t0))

# ---- 2. detection -----------------------------------------------------------------------
detect() {  # detect STRATEGIES STATES [harness run options]
  local left=$((${CALL_S:-570} - (SECONDS - t0)))
  if ((left < 60)); then
    log "detection $1 $2 ${*:3}: not started ($left s left)"
    return
  fi
  log "detection $1 $2 ${*:3}: start ($left s left)"
  timeout -s INT -k 10 "$left" python3 -m harness run --preset small --devices 0 \
    --strategies "$1" --threads-per-device 2 --cache-states "$2" --switch-interval 1e-5 \
    --run-timeout 80 --jobs "${JOBS:-8}" --repeat "${DETECT_REPEAT:-4}" \
    --results "$W/detection.jsonl" "${@:3}" \
    >>"$W/detection.log" 2>&1
  log "detection $1 $2 ${*:3}: exit $?"
}
for arm in own shared shared own; do
  if [[ $arm == own ]]; then detect per_device warm --prime-each-run; else detect per_device warm; fi
done
detect singleton warm --prime-each-run

# ---- the tables -------------------------------------------------------------------------
python3 - "$W" "$cell_s" >"$W/summary.txt" 2>&1 <<'PY'
import statistics, sys
from collections import defaultdict
from pathlib import Path
sys.path.insert(0, ".")
from harness.record import read_jsonl
w, cell_s = Path(sys.argv[1]), sys.argv[2]
print(f"cell wall: {cell_s} s (nox.log has the verdict block)")
for title, paths in (("cell", sorted(w.glob("m/**/*.jsonl"))), ("detection", [w / "detection.jsonl"])):
    rows = defaultdict(list)
    for p in paths:
        if p.exists():
            for r in read_jsonl(p):
                primed = "" if r.scenario["cache_state"] == "cold" else (
                    " (shared priming)" if r.cache.get("prime_copied") else " (own priming)")
                rows[(r.scenario["strategy"], r.scenario["cache_state"] + primed)].append(r)
    print(f"\n{title}\n\n| strategy | cache | runs | failed | outcomes | stall-called | busy at deadline | walls (s) |")
    print("|---|---|---|---|---|---|---|---|")
    for (s, c), recs in sorted(rows.items()):
        bad = [r for r in recs if r.outcome != "ok"]
        kinds = defaultdict(int)
        for r in bad:
            kinds[r.outcome] += 1
        walls = sorted(round(r.wall_s) for r in recs)
        print(f"| {s} | {c} | {len(recs)} | {len(bad)} | "
              f"{', '.join(f'{k} {v}' for k, v in sorted(kinds.items())) or '-'} | "
              f"{sum(r.stalled_s is not None for r in recs)} | "
              f"{sum(bool(r.busy_at_deadline) for r in recs)} | "
              f"{walls[0]}–{walls[-1]} (median {statistics.median(walls):.0f}) |")
# Issue 17's evidence on a GPU: the threads' CPU demand over their steady steps, summed per
# run (a whole-step lock keeps it at ≤ 1 core; on CPU concurrent runs summed 1.5-1.8).
print("\nsteady CPU demand of clean 2-thread runs, summed over threads (cores): min / median / max")
sums = defaultdict(list)
for p in [*sorted(w.glob("m/**/*.jsonl")), w / "detection.jsonl"]:
    if p.exists():
        for r in read_jsonl(p):
            shares = [t.demand_share for t in r.threads]
            if r.outcome == "ok" and len(shares) == 2 and None not in shares:
                sums[r.scenario["strategy"]].append(sum(shares))
for s, v in sorted(sums.items()):
    print(f"  {s}: {min(v):.2f} / {statistics.median(v):.2f} / {max(v):.2f} ({len(v)} runs)")
PY
grep -E "racegate verdict|^  (SAFE|UNSAFE|MASKED|INCONCLUSIVE|NOT RUN)|^(SAFE|UNSAFE|UNDECIDED):|passed|failed" \
  "$W/nox.log" | tail -30 >>"$W/summary.txt"
cat "$W/summary.txt"
