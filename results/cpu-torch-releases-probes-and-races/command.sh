#!/bin/bash
# Every command that made this folder, in the order they ran, from the repo root. Reconstructed
# (this file did not exist then) from README.md and the logs: nox-cold.log, followups.log and
# nox-incident.log give the cells, their order and their times; each script called here is the
# one that ran. Code at b436e79 for steps 1-3, 468c9a2 for step 4 (README, "Commands").
# $VENVS: the folder of the pre-built venvs v2100 v2110 v2121 v214 v215 vtf5.6.0 vtf5.8.1 (the
# recording machine's temp dir).
set -u
cd "$(dirname "$0")/../.."  # the repo root
M=results/cpu-torch-releases-probes-and-races
VENVS="${VENVS:?set VENVS: the folder of the pre-built venvs}"
export VENVS

# 0. Earlier, before nox ran the cells: the non-nox cells (cells.log) and the crashed case's rerun.
bash $M/run_matrix.sh
bash $M/rerun.sh

# 1. Seed nox's shared torch folders from those venvs instead of downloading them again.
for p in v2100:2.10.0 v2110:2.11.0 v2121:2.12.1 v214:2.14.1 v215:2.15.0; do
  .venv/bin/python $M/seed_torch.py "$VENVS/${p%%:*}/lib/python3.11/site-packages" ".nox/_torch/${p##*:}"
done
.venv/bin/python $M/seed_torch.py .venv/lib/python3.11/site-packages .nox/_torch/2.13.0

# 2. The cold matrix: the 14 cells never run before, one nox call each (06:39:46 - 07:02:22).
bash $M/run_nox_matrix.sh $M/nox-cold.log \
  "2.10.0 5.6.0" "2.10.0 5.8.1" "2.12.1 5.6.0" "2.12.1 5.8.1" "2.14.1 5.6.0" "2.14.1 5.8.1" \
  "2.15.0 5.6.0" "2.15.0 5.8.1" "2.10.0 5.24.0" "2.11.0 5.24.0" "2.15.0 5.24.0" "2.12.1 5.24.0" \
  "2.13.0 5.24.0" "2.14.1 5.24.0"

# 3. Follow-ups: warm reruns, a runner with nothing seeded, per_device repeats (07:02:27 - 07:12:42).
bash $M/run_followups.sh

# 4. The incident cells through nox (07:12:48 - 07:21:49).
RACEGATE_RESULTS_DIR=$PWD/$M/nox-incident-cells bash $M/run_nox_matrix.sh $M/nox-incident.log \
  "2.11.0 5.6.0" "2.11.0 5.8.1" "2.13.0 5.6.0" "2.13.0 5.8.1"

# 5. All 18 cells warm, collecting only (the last line of followups.log).
s=$(date +%s.%N)
.venv/bin/python -m nox -s cpu_matrix -- --collect-only -q > $M/warm-matrix-collect-only.out 2>&1
printf 'nox -s cpu_matrix -- --collect-only -q: rc=%s wall=%.1f\n' "$?" \
  "$(echo "$(date +%s.%N) - $s" | bc)" >> $M/followups.log

# 6. The report over every record here, and the per-cell lines of README's table.
.venv/bin/python -m harness report $M --out-dir $M/report
(cd $M && ../../.venv/bin/python summarize.py cpu_matrix-* nox-incident-cells/*)

# 7. The 2.10/2.11 crash without racegate, in six of the cells' venvs (repro_device_guard.log;
#    the log names the script without its folder).
for cell in 2-10-0-transformers-5-6-0 2-11-0-transformers-5-24-0 2-12-1-transformers-5-6-0 \
    2-13-0-transformers-5-24-0 2-14-1-transformers-5-6-0 2-15-0-transformers-5-6-0; do
  py=.nox/cpu_matrix-torch-$cell/bin/python
  echo "\$ $py repro_device_guard.py" >> $M/repro_device_guard.log
  $py $M/repro_device_guard.py >> $M/repro_device_guard.log 2>&1
  echo "exit status $?" >> $M/repro_device_guard.log
done
