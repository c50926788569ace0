#!/usr/bin/env bash
# Session 4, one device call (2×H200, ≤ 10 min): per-cell throughput for issue 7, through
# `nox -s gpu_matrix` itself. The production strategy (warmup_locked) at 1 thread on one GPU,
# `small` (3 runs) and `qwen3-8b-drafter` (2 runs: 0.02% run to run in session 2), gated by the
# suite against baselines/h200x2.json. Two lanes, one job per GPU at a time: cuda:0 runs two
# transformers cells, cuda:1 the other two. qwen3-8b-drafter's step is GPU-bound (device ~100%
# busy, session 3's profile), so a job on the other GPU leaves its tokens/s alone; `small`'s is
# host-bound and may move with the other lane's compiles (that is said beside its numbers).
# Recorded: call 3 ran this as scripts/gpu_evidence10.sh at commit 2214cb9, from the repo root,
# into the device's $OUT (call3/, throughput.tar.gz unpacked here). Moved here unchanged but for
# paths: the wheels it installs go to a private mktemp dir (a fixed name under the temp dir then),
# and it finds the repo root itself; its work dir is a private mktemp dir too.
# Rerun from anywhere (options may have changed since that commit; carry .whl, the wheelhouse):
#   OUT=<empty dir> bash results/h200x2-transformers-matrix/command-3.sh
set -uo pipefail
export PYTHONUNBUFFERED=1 TORCHINDUCTOR_COMPILE_THREADS=2
OUT="$(cd "${OUT:?set OUT}" && pwd)" || exit 2
cd "$(dirname "$0")/../.."  # the repo root: every path below is relative to it
SITE="$(mktemp -d)"  # the carried wheels this call installs
WORK="$(mktemp -d)"  # the cells' results, packed into $OUT at the end
mkdir -p "$WORK"
log() { echo "[$(date +%T)] $*" | tee -a "$OUT/session.log"; }
python3 -m pip install -q --no-index --no-deps --target "$SITE" .whl/nox-*.whl \
  .whl/argcomplete-*.whl .whl/colorlog-*.whl .whl/dependency_groups-*.whl \
  .whl/python_discovery-*.whl .whl/virtualenv-*.whl .whl/distlib-*.whl .whl/platformdirs-*.whl \
  >>"$OUT/session.log" 2>&1

cell() {  # cell <gpu> <transformers> <preset> <repeat>
  local gpu=$1 v=$2 preset=$3 repeat=$4
  [ -e "$WORK/stop" ] && return
  log "cuda:$gpu transformers $v $preset x$repeat: start"
  env PYTHONPATH="$SITE" RACEGATE_WHEELHOUSE="$PWD/.whl" RACEGATE_RESULTS_DIR="$WORK/$preset" \
    python3 -m nox -r -s "gpu_matrix(torch='system', transformers='$v')" \
    -- -m throughput -k "at_floor and warmup_locked and $preset" --devices "$gpu" \
    --repeat "$repeat" -rA >>"$WORK/lane$gpu.log" 2>&1
  log "cuda:$gpu transformers $v $preset x$repeat: nox exit $?"
}
lane() {  # lane <gpu> <transformers>...
  local gpu=$1 v; shift
  for v in "$@"; do cell "$gpu" "$v" small 3; cell "$gpu" "$v" qwen3 2; done
}
lane 0 5.8.1 5.6.0 & L0=$!
lane 1 5.17.0 5.24.0 & L1=$!
# At the budget no new cell starts and the running nox gets SIGINT; what ran is kept.
( sleep "${BUDGET:-560}"; log "budget reached: stopping"; touch "$WORK/stop"; pkill -INT -f "nox -r -s gpu_matrix" ) &
WATCH=$!
wait $L0 $L1
kill $WATCH 2>/dev/null
tar czf "$OUT/throughput.tar.gz" -C "$WORK" . && log "packed $(find "$WORK" -type f | wc -l) files"
cp "$WORK"/lane*.log "$OUT/" 2>/dev/null
log "done"
