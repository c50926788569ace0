#!/usr/bin/env bash
# One device call (nvidia-h200: one H200, 16 cores): one gpu_matrix cell's one-GPU race selection
# through `nox -s gpu_matrix` itself, after the fail-closed (issue 17) and calibrated-verdict
# (issues 19, 22) changes: every GPU strategy × cold/warm/deleted × 2 threads on cuda:0 (one
# thread in total is no race case any more), the positive control per_device's runs side by side
# (--case-jobs), then the production strategy's runs as many as the control's rate asks for, and
# the probes. The pytest verdict block ends the production wave's output (nox.log).
# Run from anywhere, carrying .whl (nox and its wheels, see results/h200x2-transformers-matrix):
#   OUT=<empty dir> bash results/h200-cell-fail-closed/command.sh
set -uo pipefail
export PYTHONUNBUFFERED=1 TORCHINDUCTOR_COMPILE_THREADS=2
OUT="$(cd "${OUT:?set OUT}" && pwd)" || exit 2
cd "$(dirname "$0")/../.."  # the repo root
SITE="$(mktemp -d)"
python3 -m pip install -q --no-index --no-deps --target "$SITE" .whl/*.whl >"$OUT/session.log" 2>&1
nvidia-smi -L >>"$OUT/session.log"
t0=$SECONDS
timeout -s INT -k 20 "${BUDGET:-530}" env PYTHONPATH="$SITE" RACEGATE_WHEELHOUSE="$PWD/.whl" \
  RACEGATE_RESULTS_DIR="$OUT/m" RACEGATE_RACE_WORKERS=16 RACEGATE_CASE_JOBS=8 \
  python3 -m nox -s "gpu_matrix(torch='system', transformers='5.17.0')" \
  -- -m "not throughput" --devices 0 --threads-per-device 2 --repeat 3 --run-timeout 90 -rA \
  >"$OUT/nox.log" 2>&1
echo "nox exit $? after $((SECONDS - t0)) s" | tee -a "$OUT/session.log"
grep -E "racegate verdict|^  (SAFE|UNSAFE|MASKED|INCONCLUSIVE|NOT RUN)|^(PASS|FAIL|UNDECIDED):|passed|failed" \
  "$OUT/nox.log" | tail -40
