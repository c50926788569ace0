#!/usr/bin/env bash
# Issue 21's GPU evidence in one device call on one H200 (≤ TOTAL_S = 520 s), parts in priority
# order, each under its own `timeout` and its own share of the time:
#   a. step ratio (~330 s): benchmarks/plain_step.py vs racegate's own step (`harness run`,
#      qwen3-8b-drafter, warmup_locked, 1 thread on GPU 0), A B B A A B (counterbalanced), up to
#      A_PAIRS=3 of each, as many as fit; torch.profiler tables of both (the plain one from its
#      first run, after its timed steps; racegate's from scripts/profile_step.py, per_device:
#      the same compiled step, one replica, no harness threads) after the second pair.
#   b. production strategy cost (~120 s): warmup_locked, warmup, processes at 2 threads on GPU 0,
#      `small`, rounds in rotated order (L W P, W P L, P L W), up to B_ROUNDS=3.
#   c. A/A + injected 5% for `small` (the rest, ~70 s: maybe none): benchmarks/ab_power_gpu.sh
#      with as many runs per side as fit; its pools (c-ab-power/small/*.jsonl) concatenate
#      across calls: PARTS=c gives a call of its own ~5-6 runs per side. PART_C_PRESET=
#      qwen3-8b-drafter pools the 8B (3 steps, ~72 s a run: 3 per side in a 555 s call).
#   d. (only when PARTS names it) part b for qwen3-8b-drafter, one run each (~4 min).
# Runs are alone on the GPU (one at a time; between parts the script waits for the GPU to be
# free). Every record is appended as it is made, so a call cut short keeps what ran.
#
#   OUT=<dir> bash benchmarks/gpu_evidence_21.sh          # from the repo root, on the GPU
#   PARTS="c" OUT=<dir> bash benchmarks/gpu_evidence_21.sh   # more A/A runs into the same pools
#   DRY=1 OUT=<dir> bash benchmarks/gpu_evidence_21.sh    # the same logic on CPU, tiny (~8 min
#                                                         # on a loaded 2-core box)
#   python3 benchmarks/summarise_21.py <dir>              # the tables (also written at the end)
#   PACK=$OUT/all.tar.gz OUT=$(mktemp -d) bash benchmarks/gpu_evidence_21.sh
#       # on the lent device, which returns at most 8 files: everything packed into one
#
# Steps: a racegate qwen3-8b run of 3 steady steps + 2 warm-up is ~45-50 s (the suite's 6 + 2
# took 52 s, 10 + 2 took 57-78 s, results/2026-11-30-h200x2*); its run-to-run spread is 0.02%,
# so 3 steps suffice. The plain step: batch 2 (racegate's micro-batch), 10 steps after 3.
# `small` in part b: 40 steps at 2 threads (~25 s a run); part c: 60 steps (~25-30 s a run).
# Part b and the racegate runs of part a use --schedule barrier --switch-interval 0.005 (Python's
# default GIL slice, as a trainer runs), not the race cases' 10 µs.
set -uo pipefail
: "${OUT:?set OUT to the folder that receives everything}"
mkdir -p "$OUT/logs" && OUT=$(cd "$OUT" && pwd) || exit 2
[[ -n ${PACK:-} ]] && trap 'tar czf "$PACK" -C "$OUT" .' EXIT
cd "$(dirname "$0")/.." || exit 2
PY=${PYTHON:-python3}
export PYTHON=$PY PYTHONUNBUFFERED=1
export TORCHINDUCTOR_COMPILE_THREADS=${TORCHINDUCTOR_COMPILE_THREADS:-2}
PARTS=${PARTS:-a b c}
T0=$SECONDS
DEADLINE=$((SECONDS + ${TOTAL_S:-520}))
# One cold run per process: on a GPU `harness run` defaults to all three cache states (three
# runs, two after a priming run), which cut this script's first call (exit 124).
TRAINER=(--schedule barrier --switch-interval 0.005 --repeat 1 --cache-states cold)
if [[ ${DRY:-0} == 1 ]]; then
  DEV=cpu
  PLAIN=(--tiny --device cpu --steps 3 --warmup 1); PLAIN_PROFILE_STEPS=1
  RG=(--preset tiny --devices cpu --strategy sdpa_dense --steps 3 --warmup-steps 1)
  RG_PROFILE=(--preset tiny --device cpu --warmup 1 --steps 1)
  B_PRESET=tiny; B_STEPS=3; B_WARMUP=1; D_PRESET=tiny
  C_PRESET=tiny; C_STEPS=3; C_STRATEGY=sdpa_dense; C_RUN_S=45; C_MAX_RUNS=2
  A_PAIRS=${A_PAIRS:-2}; B_ROUNDS=${B_ROUNDS:-1}
  BUDGET_A=${BUDGET_A:-300}; BUDGET_B=${BUDGET_B:-260}; BUDGET_D=${BUDGET_D:-200}
  EST_PLAIN=30; EST_RG=60; EST_PROF=60; EST_B=60; EST_D=60
else
  DEV=0
  PLAIN=(--device cuda:0 --batch "${PLAIN_BATCH:-2}" --steps 10 --warmup 3); PLAIN_PROFILE_STEPS=2
  RG=(--preset qwen3-8b-drafter --devices 0 --strategy warmup_locked --steps 3 --warmup-steps 2)
  RG_PROFILE=(--preset qwen3-8b-drafter --device cuda:0 --warmup 2 --steps 1)
  B_PRESET=small; B_STEPS=40; B_WARMUP=3; D_PRESET=qwen3-8b-drafter
  # A run's cost from process start to the next run's start (results/2026-12-02-h200-ab-power,
  # -ab-8b): small ~46 s, the 8B ~67 s with 2 warm-up steps (72 s taken here: ab_power_gpu.sh runs 3).
  # PART_C_PRESET=qwen3-8b-drafter pools the 8B instead.
  C_STRATEGY=warmup_locked; C_MAX_RUNS=50
  case ${PART_C_PRESET:-small} in
    small) C_PRESET=small; C_STEPS=60; C_RUN_S=46 ;;
    qwen3-8b-drafter) C_PRESET=qwen3-8b-drafter; C_STEPS=3; C_RUN_S=72 ;;
    *) echo "PART_C_PRESET=$PART_C_PRESET: use small or qwen3-8b-drafter" >&2; exit 2 ;;
  esac
  A_PAIRS=${A_PAIRS:-3}; B_ROUNDS=${B_ROUNDS:-3}
  BUDGET_A=${BUDGET_A:-330}; BUDGET_B=${BUDGET_B:-120}; BUDGET_D=${BUDGET_D:-300}
  EST_PLAIN=40; EST_RG=55; EST_PROF=60; EST_B=30; EST_D=90
fi

log() { echo "[$(date -u +%T) +$((SECONDS - T0))s] $*" | tee -a "$OUT/session.log"; }
# part NAME BUDGET: the part may run until PART_END (its budget, never past the call's deadline).
part() {
  PART_END=$((SECONDS + $2))
  ((PART_END > DEADLINE)) && PART_END=$DEADLINE
  log "part $1: begin, $((PART_END - SECONDS)) s"
}
fits() { ((PART_END - SECONDS >= $1)); }  # fits EST: a run of EST seconds fits in the part
# timed NAME LIMIT CMD...: CMD under timeout min(LIMIT, what is left of the part), output in
# logs/NAME.log; sets LAST_S (its wall seconds) and returns its exit status (124: cut).
timed() {
  local name=$1 limit=$2 left=$((PART_END - SECONDS)) t=$SECONDS rc
  shift 2
  ((limit > left)) && limit=$left
  if ((limit < 5)); then
    log "$name: not started (${left} s left in the part)"
    LAST_S=0
    return 125
  fi
  log "$name: start (limit ${limit} s): $*"
  timeout -k 10 "$limit" "$@" >"$OUT/logs/$name.log" 2>&1
  rc=$?
  LAST_S=$((SECONDS - t))
  log "$name: exit $rc after ${LAST_S} s"
  return $rc
}
max() { echo $(($1 > $2 ? $1 : $2)); }
gpu_idle() {  # wait ≤ 20 s for the GPU to hold no process (a run cut short may linger)
  [[ $DEV == cpu ]] && return 0
  local i apps
  for i in $(seq 20); do
    apps=$(nvidia-smi --query-compute-apps=pid,name --format=csv,noheader 2>/dev/null)
    [[ -z $apps ]] && return 0
    sleep 1
  done
  log "GPU not idle after 20 s: ${apps//$'\n'/; }"
}

{
  echo "date: $(date -u +%FT%TZ)"
  echo "commit: $(git rev-parse HEAD 2>/dev/null || echo unknown)"
  echo "dry: ${DRY:-0}  parts: $PARTS  total_s: ${TOTAL_S:-520}"
  "$PY" -c 'import sys, torch, transformers as t; print("python", sys.version.split()[0],
    "torch", torch.__version__, "transformers", t.__version__, "cuda", torch.version.cuda)'
  [[ $DEV == cpu ]] || nvidia-smi -L
} >>"$OUT/env.txt" 2>&1

# ---- a. the step ratio -------------------------------------------------------------------
profile_racegate() {
  fits "$EST_PROF" || { log "a: racegate profile not started (no time)"; return; }
  timed a-profile-racegate $((EST_PROF * 2)) "$PY" scripts/profile_step.py "${RG_PROFILE[@]}" \
    --strategy per_device --out "$A/profile-racegate.json" --table "$A/profile-racegate.txt"
  PROFILED=1
}
if [[ " $PARTS " == *" a "* ]]; then
  part a "$BUDGET_A"
  A=$OUT/a-step
  mkdir -p "$A"
  PROFILED=0
  for ((i = 1; i <= A_PAIRS; i++)); do
    sides=(plain racegate)
    ((i % 2 == 0)) && sides=(racegate plain)
    for side in "${sides[@]}"; do
      if [[ $side == plain ]]; then
        fits "$EST_PLAIN" || break 2
        extra=()
        ((i == 1)) && extra=(--profile-table "$A/profile-plain.txt" \
          --profile-steps "$PLAIN_PROFILE_STEPS")
        timed "a-plain-$i" $((EST_PLAIN * 3)) "$PY" benchmarks/plain_step.py "${PLAIN[@]}" \
          "${extra[@]}" --json "$A/plain-$i.json"
        rc=$?
        EST_PLAIN=$(max "$EST_PLAIN" "$LAST_S")
      else
        fits "$EST_RG" || break 2
        timed "a-racegate-$i" $((EST_RG * 3)) "$PY" -m harness run "${RG[@]}" \
          --threads-per-device 1 "${TRAINER[@]}" --timeout $((EST_RG * 3)) --out "$A/racegate.jsonl"
        rc=$?
        EST_RG=$(max "$EST_RG" "$LAST_S")
      fi
      echo "$i $side rc=$rc wall_s=$LAST_S" >>"$A/order.txt"
    done
    ((i == 2)) && profile_racegate
  done
  ((PROFILED)) || profile_racegate
  gpu_idle
fi

# ---- b. the production strategy's cost (d: the same for qwen3-8b-drafter) ----------------
strategy_cost() {  # strategy_cost PRESET ROUNDS STEPS WARMUP EST
  local preset=$1 rounds=$2 steps=$3 warmup=$4 est=$5 r s
  local rot=(warmup_locked warmup processes)
  for ((r = 0; r < rounds; r++)); do
    for k in 0 1 2; do
      s=${rot[$(((r + k) % 3))]}
      fits "$est" || return 0
      timed "b-$preset-$s-$((r + 1))" $((est * 3)) "$PY" -m harness run --preset "$preset" \
        --devices "$DEV" --threads-per-device 2 --strategy "$s" --steps "$steps" \
        --warmup-steps "$warmup" "${TRAINER[@]}" --timeout $((est * 3)) --out "$B/$preset.jsonl"
      rc=$?
      echo "$((r + 1)) $s rc=$rc wall_s=$LAST_S" >>"$B/$preset-order.txt"
      est=$(max "$est" "$LAST_S")
    done
  done
}
B=$OUT/b-strategy
if [[ " $PARTS " == *" b "* ]]; then
  part b "$BUDGET_B"
  mkdir -p "$B"
  strategy_cost "$B_PRESET" "$B_ROUNDS" "$B_STEPS" "$B_WARMUP" "$EST_B"
  gpu_idle
fi
if [[ " $PARTS " == *" d "* ]]; then
  part d "$BUDGET_D"
  mkdir -p "$B"
  strategy_cost "$D_PRESET" 1 3 "$B_WARMUP" "$EST_D"
  gpu_idle
fi

# ---- c. A/A and the injected 5% slowdown, as many runs as the rest of the call holds --------
if [[ " $PARTS " == *" c "* ]]; then
  part c $((DEADLINE - SECONDS))
  runs=$(((PART_END - SECONDS - 15) / (2 * C_RUN_S)))
  ((runs > C_MAX_RUNS)) && runs=$C_MAX_RUNS
  if ((runs < 2)); then
    log "c: not started: $((PART_END - SECONDS)) s left, 2 runs per side need $((4 * C_RUN_S)) s"
  else
    DEVICES=$DEV STRATEGY=$C_STRATEGY timed c-ab-power $((PART_END - SECONDS)) \
      bash benchmarks/ab_power_gpu.sh "$C_PRESET" "$runs" "$C_STEPS" "$OUT/c-ab-power"
  fi
  pool=$OUT/c-ab-power/$C_PRESET
  if [[ -s $pool/reference.jsonl && -s $pool/candidate.jsonl ]]; then
    # Again over the whole pools (also when the call above was cut before its own `power`).
    "$PY" -m harness.ab power --reference "$pool/reference.jsonl" \
      --candidate "$pool/candidate.jsonl" --per-side 2 >"$pool/power.txt" 2>&1
    rc=$?
    log "c: power over $(wc -l <"$pool/reference.jsonl") + $(wc -l <"$pool/candidate.jsonl") runs: exit $rc"
  fi
fi

"$PY" benchmarks/summarise_21.py "$OUT" >"$OUT/summary.md" 2>>"$OUT/session.log"
rc=$?
log "done: summary.md exit $rc"
