#!/usr/bin/env bash
# Issue 21, part a again, on one H200: is the step's cost per sequence set by the micro-batch?
# benchmarks/plain_step.py at batch 1 (the reference step's one sequence per optimizer step) and
# at batch 2, and racegate's qwen3-8b-drafter (`harness run`, warmup_locked, 1 thread, cold) at
# its micro-batch of 2 and, from a copy of this tree whose model/config.py says 1, at 1; in the
# order P1 R2 R1 P2 P2 R1 R2 P1 (counterbalanced). Then gpu_evidence_21.sh part b (the
# production strategy's cost, `small`, 2 threads, cold), in what is left of BUDGET. The
# device returns at most 8 files, so everything is written to a private dir and tarred into
# $OUT/all.tar.gz.
#   OUT=<empty dir> bash results/h200-step-ratio/command.sh
set -uo pipefail
OUT="$(cd "${OUT:?set OUT}" && pwd)" || exit 2
cd "$(dirname "$0")/../.." || exit 2
export PYTHONUNBUFFERED=1 TORCHINDUCTOR_COMPILE_THREADS=2
W=$(mktemp -d)
mkdir -p "$W/step/logs"
trap 'tar czf "$OUT/all.tar.gz" -C "$W" . ; rm -rf "$W"' EXIT
{ date -u +%FT%TZ; git rev-parse HEAD; nvidia-smi -L
  python3 -c 'import torch, transformers as t; print("torch", torch.__version__, "transformers", t.__version__)'
} >"$W/env.txt" 2>&1
MB1=$(mktemp -d)
cp -a . "$MB1/tree"
sed -i 's/micro_batch_size: int = 2 /micro_batch_size: int = 1 /' "$MB1/tree/model/config.py"
grep -q 'micro_batch_size: int = 1 ' "$MB1/tree/model/config.py" || { echo "no mb1 copy"; exit 2; }
t0=$SECONDS
log() { echo "+$((SECONDS - t0))s $*" | tee -a "$W/step/order.txt"; }
plain() {  # plain BATCH K
  timeout -k 5 120 python3 benchmarks/plain_step.py --device cuda:0 --batch "$1" --steps 10 \
    --warmup 3 --json "$W/step/plain-b$1-$2.json" >"$W/step/logs/plain-b$1-$2.log" 2>&1
  log "plain batch $1 #$2 rc=$?"
}
racegate() {  # racegate MICRO_BATCH K
  local tree=.
  [[ $1 == 1 ]] && tree=$MB1/tree
  (cd "$tree" && timeout -k 5 150 python3 -m harness run --preset qwen3-8b-drafter --devices 0 \
    --strategies warmup_locked --cache-states cold --threads-per-device 1 --steps 3 \
    --warmup-steps 2 --schedule barrier --switch-interval 0.005 --repeat 1 --run-timeout 140 \
    --results "$W/step/racegate-mb$1.jsonl" >"$W/step/logs/racegate-mb$1-$2.log" 2>&1)
  log "racegate micro-batch $1 #$2 rc=$?"
}
plain 1 1; racegate 2 1; racegate 1 1; plain 2 1
plain 2 2; racegate 1 2; racegate 2 2; plain 1 2
left=$((${BUDGET:-480} - (SECONDS - t0)))
log "part b with $left s"
if ((left > 60)); then
  PARTS=b TOTAL_S=$left BUDGET_B=$left OUT="$W/gpu21" bash benchmarks/gpu_evidence_21.sh \
    >"$W/gpu21.log" 2>&1
fi
python3 - "$W" <<'PY' | tee "$W/summary.txt"
import json, statistics, sys
from pathlib import Path
w = Path(sys.argv[1]) / "step"
for b in (1, 2):
    v = [json.loads(f.read_text())["query_tokens_per_s"] for f in sorted(w.glob(f"plain-b{b}-*.json"))]
    print(f"plain batch {b}: {[round(x) for x in v]} median {statistics.median(v) if v else None}")
for mb in (1, 2):
    f = w / f"racegate-mb{mb}.jsonl"
    rs = [json.loads(l) for l in f.read_text().splitlines()] if f.exists() else []
    v = [r["tokens_per_s"] for r in rs if r.get("outcome") == "ok" and r.get("tokens_per_s")]
    print(f"racegate micro-batch {mb}: {[round(x) for x in v]} outcomes {[r['outcome'] for r in rs]}"
          f" peak {[r.get('peak_mem_bytes') for r in rs]}")
PY
