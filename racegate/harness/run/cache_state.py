"""Compile-cache states (cold, warm, deleted): a run's private dirs, their env, and the proof.

Every place torch, triton, CUDA or Python would write under TMPDIR, ~/.cache or ~/.triton is
pointed into the run's own 0700 root (`private_env`); the states use torch's own settings and
counters (`torch._dynamo.utils.counters`).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import stat
from pathlib import Path
from typing import Any


def private_dir(path: Path, *, exist_ok: bool = False) -> Path:
    """Make `path` a directory of this user's, mode 0700, refusing a symlink or a foreign one.

    mkdir never follows a symlink at `path`; the lstat after it catches one planted before
    (exist_ok) or a directory someone else owns or can write.
    """
    try:
        os.mkdir(path, 0o700)
    except FileExistsError:
        if not exist_ok:
            raise
    st = os.lstat(path)
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid() or st.st_mode & 0o077:
        raise PermissionError(
            f"{path} is not a private directory of this user (a symlink, foreign or shared): "
            "remove it or choose another work dir"
        )
    return path


# Variable → folder under the run's root. The tmp dirs matter as much as the named caches:
# inductor writes precompiled headers under <tmp>/torchinductor_<user> whatever
# TORCHINDUCTOR_CACHE_DIR says, and triton defaults to ~/.triton.
PRIVATE_DIRS: dict[str, str] = {
    "TORCHINDUCTOR_CACHE_DIR": "inductor",
    "TRITON_CACHE_DIR": "triton/cache",
    "TRITON_HOME": "triton",
    "TRITON_DUMP_DIR": "triton/dump",
    "TRITON_OVERRIDE_DIR": "triton/override",
    "TORCH_EXTENSIONS_DIR": "torch_extensions",
    "CUDA_CACHE_PATH": "cuda",
    "PYTORCH_KERNEL_CACHE_PATH": "torch_kernels",
    "TORCH_HOME": "torch_home",
    "TMPDIR": "tmp",
    "TMP": "tmp",
    "TEMP": "tmp",
    "XDG_CACHE_HOME": "xdg/cache",
    "XDG_CONFIG_HOME": "xdg/config",
    "XDG_DATA_HOME": "xdg/data",
    "XDG_STATE_HOME": "xdg/state",
    "MPLCONFIGDIR": "xdg/matplotlib",
}
# The compile caches a `deleted` state removes (the tmp and XDG dirs hold no compiled code).
_CACHE_TREES = ("inductor", "triton", "torch_extensions", "cuda", "torch_kernels")


def private_env(root: Path) -> dict[str, str]:
    """Environment pointing every cache and temp dir of a child at `root` (dirs created 0700)."""
    env = {}
    for var, sub in PRIVATE_DIRS.items():
        path = root
        for part in sub.split("/"):
            path = private_dir(path / part, exist_ok=True)
        env[var] = str(path)
    # Make the persistent caches explicit: the warm state depends on them being on.
    env["TORCHINDUCTOR_FX_GRAPH_CACHE"] = "1"
    env["TORCHINDUCTOR_AUTOGRAD_CACHE"] = "1"
    return env


def overridden(private: dict[str, str], user: dict[str, str]) -> dict[str, str]:
    """The user's own value of each variable the private environment replaces."""
    return {k: user[k] for k in sorted(private) if k in user and user[k] != private[k]}


def delete_cache(root: Path) -> int:
    """Remove every cache tree under `root` (the `deleted` state); returns bytes removed."""
    removed = 0
    # Not the run's TMPDIR: inductor remembers in-process that its CPU precompiled header exists
    # there, so removing it fails every later C++ compile of the run (CppCompileError, seen on
    # CPU torch 2.13), a failure of the harness's deletion rather than of the cache state.
    trees = [root / sub for sub in _CACHE_TREES]
    for tree in trees:
        if tree.is_dir() and not tree.is_symlink():
            removed += tree_size(tree)
            shutil.rmtree(tree, ignore_errors=True)
    return removed


def tree_size(path: Path) -> int:
    total = 0
    for dirpath, _, files in os.walk(path):
        for name in files:
            with contextlib.suppress(OSError):
                total += (Path(dirpath) / name).stat().st_size
    return total


def cache_counters() -> dict[str, int]:
    """Cache hit/miss counters this process has seen (inductor FX graph, AOTAutograd)."""
    from torch._dynamo.utils import counters

    out: dict[str, int] = {}
    for group in ("inductor", "aot_autograd"):
        for key, value in counters[group].items():
            if "cache" in key:
                out[f"{group}.{key}"] = int(value)
    return out


def proves_warm(counters: dict[str, Any]) -> bool:
    """A warm run hit the FX-graph cache at least once and never missed it."""
    hits = int(counters.get("inductor.fxgraph_cache_hit", 0))
    misses = int(counters.get("inductor.fxgraph_cache_miss", 0))
    return hits > 0 and misses == 0
