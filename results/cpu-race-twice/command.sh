#!/bin/sh
# Two identical invocations of the race gate on the 2-core CPU box (torch 2.13 CPU, which masks
# the race), one after the other; each judges its own run only. Run from the repository root.
# RACEGATE_VENV: an environment racegate.py made (its requirements stamp), so nothing installs.
set -u
out=${OUT:-results/cpu-race-twice}
for i in 1 2; do
    start=$(date +%s)
    nice python3 racegate.py race cases/test_race.py -p no:cacheprovider \
        --strategies warmup_locked,per_device --cache-states cold \
        --control-repeat 3 --power-cap 6 --results "$out/run$i.jsonl" > "$out/run$i.log" 2>&1
    echo "run $i: exit $? after $(( $(date +%s) - start )) s" >> "$out/exits.txt"
done
