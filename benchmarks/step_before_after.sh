#!/usr/bin/env bash
# One device call on one GPU: the 8B drafter step of the tree before a change (the reference)
# against this tree's (the candidate), as the gate's A/B measures it. `python -m racegate.harness.ab
# compare` runs `harness run --preset qwen3-8b-drafter --strategy warmup_locked`, one thread on
# device 0, 10 steps (2 warm-up) on the barrier schedule (the throughput floors' key, and a
# steady series of peaks on one shape, so each run records its memory growth), a fresh process
# per run, interleaved A B B A A B ...: steady tokens/s, peak memory per device and its growth
# per run, the ratio with its 95% interval and the call. The before tree is a tarball, since
# the device gets the working tree without .git; make it here first (an ignored folder):
#   mkdir -p .whl && git archive -o .whl/before.tar <commit> -- . ':(exclude)results'
# then carry .whl. Out: $OUT/summary.txt (per-run table, medians, ratios, the A/B's lines),
# $OUT/runs.json (tokens/s, peak memory per device, growth, wall per run), $OUT/ab.json, and
# everything (records, logs) in $OUT/all.tar.gz.
#   OUT=<empty dir> [RUNS=2] [BUDGET=420] [BEFORE_TAR=.whl/before.tar] [PY=python3] \
#     bash benchmarks/step_before_after.sh
# DRY=1: the same logic on CPU with the tiny preset (sdpa_dense, no compile), two runs a side,
# one intra-op thread each: a check of the script in a few minutes, no GPU and no numbers.
# BUDGET (s) bounds the A/B: at it the A/B is interrupted (SIGINT), and the runs made are
# compared and kept (marked interrupted, no call) when each side has two.
set -uo pipefail
source "$(dirname "$0")/device_call.sh" # $OUT, cd to the repo, $W (packed), log, scratch
PY=${PY:-python3}
tar_path=${BEFORE_TAR:-.whl/before.tar}
if [[ ! -f $tar_path ]]; then
  log "no before tree: $tar_path is missing (make it with git archive, header of $0)"
  exit 2
fi
scratch BEFORE
mkdir -p "$BEFORE/tree" && tar -xf "$tar_path" -C "$BEFORE/tree" || exit 2
# The reference's "python": the same interpreter, started in the before tree, so its
# `-m racegate` (and model/) are that tree's; racegate.harness.ab starts every run in this tree.
printf '#!/bin/sh\ncd "%s" || exit 2\nexec "%s" "$@"\n' "$BEFORE/tree" "$(command -v "$PY")" \
  >"$BEFORE/python"
chmod 700 "$BEFORE/python"
if [[ ${DRY:-0} == 1 ]]; then
  runs=${RUNS:-2}
  args=(--preset tiny --strategy sdpa_dense --threads-per-device 1 --steps 12 --warmup-steps 2
    --schedule barrier)
  envs=(--reference-env OMP_NUM_THREADS=1 --candidate-env OMP_NUM_THREADS=1)
else
  runs=${RUNS:-2} # an 8B run is ≈ 75 s from the A/B's side (cold compile): 3 a side won't fit
  args=(--preset qwen3-8b-drafter --devices 0 --strategy warmup_locked --threads-per-device 1
    --steps 10 --warmup-steps 2 --schedule barrier)
  envs=()
fi
log "before: $tar_path -> $BEFORE/tree; $runs runs a side; harness run ${args[*]}"
where='import racegate.harness, racegate.model; print(racegate.harness.__file__, racegate.model.__file__)'
log "reference imports $("$BEFORE/python" -c "$where" 2>&1 | tail -n 1)"
log "candidate imports $("$PY" -c "$where" 2>&1 | tail -n 1)"
timeout -s INT -k 60 "${BUDGET:-420}" "$PY" -m racegate.harness.ab compare --reference "$BEFORE/python" \
  --candidate "$(command -v "$PY")" --runs "$runs" --run-timeout 240 "${envs[@]}" \
  --records "$W/records" --out "$W/ab.json" -- "${args[@]}" >"$W/ab.txt" 2>"$W/ab.log"
log "racegate.harness.ab compare rc=$? (0: no regression, 1: a regression or a failed/interrupted A/B)"
"$PY" - "$W" >"$W/summary.txt" 2>&1 <<'EOF'
"""Per-run numbers of the A/B (reference = before, candidate = this tree), medians, ratios."""
import json
import statistics
import sys
from pathlib import Path

from racegate.harness.run.record import read_jsonl

w, gib = Path(sys.argv[1]), 2**30
runs = []
for side, tree in (("reference", "before"), ("candidate", "after")):
    path = w / "records" / f"{side}.jsonl"
    for k, r in enumerate(read_jsonl(path) if path.exists() else []):
        runs.append({
            "side": side, "tree": tree, "run": k + 1, "outcome": r.outcome,
            "tokens_per_s": r.tokens_per_s, "mfu": r.mfu, "peak_mem_bytes": r.peak_mem_bytes,
            "mem_growth": r.mem_growth, "mem_series": r.mem_series, "wall_s": r.wall_s,
            "compile_s": r.compile_s, "device": r.hardware.device_name,
            "versions": r.versions.to_json(),
        })
(w / "runs.json").write_text(json.dumps(runs, indent=1) + "\n")
print("| tree | run | outcome | tokens/s | MFU | peak memory | growth | wall s |")
print("|---|---|---|---|---|---|---|---|")
for x in runs:
    peaks = ", ".join(f"{d} {b / gib:.2f} GiB" for d, b in x["peak_mem_bytes"].items()) or "-"
    tps, mfu, g = x["tokens_per_s"], x["mfu"], x["mem_growth"]
    print(f"| {x['tree']} | {x['run']} | {x['outcome']} | {tps or 0:,.0f} | "
          f"{'-' if mfu is None else f'{mfu:.1%}'} | {peaks} | "
          f"{'-' if g is None else f'{g:+.2%}'} | {x['wall_s']:.0f} |")
med = {}
for tree in ("before", "after"):
    mine = [x for x in runs if x["tree"] == tree and x["tokens_per_s"]]
    peak = [sum(x["peak_mem_bytes"].values()) for x in mine if x["peak_mem_bytes"]]
    med[tree] = (statistics.median(x["tokens_per_s"] for x in mine) if mine else None,
                 statistics.median(peak) if peak else None)
    tps, mem = med[tree]
    tps_text = "-" if tps is None else f"{tps:,.0f}"
    mem_text = "-" if mem is None else f"{mem / gib:.2f} GiB"
    print(f"{tree}: {len(mine)} runs, median {tps_text} tokens/s, median peak {mem_text}")
(bt, bm), (at, am) = med["before"], med["after"]
if bt and at:
    print(f"after / before, medians: tokens/s {at / bt:.3f}x"
          + (f", peak memory {am / bm:.3f}x ({(am - bm) / gib:+.2f} GiB)" if bm and am else ""))
EOF
cat "$W/ab.txt" >>"$W/summary.txt"
cp "$W/summary.txt" "$W/runs.json" "$OUT/" 2>/dev/null
cp "$W/ab.json" "$OUT/" 2>/dev/null || log "no ab.json: $(tail -n 3 "$W/ab.log")"
cat "$W/summary.txt"
