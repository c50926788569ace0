#!/bin/bash
# The trials in trials.tsv, in its order (reconstructed from trials.tsv and README.md: the session
# ran them by hand, the `retry` and `lock` variants added to the script midway, so early trials
# ran an older scripts/guard_lookup_race.py; see its git log). One line per trial: the python,
# the variant, the trial number and what the script printed. $PY_2110 and $PY_215: pythons with
# torch 2.11.0 and 2.15.0 (venvs outside the repo; in trials.tsv under the recording machine's
# paths); the repo's .venv has 2.13.0.
set -u
cd "$(dirname "$0")/../.."  # the repo root
PY_2110="${PY_2110:?set PY_2110: a python with torch 2.11.0}"
PY_215="${PY_215:?set PY_215: a python with torch 2.15.0}"
T=results/guard-lookup-spurious-miss/trials.tsv
trials() {  # trials <python> <count> <variant...>
  local py=$1 n=$2; shift 2
  for i in $(seq 1 "$n"); do
    printf '%s\t%s\t%s\t%s\n' "$py" "$*" "$i" \
      "$("$py" scripts/guard_lookup_race.py 5000 "$@" 2>&1 | head -1)" >> "$T"
  done
}
trials "$PY_2110" 6 one
trials "$PY_2110" 6 one static
trials "$PY_2110" 4 two
trials "$PY_2110" 4 one retry
trials "$PY_215" 4 one
trials "$PY_215" 4 one static
trials "$PY_215" 4 one retry
trials .venv/bin/python 4 one
trials "$PY_2110" 3 one default
trials "$PY_2110" 6 one lock
trials "$PY_215" 4 one lock
