#!/usr/bin/env bash
# NOT RUN YET — the next device call (2×H200) for what session 2 left unverified:
#   1. the nested_fx_off gate case after its fix (10 µs switch interval, per-device floor), 3 times;
#   2. pytest-run-parallel on GPU with pytest-timeout below the kill, so a stall leaves stacks;
#   3. warmup (now with its compiled-call lock, commit 9389c6b) at 2 threads/GPU under load: do the spurious cache misses (3/20 before the lock) stay away, and what does the lock cost (throughput: run cases/test_throughput.py too)?
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
  timeout 120 $P cases/test_throughput.py -k nested_fx_off --devices 0,1 --results "$OUT/gates.jsonl" \
    >"$L/nested-$i.log" 2>&1
  echo "nested_fx_off gate run $i exit $?" >>"$OUT/session.log"
done

log "pytest-run-parallel × 6 (3 at a time), pytest-timeout 100 s < kill 130 s"
for round in 1 2; do
  for k in 1 2 3; do
    i=$(( (round - 1) * 3 + k ))
    ( c=$(mktemp -d)
      RACEGATE_PRP_DEVICES=cuda:0,cuda:1 RACEGATE_PRP_PRESET=small TORCHINDUCTOR_CACHE_DIR=$c PYTHONPATH=/tmp/prpsite \
        timeout 130 python3 -m pytest -p no:cacheprovider -q scripts/prp_case.py --parallel-threads=4 --iterations=2 \
        --timeout 100 >"$L/prp-$i.log" 2>&1
      echo -e "$i\t$?\t$(grep -c 'Detected that you are using FX to symbolically trace' "$L/prp-$i.log")" >>"$OUT/prp.tsv"
      rm -rf "$c" ) &
  done
  wait
done

log "warmup 2 threads/GPU × 20 under load (--jobs 10)"
timeout 200 python3 -m harness run --preset small --devices 0,1 --steps 8 --switch-interval 1e-5 \
  --strategy warmup --threads-per-device 2 --schedule recompile --repeat 20 --jobs 10 --timeout 120 \
  --out "$OUT/warmup.jsonl" >"$L/warmup.log" 2>&1
log "throughput with the lock: small per_device and warmup × 3 on GPU 0 (alone)"
timeout 200 $P cases/test_throughput.py -m throughput -k "at_floor and small" --devices 0 --repeat 3 \
  --results "$OUT/tp-small.jsonl" >"$L/tp-small.log" 2>&1
log "done"
tar -czf "$OUT/logs.tar.gz" -C "$OUT" logs && rm -rf "$OUT/logs"
