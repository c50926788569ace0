#!/usr/bin/env bash
# Session 3, device call A (2×H200), ≤ 10 min: what issue 6 still lacks.
#   1. where the step time goes (profiler): qwen3-8b-drafter on cuda:0, small on cuda:1;
#   2. small's run-to-run spread with nothing else on the machine (session 2 measured it while
#      a qwen3-8b run shared the host), through the suite's own throughput case, 3 runs;
#   3. the floor the nested_fx_off gate's throughput leg needs (JUDGED_BY: warmup at the gate's
#      own scenario: 2 GPUs × 1 thread, recompile, 10 µs), written by `harness baseline --update`;
#   4. the nested_fx_off gate case, twice, against that floor.
# Recorded: call 1 ran this as scripts/gpu_evidence8.sh at commit 4a4eacf, from the repo root,
# into the device's $OUT (call1/, logs/ packed as logs.tar.gz here). Moved here unchanged but for
# paths: it finds the repo root itself.
# Rerun from anywhere (options may have changed since that commit):
#   OUT=<empty dir> bash results/h200x2-warmup-locked-production/command-1.sh
set -uo pipefail
export PYTHONUNBUFFERED=1 TORCHINDUCTOR_COMPILE_THREADS=2
OUT="$(cd "${OUT:?set OUT}" && pwd)" || exit 2
cd "$(dirname "$0")/../.."  # the repo root: every path below is relative to it
mkdir -p "$OUT/logs"
L="$OUT/logs"
P="python3 -m pytest -p no:cacheprovider -rA"
log() { echo "[$(date +%T)] $*" | tee -a "$OUT/session.log"; }
nvidia-smi -L >>"$OUT/session.log"

log "1. profile: qwen3-8b-drafter on cuda:0 and small on cuda:1, side by side"
timeout 170 python3 scripts/profile_step.py --preset qwen3-8b-drafter --device cuda:0 --steps 3 \
  --out "$OUT/profile-8b.json" >"$L/profile-8b.log" 2>&1 &
timeout 170 python3 scripts/profile_step.py --preset small --device cuda:1 --warmup 5 --steps 20 \
  --out "$OUT/profile-small.json" >"$L/profile-small.log" 2>&1 &
wait
log "2. small per_device throughput alone, 3 runs (the suite's case)"
timeout 200 $P cases/test_throughput.py -m throughput -k "at_floor and small and per_device" \
  --devices 0 --repeat 3 --results "$OUT/tp-small-alone.jsonl" >"$L/tp-small-alone.log" 2>&1
log "   exit $?"
log "3. floor small/warmup/2x1/recompile at 10 us, 3 runs, then baseline --update (tolerance 25%)"
timeout 170 python3 -m harness run --preset small --devices 0,1 --strategy warmup \
  --threads-per-device 1 --schedule recompile --switch-interval 1e-5 --steps 150 --warmup-steps 2 \
  --repeat 3 --timeout 55 --out "$OUT/floor-2x1.jsonl" >"$L/floor.log" 2>&1
log "   exit $?"
python3 -m harness baseline --update "$OUT/floor-2x1.jsonl" --tolerance 0.25 >>"$L/floor.log" 2>&1
cp baselines/h200x2.json "$OUT/h200x2.json"
log "4. nested_fx_off gate case × 2"
for i in 1 2; do
  timeout 100 $P cases/test_throughput.py -k nested_fx_off --devices 0,1 --run-timeout 80 \
    --results "$OUT/gates.jsonl" >"$L/nested-$i.log" 2>&1
  log "   nested_fx_off gate run $i exit $?"
done
log "done"
tar -czf "$OUT/logs.tar.gz" -C "$OUT" logs && rm -rf "$OUT/logs"
