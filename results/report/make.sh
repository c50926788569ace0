#!/bin/sh
# The committed report: the gate's curated race evidence only, one folder per claim (never every
# record ever committed, never a test fixture's workload). From the repository root, in the
# environment racegate runs in (python with torch is not needed, only racegate's packages):
#   sh results/report/make.sh
set -eu
folders="h200-cell-warmup-locked cpu-race-twice"
root=$(pwd)
work=$(mktemp -d)  # private (0700): the unpacked records, removed at the end
trap 'rm -rf "$work"' EXIT
for f in $folders; do
    mkdir "$work/$f"
    tar xJf "results/$f/data.tar.xz" -C "$work/$f"
done
python - "$work" <<'PY'
import json, pathlib, sys
for path in pathlib.Path(sys.argv[1]).rglob("*.jsonl"):
    for line in path.read_text().splitlines():
        workload = json.loads(line)["scenario"]["workload"]
        if workload.startswith("tests."):
            sys.exit(f"{path}: a test fixture's workload {workload!r}: not evidence")
PY
cd "$work"  # the report names its inputs as given: the folders' own names
PYTHONPATH="$root${PYTHONPATH:+:$PYTHONPATH}" python -m harness report $folders --race-only \
    --title "racegate: curated race evidence" --baselines "$root/baselines" \
    --out-dir "$root/results/report" || echo "report exit $?"
