#!/bin/bash
# Control detection per cache state with more compile turns a run; one H100 (run as
# `OUT=<dir> bash results/control-every-time/call-h100.sh` from the checkout root).
set -u
PY=python3
export PYTHONPATH=$PWD/results/control-every-time
REAL_OUT=$OUT; OUT=$(mktemp -d); T0=$(date +%s)
stamp() { echo "$(( $(date +%s) - T0 )) s: $*" | tee -a $OUT/clock.txt; }
{ nvidia-smi --query-gpu=name,memory.total --format=csv,noheader; $PY -c "import torch,transformers,sys;print(torch.__version__, transformers.__version__, sys.version.split()[0])"; nproc; git rev-parse HEAD; } > $OUT/machine.txt 2>&1
for v in buckets5 buckets3 buckets2; do
  stamp "start $v"
  timeout -s INT 140 $PY -m racegate run --workload shapes_variants:$v --preset small --devices 0 \
    --threads-per-device 2 --strategies per_device --cache-states warm,deleted,cold --repeat 8 \
    --steps 8 --run-timeout 90 --jobs 8 --results $OUT/ctl-$v.jsonl > $OUT/ctl-$v.log 2>&1
  stamp "end $v rc $?"
done
stamp "start prod buckets5"
timeout -s INT 100 $PY -m racegate run --workload shapes_variants:buckets5 --preset small --devices 0 \
  --threads-per-device 2 --strategies warmup_locked --cache-states warm,deleted,cold --repeat 3 \
  --steps 8 --run-timeout 90 --jobs 8 --results $OUT/prod-buckets5.jsonl > $OUT/prod-buckets5.log 2>&1
stamp "end prod rc $?"
tar czf $REAL_OUT/pack.tgz -C $OUT . && ls -la $OUT && cat $OUT/clock.txt
