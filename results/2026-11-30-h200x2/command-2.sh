#!/usr/bin/env bash
# Second device call (2×H200): why barrier runs hang (stacks), the fixed processes/warm paths,
# more recompile-schedule runs for the detection rate, and one gpu_matrix cell through nox.
set -uo pipefail
export PYTHONUNBUFFERED=1 TORCHINDUCTOR_COMPILE_THREADS=2
OUT="${OUT:?set OUT}"
R="python3 -m harness run --preset small --devices 0,1 --steps 8"
log() { echo "[$(date +%T)] $*" | tee -a "$OUT/session.log"; }
python3 -m pip install -q --no-index --no-deps --target /tmp/noxsite .whl/nox-*.whl .whl/argcomplete-*.whl .whl/colorlog-*.whl .whl/dependency_groups-*.whl .whl/python_discovery-*.whl .whl/virtualenv-*.whl .whl/distlib-*.whl .whl/platformdirs-*.whl >>"$OUT/session.log" 2>&1

log "P1 barrier 2 threads/GPU with stacks; processes; warm; nested_fx_off 1 thread/GPU"
timeout 140 $R --jobs 2 --timeout 110 --out "$OUT/race2.jsonl" --strategy per_device --threads-per-device 2 --schedule barrier --repeat 2 >>"$OUT/session.log" 2>&1 &
timeout 140 $R --jobs 2 --timeout 110 --out "$OUT/race2.jsonl" --strategy processes --threads-per-device 2 --schedule barrier --repeat 2 >>"$OUT/session.log" 2>&1 &
timeout 140 $R --jobs 1 --timeout 110 --out "$OUT/race2.jsonl" --strategy per_device --cache-state warm --threads-per-device 1 --schedule barrier >>"$OUT/session.log" 2>&1 &
timeout 140 $R --jobs 2 --timeout 110 --out "$OUT/race2.jsonl" --strategy nested_fx_off --threads-per-device 1 --schedule barrier,recompile >>"$OUT/session.log" 2>&1 &
wait
log "P2 recompile schedule detection rate + nox cell"
timeout 250 $R --jobs 7 --timeout 110 --out "$OUT/race2.jsonl" --strategy per_device --threads-per-device 1,2 --schedule recompile --repeat 7 >>"$OUT/session.log" 2>&1 &
( export PYTHONPATH=/tmp/noxsite RACEGATE_WHEELHOUSE="$PWD/.whl" RACEGATE_RESULTS_DIR="$OUT/nox"
  timeout 250 python3 -m nox -s "gpu_matrix(torch='system', transformers='5.8.1')" -- \
    --strategies per_device,warmup --cache-states cold --threads-per-device 2 --schedule recompile ) >"$OUT/nox.log" 2>&1 &
wait
log "done"
