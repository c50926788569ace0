#!/usr/bin/env bash
# Session 1, call 4 (2×H200, code at 639417a): per_device, 2 threads/GPU, barrier schedule × 8
# (the hang rate). The command README.md gives, written into a file afterwards; its output is
# this folder's call4-barrier.jsonl and call4.log.
# Rerun from anywhere (options may have changed since that commit):
#   OUT=<empty dir> bash results/h200x2-first-matrix/command-4.sh
set -uo pipefail
OUT="$(cd "${OUT:?set OUT}" && pwd)" || exit 2
cd "$(dirname "$0")/../.."  # the repo root
TORCHINDUCTOR_COMPILE_THREADS=2 python3 -m harness run --preset small --devices 0,1 \
  --threads-per-device 2 --steps 8 --strategy per_device --schedule barrier --repeat 8 --jobs 8 \
  --timeout 100 --out "$OUT/call4-barrier.jsonl" >"$OUT/call4.log" 2>&1
