#!/bin/bash
# after the matrix: re-run the one crashed case (torch 2.11.0 × transformers 5.6.0, per_device) twice
cd "$(dirname "$0")/../.."  # the repo root
V="${VENVS:?set VENVS: the folder holding the venvs v2110 and vtf5.6.0 (see run_matrix.sh)}"
M=results/cpu-torch-releases-probes-and-races
while [ ! -f $M/matrix.end ]; do sleep 3; done
echo $V/v2110/lib/python3.11/site-packages > $V/vtf5.6.0/lib/python3.11/site-packages/zz-torch.pth
C=$M/cpu_matrix-torch-2.11.0-transformers-5.6.0
s=$(date +%s.%N)
$V/vtf5.6.0/bin/python -m pytest cases/test_race.py -k 'race and per_device' --devices cpu --repeat 2 \
  --results $C/rerun-per_device.jsonl -p no:cacheprovider > $C/rerun-per_device.log 2>&1
echo "rerun rc=$? wall=$(echo "$(date +%s.%N) - $s" | bc)" >> $C/rerun-per_device.log
