#!/bin/bash
# After the cold matrix: warm reruns, a from-scratch runner (no seeding), per_device rates.
cd "$(dirname "$0")/../.."  # the repo root
M=$PWD/results/cpu-torch-releases-probes-and-races
NOX=".venv/bin/python -m nox"
t() { # label, then the command: one line "label rc wall" in followups.log
  local label=$1; shift
  local s=$(date +%s.%N)
  "$@" > "$M/followup-$label.out" 2>&1
  local rc=$?
  printf '%s rc=%s wall=%.1f\n' "$label" "$rc" "$(echo "$(date +%s.%N) - $s" | bc)" >> "$M/followups.log"
}
echo "start $(date -u +%FT%TZ)" >> "$M/followups.log"
# 1. warm reruns of two cells (venvs kept by reuse_venv, shared torch there): same command.
for cell in "2.10.0 5.6.0" "2.15.0 5.24.0"; do
  set -- $cell
  RACEGATE_RESULTS_DIR=$M/warm-rerun t "warm-$1-$2" $NOX -s "cpu_matrix(torch='$1', transformers='$2')"
done
# 2. a runner with nothing seeded: its own envdir and torch folder; torch really installed.
F="$(mktemp -d)"  # the fresh runner's envdir and torch folder
RACEGATE_TORCH_DIR=$F/_torch RACEGATE_RESULTS_DIR=$M/fresh-runner \
  t fresh-cold-2.13.0-5.24.0 $NOX --envdir $F -s "cpu_matrix(torch='2.13.0', transformers='5.24.0')"
RACEGATE_TORCH_DIR=$F/_torch RACEGATE_RESULTS_DIR=$M/fresh-runner-rerun \
  t fresh-warm-2.13.0-5.24.0 $NOX --envdir $F -s "cpu_matrix(torch='2.13.0', transformers='5.24.0')"
RACEGATE_TORCH_DIR=$F/_torch t fresh-install-only-warm $NOX --envdir $F --install-only -s "cpu_matrix(torch='2.13.0', transformers='5.24.0')"
# torch 2.15.0 on this image without PIP_CONSTRAINT: the noxfile's error (no download).
RACEGATE_TORCH_DIR=$F/_torch t fresh-2.15.0-capped $NOX --envdir $F --install-only -s "cpu_matrix(torch='2.15.0', transformers='5.24.0')"
# 3. per_device rates on 2.12.1 (5.6.0 missed the strict row once) and 2.11.0 x 5.6.0 (crash).
for cell in "2.12.1 5.6.0" "2.12.1 5.8.1" "2.11.0 5.6.0"; do
  set -- $cell
  RACEGATE_RESULTS_DIR=$M/repeat-per_device t "repeat-$1-$2" \
    $NOX -s "cpu_matrix(torch='$1', transformers='$2')" -- -k per_device --repeat 5
done
echo "end $(date -u +%FT%TZ)" >> "$M/followups.log"
