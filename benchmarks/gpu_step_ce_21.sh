#!/usr/bin/env bash
# Issue 21, part 3, on one H200: what the float32 upcast of the logits before the
# cross-entropy costs. SpecForge's open DFlash trainer computes F.cross_entropy on the lm_head's
# bf16 output, so the upcast is cost without fidelity. Run at 4d84119, when model/loss.py still
# upcast (results/2026-12-02-h200-step-ce: bf16 ran 1.079x in racegate's step); since then
# model/loss.py keeps bf16, and the float32 arm is a copy that puts the `.float()` back. Alone
# on the machine, counterbalanced (P32 PBF R32 RBF RBF R32 PBF P32):
#   P32 / PBF: benchmarks/plain_step.py at one sequence, --ce-dtype float32 / model;
#   R32 / RBF: racegate's qwen3-8b-drafter (`harness run`, warmup_locked, 1 thread, cold) from
#              a copy whose model/loss.py upcasts / from this tree.
# The last PBF and P32 runs write a profile table. Everything is packed into $OUT/all.tar.gz
# (the device returns at most 8 files), summary.txt beside it.
#   OUT=<empty dir> [BUDGET=540] bash benchmarks/gpu_step_ce_21.sh
set -uo pipefail
source "$(dirname "$0")/device_call.sh"  # $OUT, cd to the repo, $W (packed), log, scratch
mkdir -p "$W/logs"
scratch F32
cp -a . "$F32/tree"
sed -i 's/logits_CV = hidden_CH @ lm_head_VH.t()$/logits_CV = (hidden_CH @ lm_head_VH.t()).float()/' \
  "$F32/tree/model/loss.py"
if ! grep -q '\.float()$' <(grep 'logits_CV = ' "$F32/tree/model/loss.py"); then
  echo "the float32 copy does not upcast"; exit 2
fi
# Each run starts only if BUDGET (default 540 s: the device's 600 s a command, less the pack)
# still holds its worst case, so the call always ends in time to pack what ran.
fits() {  # fits NEED WHAT
  local left=$((${BUDGET:-540} - (SECONDS - t0)))
  ((left >= $1)) && return 0
  log "$2: not started ($left s left, needs $1)"
  return 1
}
plain() {  # plain CE_DTYPE K [profile]
  fits 90 "plain ce $1 #$2" || return 0
  local prof=()
  [[ ${3:-} == profile ]] && prof=(--profile-table "$W/profile-plain-$1.txt")
  timeout -k 5 85 python3 benchmarks/plain_step.py --device cuda:0 --batch 1 --steps 10 \
    --warmup 3 --ce-dtype "$1" --json "$W/plain-$1-$2.json" "${prof[@]}" \
    >"$W/logs/plain-$1-$2.log" 2>&1
  log "plain ce $1 #$2 rc=$?"
}
racegate() {  # racegate float32|bf16 K
  fits 150 "racegate ce $1 #$2" || return 0
  local tree=.
  [[ $1 == float32 ]] && tree=$F32/tree
  (cd "$tree" && timeout -k 5 145 python3 -m harness run --preset qwen3-8b-drafter --devices 0 \
    --strategies warmup_locked --cache-states cold --threads-per-device 1 --steps 3 \
    --warmup-steps 2 --schedule barrier --switch-interval 0.005 --repeat 1 --run-timeout 130 \
    --results "$W/racegate-$1.jsonl" >"$W/logs/racegate-$1-$2.log" 2>&1)
  log "racegate ce $1 #$2 rc=$?"
}
plain float32 1; plain model 1; racegate float32 1; racegate bf16 1
racegate bf16 2; racegate float32 2; plain model 2 profile; plain float32 2 profile
python3 - "$W" <<'PY' | tee "$W/summary.txt"
import json, statistics, sys
from pathlib import Path
w = Path(sys.argv[1])
def med(v):
    return statistics.median(v) if v else None
rows = {}
for ce in ("float32", "model"):
    res = [json.loads(f.read_text()) for f in sorted(w.glob(f"plain-{ce}-*.json"))]
    v = [r["query_tokens_per_s"] for r in res]
    rows[f"plain {ce}"] = med(v)
    print(f"plain, CE in {ce}: {[round(x) for x in v]} median {med(v)}; step ms "
          f"{[round(r['median_step_ms'], 1) for r in res]}; peak {[r['peak_mem_bytes'] for r in res]}")
for ce in ("float32", "bf16"):
    f = w / f"racegate-{ce}.jsonl"
    rs = [json.loads(line) for line in f.read_text().splitlines()] if f.exists() else []
    v = [r["tokens_per_s"] for r in rs if r.get("outcome") == "ok" and r.get("tokens_per_s")]
    rows[f"racegate {ce}"] = med(v)
    print(f"racegate, CE in {ce}: {[round(x) for x in v]} median {med(v)}; outcomes "
          f"{[r['outcome'] for r in rs]}; peak {[r.get('peak_mem_bytes') for r in rs]}")
for a, b in (("racegate float32", "plain float32"), ("racegate bf16", "plain model"),
             ("plain model", "plain float32"), ("racegate bf16", "racegate float32")):
    if rows.get(a) and rows.get(b):
        print(f"{a} / {b}: {rows[a] / rows[b]:.3f}x")
PY
