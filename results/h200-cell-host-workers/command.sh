#!/usr/bin/env bash
# This folder's one device call: benchmarks/gpu_evidence_20.sh as it was at d5b9801 (`git show
# d5b9801:benchmarks/gpu_evidence_20.sh`), from the repository root, carrying .whl.
set -euo pipefail
cd "$(dirname "$0")/../.."
OUT="${OUT:?set OUT}" CALL_S=570 BUDGET=420 bash benchmarks/gpu_evidence_20.sh
