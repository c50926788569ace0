#!/usr/bin/env bash
# Where a preset's run-to-run noise comes from, on one GPU: runs alone on GPU 0, one thread,
# PRESET (default `small`), 60 steady steps, configurations interleaved in rotated order:
#   race     the A/B's run args: the recompile schedule, the race cases' 10 µs GIL slice
#   trainer  --schedule barrier --switch-interval 0.005 (one shape, Python's default slice)
#   long     trainer with 240 steady steps, not 60 (does the noise average out within a run?)
#   pinned   trainer, the whole run (child and compile workers) on one core: taskset -c $CORE
# Beside the runs: the GPU's clocks, power, utilisation and throttle reasons every 250 ms
# (nvidia-smi), and /proc/stat's CPU line every second (steal time: a shared host), so a
# plateau in a run's step times can be set against them. Use it before trusting an A/B of a
# host-bound preset: the table says how many runs a side a 5% call needs.
#   OUT=<empty dir> [PRESET=small] [ROUNDS=3] bash benchmarks/run_noise.sh
#   python3 benchmarks/run_noise_table.py <unpacked dir>     # the table
set -uo pipefail
source "$(dirname "$0")/device_call.sh"  # $OUT, cd to the repo, $W (packed), log
ROUNDS=${ROUNDS:-3}
CORE=${CORE:-4}
CALL_S=${CALL_S:-540}
deadline=$((SECONDS + CALL_S))
BASE=(--preset "${PRESET:-small}" --devices 0 --threads-per-device 1 --steps 60 --warmup-steps 3
  --strategy warmup_locked --cache-states cold --repeat 1 --timeout 150)
TRAINER=(--schedule barrier --switch-interval 0.005)
nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu,utilization.gpu,clocks_throttle_reasons.active \
  --format=csv -lms 250 >"$W/gpu.csv" 2>&1 &
smi=$!
(while :; do echo "$(date +%s.%N) $(head -1 /proc/stat)"; sleep 1; done) >"$W/procstat.txt" &
stat=$!
trap 'kill $smi $stat 2>/dev/null; _device_pack' EXIT
configs=(race trainer long pinned)
for ((r = 0; r < ROUNDS; r++)); do
  for k in 0 1 2 3; do
    c=${configs[$(((r + k) % 4))]}
    ((deadline - SECONDS < 45)) && { log "stop: $((deadline - SECONDS)) s left"; break 2; }
    case $c in
      race) cmd=(python3 -m racegate run "${BASE[@]}") ;;
      trainer) cmd=(python3 -m racegate run "${BASE[@]}" "${TRAINER[@]}") ;;
      long) cmd=(python3 -m racegate run "${BASE[@]}" "${TRAINER[@]}" --steps 240) ;;
      pinned) cmd=(taskset -c "$CORE" python3 -m racegate run "${BASE[@]}" "${TRAINER[@]}") ;;
    esac
    log "round $((r + 1)) $c: start"
    t=$SECONDS
    timeout -k 10 170 "${cmd[@]}" --out "$W/$c.jsonl" >"$W/$c-$((r + 1)).log" 2>&1
    log "round $((r + 1)) $c: exit $? after $((SECONDS - t)) s"
  done
done
python3 benchmarks/run_noise_table.py "$W" | tee "$W/summary.txt"
