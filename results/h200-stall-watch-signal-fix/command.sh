#!/usr/bin/env bash
# One device call (nvidia-h200): the cell of results/h200-cell-stall-watch/command.sh again,
# now that the stall watch asks for dumps on SIGRTMIN+3 (its SIGUSR1 dumps never landed on the
# GPU: LLVM in triton takes SIGUSR1 at the first compile), then, in what is left of the call,
# detection runs for issue 20: per_device and singleton, 2 threads on cuda:0, each cache state,
# the stall watch on (default 15 s), records appended as they land.
#   OUT=<empty dir> bash results/h200-stall-watch-signal-fix/command.sh
set -uo pipefail
OUT="$(cd "${OUT:?set OUT}" && pwd)" || exit 2
cd "$(dirname "$0")/../.."
t0=$SECONDS
OUT="$OUT" BUDGET="${BUDGET:-470}" bash results/h200-cell-stall-watch/command.sh
left=$((${CALL_S:-585} - (SECONDS - t0)))
echo "detection: ${left} s left" | tee -a "$OUT/session.log"
if ((left > 60)); then
  timeout -s INT -k 10 "$left" env PYTHONUNBUFFERED=1 TORCHINDUCTOR_COMPILE_THREADS=2 \
    python3 -m harness run --preset small --devices 0 --strategies per_device,singleton \
    --threads-per-device 2 --cache-states cold,warm,deleted --switch-interval 1e-5 \
    --run-timeout 80 --jobs 16 --repeat 8 --results "$OUT/detection.jsonl" >"$OUT/detection.log" 2>&1
  echo "detection exit $? after $((SECONDS - t0)) s" | tee -a "$OUT/session.log"
fi
