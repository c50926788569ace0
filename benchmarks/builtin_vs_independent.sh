#!/usr/bin/env bash
# One device call on one H200: racegate's built-in 8B step (benchmarks/builtin_step.py,
# qwen3-8b-drafter, warmup_locked, one thread) against the independent step
# (benchmarks/independent_dflash_step.py), alone on the machine, interleaved P R R P, each in
# a fresh process; the first P and R write kernel profiles. Then the independent step with
# RoPE + q/k norm (the real drafter's extra work), and with the mask built once, and any
# built-in variants named in BUILTIN_VARIANTS ("micro_batch_size=1;..."; each a --set list,
# space-separated). A run starts only if BUDGET (default 480 s) still holds its worst case.
# Everything is packed into $OUT/all.tar.gz, summary.txt beside it.
#   OUT=<empty dir> [BUDGET=480] [BUILTIN_VARIANTS=...] bash benchmarks/builtin_vs_independent.sh
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
P() {  # P TAG [args...]
  local tag=$1
  shift
  fits 70 "independent $tag" || return 0
  timeout -k 5 120 python3 benchmarks/independent_dflash_step.py --json "$W/P-$tag.json" "$@" \
    >"$W/P-$tag.log" 2>&1
  log "independent $tag rc=$? $(tail -n 1 "$W/P-$tag.log")"
}
R() {  # R TAG [args...]
  local tag=$1
  shift
  fits 110 "builtin $tag" || return 0
  timeout -k 5 200 python3 benchmarks/builtin_step.py --json "$W/R-$tag.json" "$@" \
    >"$W/R-$tag.log" 2>&1
  log "builtin $tag rc=$? $(tail -n 1 "$W/R-$tag.log")"
}
P 1 --profile "$W/P-1-prof.json"
R 1 --profile "$W/R-1-prof.json"
R 2
P 2
P rope --rope-qk-norm --profile "$W/P-rope-prof.json"
P fixed --fixed-mask
i=0
IFS=';' read -ra variants <<<"${BUILTIN_VARIANTS:-}"
for v in "${variants[@]}"; do
  i=$((i + 1))
  sets=()
  for kv in $v; do sets+=(--set "$kv"); done
  R "v$i" "${sets[@]}"
done
python3 benchmarks/builtin_vs_independent.py "$W" | tee "$W/summary.txt"
