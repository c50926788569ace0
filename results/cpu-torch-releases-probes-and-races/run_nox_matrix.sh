#!/bin/bash
# Runs cpu_matrix cells through nox, one nox call per cell, logging each cell's wall time.
#   bash results/cpu-torch-releases-probes-and-races/run_nox_matrix.sh <log> "<torch> <transformers>" ...
cd "$(dirname "$0")/../.."  # the repo root
M=results/cpu-torch-releases-probes-and-races
export RACEGATE_RESULTS_DIR=${RACEGATE_RESULTS_DIR:-$PWD/$M}  # nox-incident-cells/ for the 2.11, 2.13 reruns
log=$1; shift
echo "start $(date -u +%FT%TZ)" >> "$log"
for cell in "$@"; do
  set -- $cell
  s=$(date +%s.%N)
  .venv/bin/python -m nox -s "cpu_matrix(torch='$1', transformers='$2')" \
    > "$M/nox-torch-$1-transformers-$2.$(basename "$log" .log).out" 2>&1
  rc=$?
  e=$(date +%s.%N)
  printf '%s %s nox_rc=%s wall=%.1f\n' "$1" "$2" "$rc" "$(echo "$e - $s" | bc)" >> "$log"
done
echo "end $(date -u +%FT%TZ)" >> "$log"
