#!/usr/bin/env bash
# Device call (2×H200), session 2, call 1: issue 11's GPU detection rates at the suite's 10 µs
# switch interval (per_device, 1 and 2 threads/GPU, every schedule × 10 runs), the safe
# strategy ≥ 20 runs, and issue 3's processes (≥ 5) and deleted-cache runs.
# Runs overlap (--jobs) to fit the device budget: outcome counts only, no timings.
# Recorded: call 1 ran this as scripts/gpu_evidence3.sh at commit b436e79, from the repo root,
# into the device's $OUT (call1/ here). Moved here unchanged but for paths: it finds the repo root
# itself.
# Rerun from anywhere (options may have changed since that commit):
#   OUT=<empty dir> bash results/h200x2-warmup-races/command-1.sh
set -uo pipefail
export PYTHONUNBUFFERED=1 TORCHINDUCTOR_COMPILE_THREADS=2
OUT="$(cd "${OUT:?set OUT}" && pwd)" || exit 2
cd "$(dirname "$0")/../.."  # the repo root: every path below is relative to it
mkdir -p "$OUT/logs"
R="python3 -m harness run --preset small --devices 0,1 --steps 8 --switch-interval 1e-5"
log() { echo "[$(date +%T)] $*" | tee -a "$OUT/session.log"; }
log "$(python3 -c 'import torch, transformers, triton, sys; print(torch.__version__, transformers.__version__, triton.__version__, sys.version.split()[0])'); $(nvidia-smi -L | tr '\n' ' ')"

log "S1 per_device × {1,2} threads/GPU × {barrier,staggered,recompile} × 10 runs, --jobs 12"
timeout 370 $R --strategy per_device --threads-per-device 1,2 --schedule barrier,staggered,recompile \
  --repeat 10 --jobs 12 --timeout 80 --out "$OUT/stress.jsonl" >"$OUT/logs/s1.log" 2>&1
log "S1 exit $?"

log "S2 warmup × 20, processes × 5, deleted (per_device, warmup) × 3, concurrently"
timeout 175 $R --strategy warmup --threads-per-device 2 --schedule recompile --repeat 20 --jobs 10 \
  --timeout 120 --out "$OUT/warmup.jsonl" >"$OUT/logs/s2-warmup.log" 2>&1 &
timeout 175 $R --strategy processes --threads-per-device 2 --schedule barrier --repeat 5 --jobs 5 \
  --timeout 120 --out "$OUT/processes.jsonl" >"$OUT/logs/s2-processes.log" 2>&1 &
timeout 175 $R --strategy per_device,warmup --cache-state deleted --threads-per-device 1 \
  --schedule barrier --repeat 3 --jobs 6 --timeout 150 --out "$OUT/deleted.jsonl" >"$OUT/logs/s2-deleted.log" 2>&1 &
wait
log "S2 done"
tar -czf "$OUT/logs.tar.gz" -C "$OUT" logs && rm -rf "$OUT/logs"
