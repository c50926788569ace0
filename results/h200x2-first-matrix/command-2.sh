#!/usr/bin/env bash
# Second device call (2×H200): why barrier runs hang (stacks), the fixed processes/warm paths,
# more recompile-schedule runs for the detection rate, and one gpu_matrix cell through nox.
# Recorded: call 2 ran this as scripts/gpu_evidence2.sh at commit 639417a, from the repo root,
# into the device's $OUT (this folder's call2-* files and nox-gpu_matrix-system-5.8.1/ (its nox/
# and nox.log) here). Moved here unchanged but for paths: the wheels it installs go to a private
# mktemp dir (a fixed name under the temp dir then), and it finds the repo root itself.
# Rerun from anywhere (options may have changed since that commit; carry .whl, the wheelhouse):
#   OUT=<empty dir> bash results/h200x2-first-matrix/command-2.sh
set -uo pipefail
export PYTHONUNBUFFERED=1 TORCHINDUCTOR_COMPILE_THREADS=2
OUT="$(cd "${OUT:?set OUT}" && pwd)" || exit 2
cd "$(dirname "$0")/../.."  # the repo root: every path below is relative to it
SITE="$(mktemp -d)"  # the carried wheels this call installs
R="python3 -m harness run --preset small --devices 0,1 --steps 8"
log() { echo "[$(date +%T)] $*" | tee -a "$OUT/session.log"; }
python3 -m pip install -q --no-index --no-deps --target "$SITE" .whl/nox-*.whl .whl/argcomplete-*.whl .whl/colorlog-*.whl .whl/dependency_groups-*.whl .whl/python_discovery-*.whl .whl/virtualenv-*.whl .whl/distlib-*.whl .whl/platformdirs-*.whl >>"$OUT/session.log" 2>&1

log "P1 barrier 2 threads/GPU with stacks; processes; warm; nested_fx_off 1 thread/GPU"
timeout 140 $R --jobs 2 --timeout 110 --out "$OUT/race2.jsonl" --strategy per_device --threads-per-device 2 --schedule barrier --repeat 2 >>"$OUT/session.log" 2>&1 &
timeout 140 $R --jobs 2 --timeout 110 --out "$OUT/race2.jsonl" --strategy processes --threads-per-device 2 --schedule barrier --repeat 2 >>"$OUT/session.log" 2>&1 &
timeout 140 $R --jobs 1 --timeout 110 --out "$OUT/race2.jsonl" --strategy per_device --cache-state warm --threads-per-device 1 --schedule barrier >>"$OUT/session.log" 2>&1 &
timeout 140 $R --jobs 2 --timeout 110 --out "$OUT/race2.jsonl" --strategy nested_fx_off --threads-per-device 1 --schedule barrier,recompile >>"$OUT/session.log" 2>&1 &
wait
log "P2 recompile schedule detection rate + nox cell"
timeout 250 $R --jobs 7 --timeout 110 --out "$OUT/race2.jsonl" --strategy per_device --threads-per-device 1,2 --schedule recompile --repeat 7 >>"$OUT/session.log" 2>&1 &
( export PYTHONPATH="$SITE" RACEGATE_WHEELHOUSE="$PWD/.whl" RACEGATE_RESULTS_DIR="$OUT/nox"
  timeout 250 python3 -m nox -s "gpu_matrix(torch='system', transformers='5.8.1')" -- \
    --strategies per_device,warmup --cache-states cold --threads-per-device 2 --schedule recompile ) >"$OUT/nox.log" 2>&1 &
wait
log "done"
