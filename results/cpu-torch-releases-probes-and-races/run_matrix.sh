#!/bin/bash
# The cells run before nox did them (README: "Earlier cells, run without nox"). $VENVS: the
# folder of the pre-built venvs (the recording machine's temp dir); vtf<v> had transformers <v>
# and got its torch from another venv through a .pth file.
cd "$(dirname "$0")/../.."  # the repo root
V="${VENVS:?set VENVS: the folder holding the venvs v2100 v2110 v2121 v214 v215 vtf5.6.0 vtf5.8.1}"
M=results/cpu-torch-releases-probes-and-races
mkdir -p $M
while [ ! -f results/cpu-detection-per-schedule/stress.done ]; do sleep 5; done
D=results/cpu-detection-per-schedule
/usr/bin/time -f 'wall %e s' $V/v2121/bin/python -m harness run --preset tiny --devices cpu --strategy per_device --threads-per-device 2 --steps 6 --schedule recompile --repeat 10 --switch-interval 0.0001 --out $D/torch2.12.1-switch1e-4.jsonl > $D/torch2.12.1-switch1e-4.log 2>&1
date -u +%FT%TZ > $M/matrix.start
cell() { # $1 python, $2 torch, $3 transformers
  local c=$M/cpu_matrix-torch-$2-transformers-$3
  mkdir -p $c
  local s=$(date +%s.%N)
  $1 -m pytest cases -k race --devices cpu --results $c/records.jsonl --junitxml $c/junit.xml -p no:cacheprovider > $c/pytest.log 2>&1
  local rc=$?
  local e=$(date +%s.%N)
  echo "$2 $3 rc=$rc wall=$(echo "$e - $s" | bc)" >> $M/cells.log
}
cell $V/v2100/bin/python 2.10.0 5.17.0
cell $V/v2110/bin/python 2.11.0 5.17.0
cell $V/v2121/bin/python 2.12.1 5.17.0
cell .venv/bin/python 2.13.0 5.17.0
cell $V/v214/bin/python 2.14.1 5.17.0
cell $V/v215/bin/python 2.15.0 5.17.0
for t in 5.6.0 5.8.1; do
  echo $V/v2110/lib/python3.11/site-packages > $V/vtf$t/lib/python3.11/site-packages/zz-torch.pth
  cell $V/vtf$t/bin/python 2.11.0 $t
done
for t in 5.6.0 5.8.1; do
  echo $PWD/.venv/lib/python3.11/site-packages > $V/vtf$t/lib/python3.11/site-packages/zz-torch.pth
  cell $V/vtf$t/bin/python 2.13.0 $t
done
date -u +%FT%TZ > $M/matrix.end
