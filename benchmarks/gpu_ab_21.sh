#!/usr/bin/env bash
# Issue 21's version A/B on one H200, through `nox -s gpu_ab` itself: each CANDIDATE
# transformers release against the reference (the runner image's torch with transformers
# 5.6.0, noxfile.AB_REFERENCE), interleaved runs on GPU 0, RUNS per side (RACEGATE_AB_RUNS), for
# PRESET. Wheels: .whl (nox and its deps) and .whl-ab (transformers 5.6.0 and 5.8.1, tokenizers
# 0.22.2) carried, merged here into one wheelhouse for RACEGATE_WHEELHOUSE. Everything is
# packed into $OUT/all.tar.gz at exit (the device returns at most 8 files), with summary.txt
# beside it.
#   OUT=<empty dir> PRESET=small CANDIDATES="5.8.1 5.17.0" RUNS=5 bash benchmarks/gpu_ab_21.sh
#   OUT=<empty dir> PRESET=qwen3-8b-drafter CANDIDATES=5.8.1 RUNS=3 bash benchmarks/gpu_ab_21.sh
# Cost, measured (results/2026-12-02-h200-ab): `small` ≈ 53 s a run from process start to exit
# (31-40 s of it in the record's wall_s), so one A/B is ~36 s of venv builds + 2 × RUNS × 53 s:
# RUNS=5 needs AB_S ≥ 580. The 8B: ≈ 55 s of wall_s a run (3 steady steps), plus its start.
set -uo pipefail
source "$(dirname "$0")/device_call.sh"  # $OUT, cd to the repo, $W (packed), log, scratch
PRESET=${PRESET:-small}
RUNS=${RUNS:-5}
export RACEGATE_AB_RUNS=$RUNS
# The merged wheelhouse is scratch, not in $W: inside, it went into the pack (30 MB, over the
# device's 16 MiB a file) and the pack did not come back (session 9, small vs 5.8.1).
scratch WHEELS
cp .whl/*.whl .whl-ab/*.whl "$WHEELS"/ || { log "carry .whl and .whl-ab"; exit 2; }
scratch SITE
python3 -m pip install -q --no-index --no-deps --target "$SITE" .whl/*.whl >>"$W/session.log" 2>&1
case $PRESET in
  small) RUN_ARGS=(--preset small --devices 0 --threads-per-device 1 --steps 60 --warmup-steps 3) ;;
  *) RUN_ARGS=(--preset "$PRESET" --devices 0 --threads-per-device 1 --steps 3 --warmup-steps 2) ;;
esac
for cand in ${CANDIDATES:-5.8.1 5.17.0}; do
  dir="$W/$PRESET-$cand"
  mkdir -p "$dir"
  log "A/B $PRESET: transformers $cand against the reference: start"
  timeout -s INT -k 20 "${AB_S:-900}" env PYTHONPATH="$SITE" RACEGATE_WHEELHOUSE="$WHEELS" \
    RACEGATE_RESULTS_DIR="$dir" python3 -m nox -s "gpu_ab(torch='system', transformers='$cand')" \
    -- "${RUN_ARGS[@]}" >"$dir/nox.log" 2>&1
  log "A/B $PRESET $cand: nox exit $?"
  {
    echo "## $PRESET: transformers $cand vs the reference"
    grep -E "tokens_per_s|peak_mem|A/B|slower|faster|no significant|run [0-9]+/" "$dir/nox.log" | tail -20
  } >>"$W/summary.txt"
done
cat "$W/summary.txt"
