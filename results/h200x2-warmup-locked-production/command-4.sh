#!/usr/bin/env bash
# Session 3, call 4 (2×H200, code at 28f8517): warmup's spurious cache miss with a deleted cache at
# 2 threads/GPU, repeated 8 times beside warmup_locked and processes. The command README.md's table
# gives, as sent (written into a file afterwards; where its console output went,
# call4/deleted-2x2.log, is inferred from the file name).
# Rerun from anywhere (options may have changed since that commit):
#   OUT=<empty dir> bash results/h200x2-warmup-locked-production/command-4.sh
set -uo pipefail
OUT="$(cd "${OUT:?set OUT}" && pwd)" || exit 2
cd "$(dirname "$0")/../.."  # the repo root
python3 -m harness run --preset small --devices 0,1 --steps 8 --switch-interval 1e-5 \
  --schedule recompile --threads-per-device 2 --cache-state deleted \
  --strategy warmup,warmup_locked,processes --repeat 8 --jobs 12 --timeout 120 \
  --out "$OUT/deleted-2x2.jsonl" >"$OUT/deleted-2x2.log" 2>&1
