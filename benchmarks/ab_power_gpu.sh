#!/usr/bin/env bash
# A/A false alarms and injected-slowdown catches on one GPU: one pool of interleaved runs.
#
#   bash benchmarks/ab_power_gpu.sh PRESET RUNS_PER_SIDE STEPS OUT_DIR
#   e.g. bash benchmarks/ab_power_gpu.sh small 9 60 "$OUT/ab-power"   (≈ 7-8 min on an H200)
#
# Both sides are this machine's python (the same versions: an A/A set-up); the candidate adds
# RACEGATE_TEST_SLOWDOWN (default 0.05: ≈ 5% of a step as extra matmuls, a test tool). Runs go
# A B B A … and every record is appended to OUT_DIR/PRESET/{reference,candidate}.jsonl as soon
# as it exists, so a call cut short keeps what ran, and pools from several calls concatenate
# (cat the .jsonl files) before `power` draws disjoint 2-vs-2 comparisons from them:
# A/A from each side's pool, reference vs candidate for the slowdown.
set -euo pipefail
preset=${1:-small}; runs=${2:-9}; steps=${3:-60}; out=${4:-${OUT:-results}/ab-power}
py=${PYTHON:-python3}
slowdown=${RACEGATE_AB_SLOWDOWN:-0.05}
devices=${DEVICES:-0}; strategy=${STRATEGY:-warmup_locked}  # DEVICES=cpu STRATEGY=sdpa_dense: a dry run
export PYTHONUNBUFFERED=1 TORCHINDUCTOR_COMPILE_THREADS=${TORCHINDUCTOR_COMPILE_THREADS:-2}
dir="$out/$preset"
mkdir -p "$dir"
"$py" -m racegate.harness.ab compare --reference "$py" --candidate "$py" --runs "$runs" \
  --candidate-env "RACEGATE_TEST_SLOWDOWN=$slowdown" --records "$dir" \
  --out "$dir/ab-$(date -u +%Y%m%dT%H%M%S).json" \
  -- --preset "$preset" --devices "$devices" --strategy "$strategy" --threads-per-device 1 \
     --steps "$steps" --warmup-steps 3 --timeout 600 || true  # exit 1: a run failed, or a miss
"$py" -m racegate.harness.ab power --reference "$dir/reference.jsonl" --candidate "$dir/candidate.jsonl" \
  --per-side 2 --slowdown "$slowdown" | tee "$dir/power.txt"
