#!/usr/bin/env bash
# One device call on one H200: racegate's built-in 8B step (benchmarks/builtin_step.py,
# qwen3-8b-drafter, warmup_locked, one thread) against the independent step
# (benchmarks/independent_dflash_step.py), alone on the machine, each run in a fresh process,
# in the order SEQUENCE gives (default: P R R P, then the independent step with RoPE + q/k norm
# and with the mask built once). An arm is a letter, a tag and an optional 'p' (profile):
#   P1p  independent, profiled      Prope  + RoPE and q/k norm    Pfixed  mask built once
#   R1p  built-in step, profiled    B1     the built-in step of the model/ tree in .before/
#   H    one `harness run` of the built-in step (its record: tokens/s, peak memory, growth)
# builtin runs may take config overrides: BUILTIN_SET="micro_batch_size=1" (space-separated).
# A run starts only if BUDGET (default 480 s) still holds its worst case. Everything is packed
# into $OUT/all.tar.gz, summary.txt beside it.
#   OUT=<empty dir> [BUDGET=480] [SEQUENCE="P1p R1p R2 P2"] bash benchmarks/builtin_vs_independent.sh
set -uo pipefail
source "$(dirname "$0")/device_call.sh"  # $OUT, cd to the repo, $W (packed), log, scratch
scratch CACHE
export TORCHINDUCTOR_CACHE_DIR=$CACHE  # later runs reuse the first runs' compiled kernels
fits() {  # fits NEED WHAT
  local left=$((${BUDGET:-480} - (SECONDS - t0)))
  ((left >= $1)) && return 0
  log "$2: not started ($left s left, needs $1)"
  return 1
}
sets=()
for kv in ${BUILTIN_SET:-}; do sets+=(--set "$kv"); done
P() {  # P TAG [args...]
  local tag=$1
  shift
  fits 70 "independent $tag" || return 0
  timeout -k 5 120 python3 benchmarks/independent_dflash_step.py --json "$W/P-$tag.json" "$@" \
    >"$W/P-$tag.log" 2>&1
  log "independent $tag rc=$? $(tail -n 1 "$W/P-$tag.log")"
}
R() {  # R TAG TREE [args...]
  local tag=$1 tree=$2
  shift 2
  fits 110 "builtin $tag" || return 0
  (cd "$tree" && timeout -k 5 200 python3 benchmarks/builtin_step.py --json "$W/R-$tag.json" \
    "${sets[@]}" "$@" >"$W/R-$tag.log" 2>&1)
  log "builtin $tag ($tree) rc=$? $(tail -n 1 "$W/R-$tag.log")"
}
H() {
  fits 150 "harness run" || return 0
  timeout -k 5 145 python3 -m racegate run --preset qwen3-8b-drafter --devices 0 \
    --strategies warmup_locked --cache-states cold --threads-per-device 1 --steps 3 \
    --warmup-steps 2 --schedule barrier --switch-interval 0.005 --repeat 1 --run-timeout 130 \
    --results "$W/harness.jsonl" >"$W/harness.log" 2>&1
  log "harness run rc=$? $(python3 -c 'import json,sys; r=json.loads(open(sys.argv[1]).readlines()[-1])
print(r["outcome"], r.get("tokens_per_s"), r.get("peak_mem_bytes"), r.get("mem_growth"))' "$W/harness.jsonl" 2>&1)"
}
if [[ -d .before/model ]]; then  # the model/ of before a change, for B arms
  scratch BEFORE
  cp -a . "$BEFORE/tree" && rm -rf "$BEFORE/tree/model" && cp -a .before/model "$BEFORE/tree/model"
fi
for arm in ${SEQUENCE:-P1p R1p R2 P2 Prope Pfixed}; do
  prof=()
  tag=${arm:1}
  if [[ $tag == *p ]]; then tag=${tag%p}; fi
  [[ $arm == *p && $arm != Prope ]] && prof=(--profile "$W/${arm:0:1}-$tag-prof.json")
  [[ $arm == Prope ]] && prof=(--profile "$W/P-rope-prof.json")
  case $arm in
    Prope) P rope --rope-qk-norm "${prof[@]}" ;;
    Pfixed) P fixed --fixed-mask ;;
    P*) P "$tag" "${prof[@]}" ;;
    R*) R "$tag" . "${prof[@]}" ;;
    B*) R "before-$tag" "${BEFORE:?no .before/model}/tree" "${prof[@]}" ;;
    H) H ;;
    *) log "unknown arm $arm" ;;
  esac
done
python3 benchmarks/builtin_vs_independent.py "$W" | tee "$W/summary.txt"
