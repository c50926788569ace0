#!/usr/bin/env bash
# Device call (2×H200), session 2, call 2: issue 6's throughput gate through pytest (alone on
# each GPU: small on GPU 0, qwen3-8b-drafter on GPU 1), the model's GPU tests, then the
# nested_fx_off gate, the incident topology (issue 9, scaled down) and pytest-run-parallel's
# take on the known-bad case (issue 11), 10 invocations.
# Recorded: call 2 ran this as scripts/gpu_evidence4.sh at commit b436e79, from the repo root,
# into the device's $OUT (call2/ here). Moved here unchanged but for paths: the wheels it installs
# go to a private mktemp dir (a fixed name under the temp dir then), and it finds the repo root
# itself.
# Rerun from anywhere (options may have changed since that commit; carry .whl, the wheelhouse):
#   OUT=<empty dir> bash results/h200x2-warmup-races/command-2.sh
set -uo pipefail
export PYTHONUNBUFFERED=1
OUT="$(cd "${OUT:?set OUT}" && pwd)" || exit 2
cd "$(dirname "$0")/../.."  # the repo root: every path below is relative to it
SITE="$(mktemp -d)"  # the carried wheels this call installs
mkdir -p "$OUT/logs"
L="$OUT/logs"
P="python3 -m pytest -p no:cacheprovider -rA"
log() { echo "[$(date +%T)] $*" | tee -a "$OUT/session.log"; }
python3 -m pip install -q --no-index --no-deps --target "$SITE" .whl/pytest_run_parallel-*.whl >>"$OUT/session.log" 2>&1
log "$(python3 -c 'import torch, transformers, triton, sys; print(torch.__version__, transformers.__version__, triton.__version__, sys.version.split()[0])')"

log "T throughput: GPU 0 small (per_device, warmup × 3 runs each) then model GPU tests; GPU 1 qwen3-8b per_device × 3, then warmup × 1"
( timeout 250 $P cases/test_throughput.py -m throughput -k "at_floor and small" --devices 0 --repeat 3 \
    --results "$OUT/tp-small.jsonl" --junitxml "$L/tp-small.xml" >"$L/tp-small.log" 2>&1
  echo "tp-small exit $?" >>"$OUT/session.log"
  CUDA_VISIBLE_DEVICES=0 timeout 140 $P tests/test_model_gpu.py -v --junitxml "$L/model-gpu.xml" >"$OUT/model-gpu.log" 2>&1
  echo "model-gpu exit $?" >>"$OUT/session.log" ) &
( timeout 250 $P cases/test_throughput.py -m throughput -k "at_floor and qwen3 and per_device" --devices 1 --repeat 3 \
    --results "$OUT/tp-8b.jsonl" --junitxml "$L/tp-8b.xml" >"$L/tp-8b.log" 2>&1
  echo "tp-8b exit $?" >>"$OUT/session.log"
  timeout 140 python3 -m harness run --preset qwen3-8b-drafter --devices 1 --strategy warmup --threads-per-device 1 \
    --steps 10 --warmup-steps 2 --timeout 130 --out "$OUT/tp-8b.jsonl" >"$L/tp-8b-warmup.log" 2>&1
  echo "tp-8b-warmup exit $?" >>"$OUT/session.log" ) &
wait

log "R nested_fx_off gate + incident topology (both GPUs), pytest-run-parallel × 10 (5 at a time)"
( timeout 200 $P cases/test_throughput.py -k nested_fx_off --devices 0,1 --results "$OUT/gates.jsonl" \
    --junitxml "$L/nested.xml" >"$L/nested.log" 2>&1
  echo "nested_fx_off gate exit $?" >>"$OUT/session.log"
  timeout 200 $P cases/test_race.py -k incident_topology --devices 0,1 --repeat 3 --run-timeout 90 \
    --results "$OUT/gates.jsonl" --junitxml "$L/incident.xml" >"$L/incident.log" 2>&1
  echo "incident topology exit $?" >>"$OUT/session.log" ) &
( for round in 1 2; do
    for k in 1 2 3 4 5; do
      i=$(( (round - 1) * 5 + k ))
      ( c=$(mktemp -d)
        RACEGATE_PRP_DEVICES=cuda:0,cuda:1 RACEGATE_PRP_PRESET=small TORCHINDUCTOR_CACHE_DIR=$c PYTHONPATH="$SITE" \
          timeout 150 python3 -m pytest -p no:cacheprovider -q scripts/prp_case.py --parallel-threads=4 --iterations=2 \
          >"$L/prp-$i.log" 2>&1
        rc=$?
        echo -e "$i\t$rc\t$(grep -c 'Detected that you are using FX to symbolically trace' "$L/prp-$i.log")\t$(tail -1 "$L/prp-$i.log")" >>"$OUT/prp.tsv"
        rm -rf "$c" ) &
    done
    wait
  done ) &
wait
log "done"
tar -czf "$OUT/logs.tar.gz" -C "$OUT" logs && rm -rf "$OUT/logs"
