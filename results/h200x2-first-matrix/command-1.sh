#!/usr/bin/env bash
# One device call's evidence on 2×H200 (issues 2, 3, 5, 6, 11), from the repo root with OUT set
# and the wheelhouse carried in .whl. Each phase has a time cap so the whole script ends inside
# 10 min and what it wrote under $OUT survives.
# Recorded: call 1 ran this as scripts/gpu_evidence.sh at commit 14c7e9d, from the repo root, into
# the device's $OUT (this folder's call1-* files here). Moved here unchanged but for paths: the
# wheels it installs go to a private mktemp dir (a fixed name under the temp dir then), and it
# finds the repo root itself.
# Rerun from anywhere (options may have changed since that commit; carry .whl, the wheelhouse):
#   OUT=<empty dir> bash results/h200x2-first-matrix/command-1.sh
set -uo pipefail
export PYTHONUNBUFFERED=1
OUT="$(cd "${OUT:?set OUT}" && pwd)" || exit 2
cd "$(dirname "$0")/../.."  # the repo root: every path below is relative to it
SITE="$(mktemp -d)"  # the carried wheels this call installs
R="python3 -m harness run --preset small"
log() { echo "[$(date +%T)] $*" | tee -a "$OUT/session.log"; }

log "env"; { nvidia-smi -L; python3 -c 'import sys,torch,transformers,triton;print(sys.version.split()[0],torch.__version__,transformers.__version__,triton.__version__,torch.cuda.device_count())'; nproc; } >>"$OUT/session.log" 2>&1
python3 -m pip install -q --no-index --no-deps --target "$SITE" .whl/nox-*.whl .whl/argcomplete-*.whl .whl/colorlog-*.whl .whl/dependency_groups-*.whl .whl/python_discovery-*.whl .whl/virtualenv-*.whl .whl/distlib-*.whl .whl/platformdirs-*.whl >>"$OUT/session.log" 2>&1 &

log "P2 throughput: one job per GPU, each alone on its GPU"
( timeout 150 python3 -m harness run --preset qwen3-8b-drafter --devices 0 --strategy per_device --threads-per-device 1 --steps 6 --warmup-steps 2 --timeout 140 --out "$OUT/throughput.jsonl" ) >>"$OUT/session.log" 2>&1 &
( timeout 150 $R --devices 1 --strategy per_device,warmup --threads-per-device 1 --steps 15 --warmup-steps 2 --timeout 70 --out "$OUT/throughput.jsonl" ) >>"$OUT/session.log" 2>&1 &
wait

export TORCHINDUCTOR_COMPILE_THREADS=2  # ~16 runs compile at once on 32 cores
log "P3 race outcomes on both GPUs (parallel isolated runs: outcome counts, not timing)"
timeout 300 $R --devices 0,1 --jobs 9 --timeout 200 --steps 8 --out "$OUT/race.jsonl" \
  --strategy per_device --threads-per-device 1,2 --schedule barrier,staggered,recompile --repeat 3 >>"$OUT/session.log" 2>&1 &
timeout 300 $R --devices 0,1 --jobs 4 --timeout 200 --steps 8 --out "$OUT/race.jsonl" \
  --strategy warmup --threads-per-device 2 --schedule recompile,staggered --repeat 3 >>"$OUT/session.log" 2>&1 &
timeout 300 $R --devices 0,1 --jobs 2 --timeout 140 --steps 8 --out "$OUT/race.jsonl" \
  --strategy processes,nested_fx_off --threads-per-device 2 --schedule barrier --repeat 2 >>"$OUT/session.log" 2>&1 &
timeout 300 $R --devices 0,1 --jobs 2 --timeout 140 --steps 8 --out "$OUT/race.jsonl" \
  --strategy per_device --cache-state warm,deleted --threads-per-device 2 --schedule barrier >>"$OUT/session.log" 2>&1 &
log "P3 nox: one gpu_matrix cell through nox itself (system torch, offline wheelhouse)"
( export PYTHONPATH="$SITE" RACEGATE_WHEELHOUSE="$PWD/.whl" RACEGATE_RESULTS_DIR="$OUT/nox"
  timeout 300 python3 -m nox -s "gpu_matrix(torch='system', transformers='5.8.1')" -- \
    --strategies per_device,warmup --cache-states cold --threads-per-device 2 --schedule barrier ) >"$OUT/nox.log" 2>&1 &
wait
log "done"
