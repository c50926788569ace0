#!/bin/bash
# The main command beside an older racegate, each alone on the machine, in turns: issue 55's
# "measured beside the current code". One device call fits one pair (each ~250-330 s on one
# H100/H200 at 9621b56); run it once per pair, the same warm machine where it can be.
#
# Here, before the call (the older code travels as an ignored folder; results/ stays behind):
#   rm -rf .probe/old && mkdir -p .probe/old && git archive OLD_COMMIT -- . ':!results' |
#     tar x -C .probe/old
# The call (device tool, carry [".probe"]):
#   OUT=$OUT bash benchmarks/main_command_beside.sh [new-first|old-first]
# Each side: `python3 bootstrap.py race --results=...` with this image's python (host mode,
# sized to the host), its wall from start to exit, its last line, and its records; packed
# into $OUT/all.tar.gz with a summary.txt (side, wall, exit, last line).
set -u
source "$(dirname "$0")/device_call.sh"
order=${1:-new-first}
old=$PWD/.probe/old
[ -f "$old/bootstrap.py" ] || { log "no older code in $old (see the header)"; exit 2; }
one() {  # SIDE DIR
  local side=$1 dir=$2 start rc
  log "start $side ($dir)"
  start=$(date +%s.%N)
  (cd "$dir" && timeout -s INT 290 python3 bootstrap.py race --results="$W/$side.jsonl") \
    >"$W/$side.log" 2>&1
  rc=$?
  printf '%s wall %.1f s exit %s: %s\n' "$side" "$(echo "$(date +%s.%N) - $start" | bc)" \
    "$rc" "$(tail -n 1 "$W/$side.log")" | tee -a "$W/summary.txt"
}
if [ "$order" = old-first ]; then
  one old "$old"; one new "$PWD"
else
  one new "$PWD"; one old "$old"
fi
