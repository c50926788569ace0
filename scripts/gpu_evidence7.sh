#!/usr/bin/env bash
# NOT RUN YET — next device call B (2×H200), ≤ 10 min: does warmup_locked (warmup + one lock
# around the compiled call) keep the spurious cache misses away, and what does the lock cost?
#   1. outcome counts under load: warmup and warmup_locked, 2 GPUs × 2 threads, recompile,
#      10 µs, 20 runs each, 10 at a time (tokens/s invalid here);
#   2. cost: the same scenario alone, one run at a time, 3 runs each (the lock is contended
#      only with several threads, so the 1-thread throughput gate cannot show it);
#   0. first, alone: where qwen3-8b-drafter's step time goes (issue 6: what limits its MFU).
set -uo pipefail
export PYTHONUNBUFFERED=1 TORCHINDUCTOR_COMPILE_THREADS=2
OUT="${OUT:?set OUT}"
mkdir -p "$OUT/logs"
R="python3 -m harness run --preset small --devices 0,1 --steps 8 --switch-interval 1e-5 --threads-per-device 2 --schedule recompile"
log() { echo "[$(date +%T)] $*" | tee -a "$OUT/session.log"; }

log "profile: qwen3-8b-drafter per_device on cuda:0, 3 steady steps"
timeout 100 python3 scripts/profile_step.py --preset qwen3-8b-drafter --device cuda:0 --steps 3 \
  --out "$OUT/profile-8b.json" >"$OUT/logs/profile.log" 2>&1
log "outcomes under load: warmup, warmup_locked × 20"
timeout 240 $R --strategy warmup,warmup_locked --repeat 20 --jobs 10 --timeout 120 \
  --out "$OUT/load.jsonl" >"$OUT/logs/load.log" 2>&1
log "cost: warmup, warmup_locked × 3 alone, 40 steady steps"
timeout 230 $R --strategy warmup,warmup_locked --repeat 3 --steps 40 --timeout 80 \
  --out "$OUT/alone.jsonl" >"$OUT/logs/alone.log" 2>&1
log "done"
tar -czf "$OUT/logs.tar.gz" -C "$OUT" logs && rm -rf "$OUT/logs"
