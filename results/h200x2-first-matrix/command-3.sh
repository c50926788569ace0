#!/usr/bin/env bash
# Session 1, call 3 (2×H200, code at 639417a): small's throughput, one job alone on each GPU,
# per_device on GPU 0 and warmup on GPU 1, at once. The command README.md gives, written into a
# file afterwards; the --out file is this folder's call3-throughput-small.jsonl.
# Rerun from anywhere (options may have changed since that commit):
#   OUT=<empty dir> bash results/h200x2-first-matrix/command-3.sh
set -uo pipefail
OUT="$(cd "${OUT:?set OUT}" && pwd)" || exit 2
cd "$(dirname "$0")/../.."  # the repo root
R="python3 -m harness run --preset small --threads-per-device 1 --steps 20 --warmup-steps 2 --timeout 60 --repeat 3"
$R --devices 0 --strategy per_device --out "$OUT/call3-throughput-small.jsonl" &
$R --devices 1 --strategy warmup --out "$OUT/call3-throughput-small.jsonl" &
wait
