# Sourced by the GPU scripts that run as one remote call (builtin_vs_independent.sh,
# run_noise.sh): a private work dir, packed into one file at exit, because the remote GPU
# service they were written for returns at most 8 files (16 MiB each) from $OUT.
#
# A script sources it first, before any cd: `source "$(dirname "$0")/device_call.sh"`. OUT
# (an empty dir, relative to where the script was started) is made absolute, then the shell
# moves to the repository root. After that:
#   $OUT   absolute;  $W  a fresh 0700 dir (mktemp: no predictable /tmp name) for everything
#   log MSG            "[hh:mm:ss +Ns] MSG" to stdout and $W/session.log
#   scratch NAME       NAME=another fresh dir, removed at exit and never packed (wheels, copies)
#   $W/env.txt         date, commit, GPUs, cores, python / torch / transformers
# At exit, $W is packed into $OUT/all.tar.gz, with $W/summary.txt (if any) copied beside it.
OUT="$(cd "${OUT:?set OUT to an empty dir}" && pwd)" || exit 2
cd "$(dirname "${BASH_SOURCE[0]}")/.." || exit 2
export PYTHONUNBUFFERED=1 TORCHINDUCTOR_COMPILE_THREADS=${TORCHINDUCTOR_COMPILE_THREADS:-2}
W=$(mktemp -d) || exit 2
_device_dirs=("$W")
_device_pack() {
  cp "$W/summary.txt" "$OUT/" 2>/dev/null
  tar czf "$OUT/all.tar.gz" -C "$W" .
  rm -rf "${_device_dirs[@]}"
}
trap _device_pack EXIT
scratch() {
  local dir
  dir=$(mktemp -d) || exit 2
  _device_dirs+=("$dir")
  printf -v "$1" %s "$dir"
}
t0=$SECONDS
log() { echo "[$(date -u +%T) +$((SECONDS - t0))s] $*" | tee -a "$W/session.log"; }
{
  date -u +%FT%TZ
  git rev-parse HEAD 2>/dev/null || echo "commit unknown"
  nvidia-smi -L
  nproc
  python3 -c 'import sys, torch, transformers as t; print("python", sys.version.split()[0],
    "torch", torch.__version__, "transformers", t.__version__)'
} >"$W/env.txt" 2>&1
