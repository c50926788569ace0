"""How many race cases run side by side on this host: the pytest-xdist arguments of the race
selection (bootstrap.py's `race` and `racegate race`), sized to its cores and GPUs.

Standard library only: bootstrap.py imports it before any environment exists.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Sequence

# GPU memory one race case may hold on each GPU it uses: the worst `small` race run on 2xH200
# peaked at 10.4 GiB on one device (results/h200x2-warmup-races,
# h200x2-warmup-locked-production, h200x2-transformers-matrix; median 4.4 GiB), plus its CUDA
# context.
RACE_CASE_GPU_BYTES = 12 * 2**30
# pytest's spelling of --share-gpus (racegate.harness.doors.options.PYTEST_FLAGS).
SHARE_GPUS = "--racegate-share-gpus"


def host_race_workers(cores: int, gpus: int, gpu_bytes: int) -> int:
    """Race cases at once: min(cores × 3 // 8, GPU memory // 12 GiB × GPUs), never below 1.

    Cores: a case's run is a fresh process that imports torch, steps two threads and compiles
    with inductor's workers; 16 cores are busy with about 6 such runs, and more only stretch
    each run. One H100 with 16 cores, the main command at c45484e: at 6 cases
    67 runs in 307 s, a warm production run 13.9 s (median of 12); at 8 (`-n 8`, what
    cores // 2 gave an H200) 64 runs in 320 s, 18.6 s; the same in an earlier pair, one H200 at
    8 against one H100 at 6 (24.7 s against 18.6 s: results/one-gpu-command-times). Longer
    runs lengthen the chain the wall hangs on: a cell's control runs, then its production runs.
    GPU memory: the smallest GPU's over RACE_CASE_GPU_BYTES, times the GPUs (--share-gpus
    spreads the cases over them). One H200 or one H100 with 16 cores: min(6, 11) and
    min(6, 6) = 6; 2xH200 (~140 GiB each, 32 cores): min(12, 22) = 12 (the nox cells of
    results/h200x2-transformers-matrix ran 16 at cores // 2); the 2-core CPU box: 1. No GPU or
    unknown memory (0 bytes): the cores' bound. bootstrap.py's race selection and the nox cells
    (nox_support.py) both size with this rule.
    """
    by_cores = cores * 3 // 8
    by_memory = (gpu_bytes // RACE_CASE_GPU_BYTES) * gpus if gpu_bytes else by_cores
    return max(1, min(by_cores, by_memory))


def gpus_here() -> tuple[int, int]:
    """(CUDA GPUs visible, the smallest one's memory in bytes) from nvidia-smi; (0, 0) without.
    CUDA is not initialised here (the cases' children use the GPUs)."""
    if shutil.which("nvidia-smi") is None:
        return 0, 0
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=memory.total", "--format=csv,noheader,nounits"],
            capture_output=True, text=True, timeout=30, check=True,
        ).stdout  # fmt: skip
    except (OSError, subprocess.SubprocessError):
        return 0, 0
    mib = [int(x) for x in out.split() if x.strip().isdigit()]
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    n = len(mib) if visible is None else min(len(mib), len([v for v in visible.split(",") if v]))
    return n, (min(mib) * 2**20 if mib and n else 0)


def chooses_workers(args: Sequence[str]) -> bool:
    """The user's pytest arguments already say how to run (-n, --numprocesses, --dist, or
    pytest-xdist disabled): sizing adds nothing then."""
    for i, a in enumerate(args):
        if a in ("-n", "--numprocesses", "--dist") or a.startswith(("--numprocesses=", "--dist=")):
            return True
        if a.startswith("-n") and a[2:].lstrip("=").isalnum():
            return True
        if (a == "no:xdist" and i and args[i - 1] == "-p") or a == "-pno:xdist":
            return True
    return False


def race_args(user_args: Sequence[str]) -> tuple[list[str], str]:
    """(pytest arguments to add, one line saying why) for the race selection on this host.

    Cases run side by side under pytest-xdist with --share-gpus on a GPU host (every worker
    uses every GPU, so two-GPU cases keep both); each cell's control case and the production
    case beside it are collected first (racegate.cases.plan.case_order) and pytest-xdist hands
    cases out in that order.
    Outcomes stay valid side by side; throughput cases, whose timings would not, skip under -n.
    """
    if chooses_workers(user_args):
        return [], "side by side: as your -n/--dist/-p says"
    workers, gpus, where = host()
    if workers < 2:
        return [], f"one case at a time ({where}); the control's cases first"
    args = worker_args(workers, gpus)
    return args, f"{workers} cases side by side ({where}: {' '.join(args)}); the control's first"


def host() -> tuple[int, int, str]:
    """(race cases at once here, GPUs, the host in words: 'CPU, 2 cores')."""
    cores = len(os.sched_getaffinity(0))
    gpus, gpu_bytes = gpus_here()
    where = f"{gpus} GPU(s), {cores} cores" if gpus else f"CPU, {cores} cores"
    return host_race_workers(cores, gpus, gpu_bytes), gpus, where


def worker_args(workers: int, gpus: int) -> list[str]:
    """pytest-xdist arguments for `workers` race cases at once (every GPU shared by all)."""
    return ["-n", str(workers), *([SHARE_GPUS] if gpus else [])]
