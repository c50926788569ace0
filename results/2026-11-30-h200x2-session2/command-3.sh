#!/usr/bin/env bash
# Device call (2×H200), session 2, call 3: gpu_matrix cells through nox itself (issue 7),
# system torch × transformers 5.6.0 / 5.8.1 / 5.17.0 (the image's) / 5.24.0 (latest), run
# concurrently, offline wheelhouse. Reduced per cell to fit the device budget: per_device and
# warmup, cold cache, 2 threads/GPU on both GPUs, 3 runs each, the incident topology and the
# probes; throughput cases deselected (four cells share the machine: timings would be noise).
set -uo pipefail
export PYTHONUNBUFFERED=1 TORCHINDUCTOR_COMPILE_THREADS=2
OUT="${OUT:?set OUT}"
log() { echo "[$(date +%T)] $*" | tee -a "$OUT/session.log"; }
python3 -m pip install -q --no-index --no-deps --target /tmp/noxsite .whl/nox-*.whl .whl/argcomplete-*.whl \
  .whl/colorlog-*.whl .whl/dependency_groups-*.whl .whl/python_discovery-*.whl .whl/virtualenv-*.whl \
  .whl/distlib-*.whl .whl/platformdirs-*.whl >>"$OUT/session.log" 2>&1
export PYTHONPATH=/tmp/noxsite RACEGATE_WHEELHOUSE="$PWD/.whl" RACEGATE_RESULTS_DIR="$OUT/matrix"
log "gpu_matrix cells (system torch) × 5.6.0, 5.8.1, 5.17.0, 5.24.0"
for tf in 5.6.0 5.8.1 5.17.0 5.24.0; do
  timeout 540 python3 -m nox -s "gpu_matrix(torch='system', transformers='$tf')" -- \
    --strategies per_device,warmup --cache-states cold --threads-per-device 2 --repeat 3 \
    --run-timeout 90 -m "not throughput and (multi_gpu or not gpu)" \
    >"$OUT/nox-$tf.log" 2>&1 &
done
wait
log "done"
cd "$OUT/matrix" && for d in */; do tar -czf "../cell-${d%/}.tar.gz" "$d"; done; cd "$OUT" && rm -rf matrix
