#!/usr/bin/env bash
# CPU stress with a 10 µs GIL switch interval (the suite's default): torch 2.12.1 (/tmp/v2121)
# and 2.13.0 (.venv), tiny preset, per_device, 2 threads, each schedule × 10 isolated runs.
set -u
D=results/2026-11-30-cpu-stress-si
for py in /tmp/v2121/bin/python .venv/bin/python; do
  v=$($py -c 'import torch; print(torch.__version__.split("+")[0])')
  for s in recompile barrier staggered; do
    /usr/bin/time -f "$v $s wall %e s" $py -m harness run --preset tiny --strategy per_device \
      --threads-per-device 2 --steps 6 --schedule $s --switch-interval 0.00001 --repeat 10 \
      --out $D/torch$v.jsonl >> $D/torch$v.log 2>&1
  done
done
# Then the safe strategy on the release that races: warmup × 20 under the schedule that finds it.
/usr/bin/time -f "2.12.1 warmup recompile wall %e s" /tmp/v2121/bin/python -m harness run \
  --preset tiny --strategy warmup --threads-per-device 2 --steps 6 --schedule recompile \
  --switch-interval 0.00001 --repeat 20 --out $D/torch2.12.1-warmup.jsonl >> $D/torch2.12.1.log 2>&1
