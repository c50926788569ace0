#!/usr/bin/env bash
# One device session's evidence on 2×H200 (issues 2, 3, 6): run from the repo root on the GPU
# host with OUT set. Every phase has its own time cap so the whole script ends in ~9.5 min and
# what it wrote under $OUT survives; a failed smoke run stops it early.
set -uo pipefail
export PYTHONUNBUFFERED=1
OUT="${OUT:?set OUT}"
R="python3 -m harness run"
log() { echo "[$(date +%T)] $*" | tee -a "$OUT/session.log"; }

log "env"; { nvidia-smi -L; python3 -c 'import sys,torch,transformers,triton;print(sys.version.split()[0],torch.__version__,transformers.__version__,triton.__version__,torch.cuda.device_count())'; nproc; } >>"$OUT/session.log" 2>&1

log "P1 smoke: small per_device 1 thread"
timeout 120 $R --preset small --devices 0 --strategy per_device --threads-per-device 1 --steps 3 --timeout 110 --out "$OUT/smoke.jsonl" >>"$OUT/session.log" 2>&1
if ! grep -q '"outcome": "ok"' "$OUT/smoke.jsonl" 2>/dev/null; then log "smoke failed; stopping"; exit 1; fi

log "P2 throughput, one job per GPU (each alone on its GPU)"
( timeout 170 $R --preset qwen3-8b-drafter --devices 0 --strategy per_device --threads-per-device 1 --steps 9 --warmup-steps 2 --timeout 160 --out "$OUT/throughput.jsonl" >>"$OUT/tp8b.log" 2>&1 ) &
( timeout 170 $R --preset small --devices 1 --strategy per_device,warmup --threads-per-device 1 --steps 15 --warmup-steps 2 --timeout 80 --out "$OUT/throughput.jsonl" >>"$OUT/tpsmall.log" 2>&1 ) &
wait
cat "$OUT/tp8b.log" "$OUT/tpsmall.log" >>"$OUT/session.log"

export TORCHINDUCTOR_COMPILE_THREADS=2  # 14 runs compile at once on 32 cores
log "P3 race outcomes on both GPUs (parallel runs: outcome counts only, not timing)"
timeout 290 $R --preset small --devices 0,1 --jobs 8 --timeout 240 --steps 8 --out "$OUT/race.jsonl" \
  --strategy per_device --threads-per-device 1,2 --schedule barrier,staggered --repeat 5 >>"$OUT/session.log" 2>&1 &
sleep 5
timeout 285 $R --preset small --devices 0,1 --jobs 4 --timeout 240 --steps 8 --out "$OUT/race.jsonl" \
  --strategy warmup,processes,nested_fx_off --threads-per-device 2 --schedule staggered --repeat 5 >>"$OUT/session.log" 2>&1 &
sleep 5
timeout 280 $R --preset small --devices 0,1 --jobs 2 --timeout 240 --steps 8 --out "$OUT/race.jsonl" \
  --strategy per_device,warmup --cache-state warm,deleted --threads-per-device 2 --schedule staggered --repeat 2 >>"$OUT/session.log" 2>&1 &
wait
log "done"
