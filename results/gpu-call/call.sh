#!/usr/bin/env bash
# One device call (2026-12-07): the main command, the short-step example and the concurrency
# cases on one GPU. Outcome counts only (they run side by side); no timing is claimed.
set -u
export PYTHON=python3
o=${OUT:?}
{ nvidia-smi -L; nproc; python3 -c 'import sys,torch,transformers;print(sys.version.split()[0],torch.__version__,transformers.__version__)'; } > "$o/machine.txt" 2>&1
mkdir -p "$o/main" "$o/example" "$o/concurrency"
( s=$(date +%s); timeout -k 5 540 python3 bootstrap.py race --results="$o/main/records.jsonl" --decision-file="$o/main/decision.json" > "$o/main/log.txt" 2>&1; echo "rc=$? wall=$(( $(date +%s) - s ))s" > "$o/main/summary.txt" ) &
( REPEAT=6 JOBS=4 OUT="$o/example" timeout -k 5 300 bash results/short-step-example/command.sh > "$o/example/stdout.txt" 2>&1
  REPEAT=3 OUT="$o/concurrency" timeout -k 5 240 bash results/concurrency-short-steps/command.sh > "$o/concurrency/stdout.txt" 2>&1 ) &
wait
cat "$o/machine.txt"; echo "== MAIN"; cat "$o/main/summary.txt"; tail -25 "$o/main/log.txt"
echo "== EXAMPLE"; tail -25 "$o/example/stdout.txt"; echo "== CONCURRENCY"; tail -12 "$o/concurrency/stdout.txt"
