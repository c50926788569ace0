#!/bin/bash
# The command README.md gives (cells.log is its output), from the repo root; written down from
# the README afterwards. PIP_CONSTRAINT=/dev/null lifts the image's pip cap on torch (2.15.0).
set -u
cd "$(dirname "$0")/../.."  # the repo root
RACEGATE_RESULTS_DIR=results/cpu-torch-releases-warmup-locked PIP_CONSTRAINT=/dev/null \
  nox -s cpu_matrix -k transformers_5_8_1 -- \
  --strategies warmup,warmup_locked,processes > results/cpu-torch-releases-warmup-locked/cells.log 2>&1
