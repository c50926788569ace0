#!/usr/bin/env bash
# Sessions 3 and 4, one device call (2×H200, ≤ 10 min) per full gpu_matrix race cell (issue 7),
# through `nox -s gpu_matrix` itself: every GPU strategy × cold/warm/deleted × 1 and 2 threads
# per GPU on both GPUs, 3 repeats, the incident topology and the probes, 16 cases at a time
# (RACEGATE_RACE_WORKERS=16: the cell's split path, pytest-xdist --share-gpus; outcome counts
# are valid, timings are not, so the throughput cases are deselected here and run one job per
# GPU by command-3.sh).
# (session 3 passed `-n 16 --share-gpus` itself; session 4 goes through the split path).
# PROFILE=1 also re-runs the step profiler for qwen3-8b-drafter on cuda:0 alongside.
# Recorded: calls 1 (argument 5.17.0) and 2 (5.24.0) ran this as scripts/gpu_evidence9.sh at
# commit 2214cb9, from the repo root, into the device's $OUT (call1/ and call2/ here). Moved here
# unchanged but for paths: the wheels it installs go to a private mktemp dir (a fixed name under
# the temp dir then), and it finds the repo root itself.
# Rerun from anywhere (options may have changed since that commit; carry .whl, the wheelhouse):
#   OUT=<empty dir> bash results/h200x2-transformers-matrix/command-1-2.sh 5.17.0
set -uo pipefail
export PYTHONUNBUFFERED=1 TORCHINDUCTOR_COMPILE_THREADS=2
OUT="$(cd "${OUT:?set OUT}" && pwd)" || exit 2
cd "$(dirname "$0")/../.."  # the repo root: every path below is relative to it
SITE="$(mktemp -d)"  # the carried wheels this call installs
V="${1:?transformers version}"
log() { echo "[$(date +%T)] $*" | tee -a "$OUT/session.log"; }
python3 -m pip install -q --no-index --no-deps --target "$SITE" .whl/nox-*.whl \
  .whl/argcomplete-*.whl .whl/colorlog-*.whl .whl/dependency_groups-*.whl \
  .whl/python_discovery-*.whl .whl/virtualenv-*.whl .whl/distlib-*.whl .whl/platformdirs-*.whl \
  >>"$OUT/session.log" 2>&1
if [ "${PROFILE:-0}" = 1 ]; then
  log "profile qwen3-8b-drafter on cuda:0 (alongside the matrix)"
  timeout 200 python3 scripts/profile_step.py --preset qwen3-8b-drafter --device cuda:0 --steps 3 \
    --out "$OUT/profile-8b.json" >"$OUT/profile-8b.log" 2>&1 &
fi
log "gpu_matrix transformers $V"
timeout -s INT -k 20 "${BUDGET:-540}" env PYTHONPATH="$SITE" RACEGATE_WHEELHOUSE="$PWD/.whl" \
  RACEGATE_RESULTS_DIR="$OUT/matrix" RACEGATE_RACE_WORKERS=16 \
  python3 -m nox -s "gpu_matrix(torch='system', transformers='$V')" \
  -- -m "not throughput and (multi_gpu or not gpu)" --repeat 3 \
  --run-timeout 120 -rA >"$OUT/nox-$V.log" 2>&1
log "nox exit $?"
wait
log "done"
