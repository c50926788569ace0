#!/usr/bin/env bash
# One device call (2026-12-07), short form: the short-step example and the concurrency cases
# side by side on one GPU. Outcome counts only (runs side by side); no timing is claimed.
# As run on 2026-12-07 (one H100): its concurrency half stopped at once, the command then lacking
# --cache-states cold (a GPU run defaults to every state); those cases ran again alone afterwards
# (results/concurrency-short-steps/README.md).
set -u
export PYTHON=python3
o=${OUT:?}
{ nvidia-smi -L; nproc; python3 -c 'import sys,torch,transformers;print(sys.version.split()[0],torch.__version__,transformers.__version__)'; } > "$o/machine.txt" 2>&1
mkdir -p "$o/example" "$o/concurrency"
( REPEAT=6 JOBS=4 OUT="$o/example" timeout -k 5 330 bash results/short-step-example/command.sh > "$o/example/stdout.txt" 2>&1 ) &
( REPEAT=3 OUT="$o/concurrency" timeout -k 5 330 bash results/concurrency-short-steps/command.sh > "$o/concurrency/stdout.txt" 2>&1 ) &
wait
cat "$o/machine.txt"; echo "== EXAMPLE"; tail -25 "$o/example/stdout.txt"; echo "== CONCURRENCY"; tail -12 "$o/concurrency/stdout.txt"
