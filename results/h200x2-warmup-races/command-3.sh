#!/usr/bin/env bash
# Device call (2×H200), session 2, call 3: gpu_matrix cells through nox itself (issue 7),
# system torch × transformers 5.6.0 / 5.8.1 / 5.17.0 (the image's) / 5.24.0 (latest), run
# concurrently, offline wheelhouse. Reduced per cell to fit the device budget: per_device and
# warmup, cold cache, 2 threads/GPU on both GPUs, 3 runs each, the incident topology and the
# probes; throughput cases deselected (four cells share the machine: timings would be noise).
# Recorded: call 3 ran this as scripts/gpu_evidence5.sh at commit b436e79, from the repo root,
# into the device's $OUT (call3/, the cell tarballs unpacked here). Moved here unchanged but for
# paths: the wheels it installs go to a private mktemp dir (a fixed name under the temp dir then),
# and it finds the repo root itself. As sent, its nox line also had `-f noxfile_gpu.py` (an
# uncommitted copy of b436e79's noxfile.py: another helper was editing noxfile.py then); the
# committed script never had it.
# Rerun from anywhere (options may have changed since that commit; carry .whl, the wheelhouse):
#   OUT=<empty dir> bash results/h200x2-warmup-races/command-3.sh
set -uo pipefail
export PYTHONUNBUFFERED=1 TORCHINDUCTOR_COMPILE_THREADS=2
OUT="$(cd "${OUT:?set OUT}" && pwd)" || exit 2
cd "$(dirname "$0")/../.."  # the repo root: every path below is relative to it
SITE="$(mktemp -d)"  # the carried wheels this call installs
log() { echo "[$(date +%T)] $*" | tee -a "$OUT/session.log"; }
python3 -m pip install -q --no-index --no-deps --target "$SITE" .whl/nox-*.whl .whl/argcomplete-*.whl \
  .whl/colorlog-*.whl .whl/dependency_groups-*.whl .whl/python_discovery-*.whl .whl/virtualenv-*.whl \
  .whl/distlib-*.whl .whl/platformdirs-*.whl >>"$OUT/session.log" 2>&1
export PYTHONPATH="$SITE" RACEGATE_WHEELHOUSE="$PWD/.whl" RACEGATE_RESULTS_DIR="$OUT/matrix"
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
