#!/bin/bash
# The commands that made this folder, from README.md's "Commands and wall times" (reconstructed:
# the session ran them by hand; this file did not exist then). Results committed in 30ae91b.
# $PY_2121: a python with torch 2.12.1 (the CUDA wheel from PyPI, run on CPU); the repo's .venv
# has torch 2.13.0+cpu. Both had transformers 5.17.0 and pytest-run-parallel 0.10.0.
# prp_case.py was this folder's own copy, removed since: `git show
# 30ae91b:results/2026-11-30-cpu-stress/prp_case.py > results/cpu-detection-per-schedule/prp_case.py`
# restores it (scripts/prp_case.py is the same test at its defaults, seeding each thread by its
# index instead of 0).
set -u
cd "$(dirname "$0")/../.."  # the repo root
PY_2121="${PY_2121:?set PY_2121: a python with torch 2.12.1}"
D=results/cpu-detection-per-schedule
for py in "$PY_2121" .venv/bin/python; do
  v=$($py -c 'import torch; print(torch.__version__.split("+")[0])')
  # 30 runs per release: every schedule x 10, sequential, each a fresh process and cold cache
  $py -m harness run --preset tiny --devices cpu --strategy per_device \
    --threads-per-device 2 --steps 6 --schedule barrier,staggered,recompile --repeat 10 \
    --out $D/torch$v.jsonl > $D/torch$v.log 2>&1
  # pytest-run-parallel, 10 invocations, each a fresh process and inductor cache; one line per
  # invocation in prp-torch<V>.log: exit code, lines matching the nested-FX message, wall seconds
  for i in $(seq 1 10); do
    c=$(mktemp -d)
    s=$(date +%s.%N)
    TORCHINDUCTOR_CACHE_DIR=$c $py -m pytest -p no:cacheprovider -q \
      $D/prp_case.py --parallel-threads=4 --iterations=2 > $D/prp-torch$v-run$i.out 2>&1
    rc=$?
    n=$(grep -c 'Detected that you are using FX to symbolically trace' $D/prp-torch$v-run$i.out)
    echo "run $i rc=$rc nested_fx_lines=$n wall=$(echo "$(date +%s.%N) - $s" | bc)" >> $D/prp-torch$v.log
    rm -rf "$c"
  done
done
# 2.12.1, recompile with a 0.1 ms GIL switch interval (run by ../cpu-torch-releases-probes-and-races/run_matrix.sh)
"$PY_2121" -m harness run --preset tiny --devices cpu --strategy per_device \
  --threads-per-device 2 --steps 6 --schedule recompile --repeat 10 --switch-interval 0.0001 \
  --out $D/torch2.12.1-switch1e-4.jsonl > $D/torch2.12.1-switch1e-4.log 2>&1
