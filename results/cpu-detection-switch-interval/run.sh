#!/usr/bin/env bash
# CPU stress with a 10 µs GIL switch interval (the suite's default): torch 2.12.1 ($PY_2121, a
# venv's python: the CUDA wheel from PyPI, run on CPU) and 2.13.0 (the repo's .venv), tiny preset,
# per_device, 2 threads, each schedule × 10 isolated runs.
set -u
cd "$(dirname "$0")/../.."  # the repo root
PY_2121="${PY_2121:?set PY_2121: a python with torch 2.12.1}"
D=results/cpu-detection-switch-interval
for py in "$PY_2121" .venv/bin/python; do
  v=$($py -c 'import torch; print(torch.__version__.split("+")[0])')
  for s in recompile barrier staggered; do
    /usr/bin/time -f "$v $s wall %e s" $py -m harness run --preset tiny --strategy per_device \
      --threads-per-device 2 --steps 6 --schedule $s --switch-interval 0.00001 --repeat 10 \
      --out $D/torch$v.jsonl >> $D/torch$v.log 2>&1
  done
done
# Then the safe strategy on the release that races: warmup × 20 under the schedule that finds it.
/usr/bin/time -f "2.12.1 warmup recompile wall %e s" "$PY_2121" -m harness run \
  --preset tiny --strategy warmup --threads-per-device 2 --steps 6 --schedule recompile \
  --switch-interval 0.00001 --repeat 20 --out $D/torch2.12.1-warmup.jsonl >> $D/torch2.12.1.log 2>&1

# Reconstructed from the README (not part of this script as it ran; run later by hand, after the
# commit "staggered: each later thread starts on a shape of its own"; where its console output
# went is not recorded):
# "$PY_2121" -m harness run --preset tiny --strategy per_device --threads-per-device 2 --steps 6 \
#   --schedule staggered --switch-interval 0.00001 --repeat 4 --out $D/torch2.12.1-staggered-own-shape.jsonl
