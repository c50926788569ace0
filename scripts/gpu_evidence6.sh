#!/usr/bin/env bash
# NOT RUN YET — next device call A (2×H200), ≤ 10 min: what session 2 left unverified.
#   1. the nested_fx_off gate case after its fixes (10 µs switch interval), 3 times;
#   2. pytest-run-parallel on GPU with pytest-timeout below the kill, so a stall leaves stacks.
# Call B is scripts/gpu_evidence7.sh (warmup vs warmup_locked).
set -uo pipefail
export PYTHONUNBUFFERED=1 TORCHINDUCTOR_COMPILE_THREADS=2
OUT="${OUT:?set OUT}"
mkdir -p "$OUT/logs"
L="$OUT/logs"
P="python3 -m pytest -p no:cacheprovider -rA"
log() { echo "[$(date +%T)] $*" | tee -a "$OUT/session.log"; }
python3 -m pip install -q --no-index --no-deps --target /tmp/prpsite .whl/pytest_run_parallel-*.whl >>"$OUT/session.log" 2>&1

log "nested_fx_off gate × 3 (both GPUs, one after another)"
for i in 1 2 3; do
  timeout 100 $P cases/test_throughput.py -k nested_fx_off --devices 0,1 --run-timeout 80 \
    --results "$OUT/gates.jsonl" >"$L/nested-$i.log" 2>&1
  echo "nested_fx_off gate run $i exit $?" >>"$OUT/session.log"
done

log "pytest-run-parallel × 6 (3 at a time), pytest-timeout 100 s < kill 125 s"
for round in 1 2; do
  for k in 1 2 3; do
    i=$(( (round - 1) * 3 + k ))
    ( c=$(mktemp -d)
      RACEGATE_PRP_DEVICES=cuda:0,cuda:1 RACEGATE_PRP_PRESET=small TORCHINDUCTOR_CACHE_DIR=$c PYTHONPATH=/tmp/prpsite \
        timeout 125 python3 -m pytest -p no:cacheprovider -q scripts/prp_case.py --parallel-threads=4 --iterations=2 \
        --timeout 100 >"$L/prp-$i.log" 2>&1
      echo -e "$i\t$?\t$(grep -c 'Detected that you are using FX to symbolically trace' "$L/prp-$i.log")" >>"$OUT/prp.tsv"
      rm -rf "$c" ) &
  done
  wait
done
log "done"
tar -czf "$OUT/logs.tar.gz" -C "$OUT" logs && rm -rf "$OUT/logs"
