#!/usr/bin/env bash
# Session 4, call 4 (2×H200, code at 2214cb9): the second run of the two qwen3 cells call 3's
# budget cut, one lane per GPU at once. Reconstructed from README.md's description of the command
# as sent (the lanes' exact shell was not kept); lane0.log is cuda:0 × 5.6.0, lane1.log cuda:1 ×
# 5.24.0, qwen3/<cell>/ their records.
# Rerun from anywhere (options may have changed since that commit; carry .whl, the wheelhouse):
#   OUT=<empty dir> bash results/h200x2-transformers-matrix/command-4.sh
set -uo pipefail
export PYTHONUNBUFFERED=1 TORCHINDUCTOR_COMPILE_THREADS=2
OUT="$(cd "${OUT:?set OUT}" && pwd)" || exit 2
cd "$(dirname "$0")/../.."  # the repo root
SITE="$(mktemp -d)"  # nox and its dependencies, from the carried wheels
python3 -m pip install -q --no-index --no-deps --target "$SITE" .whl/nox-*.whl \
  .whl/argcomplete-*.whl .whl/colorlog-*.whl .whl/dependency_groups-*.whl \
  .whl/python_discovery-*.whl .whl/virtualenv-*.whl .whl/distlib-*.whl .whl/platformdirs-*.whl
lane() {  # lane <gpu> <transformers>
  env PYTHONPATH="$SITE" RACEGATE_WHEELHOUSE="$PWD/.whl" RACEGATE_RESULTS_DIR="$OUT/qwen3" \
    python3 -m nox -r -s "gpu_matrix(torch='system', transformers='$2')" \
    -- -m throughput -k "at_floor and warmup_locked and qwen3" --devices "$1" --repeat 1 -rA \
    >"$OUT/lane$1.log" 2>&1
}
lane 0 5.6.0 &
lane 1 5.24.0 &
wait
