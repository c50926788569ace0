"""Compile-cache states (cold, warm, deleted): private cache dirs, their env, and the proof.

Uses torch's own settings (TORCHINDUCTOR_CACHE_DIR, TRITON_CACHE_DIR, the FX-graph and
AOTAutograd caches) and counters (`torch._dynamo.utils.counters`), never the shared
default under /tmp.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any


def make_private_cache(base: Path | None = None) -> Path:
    """A new, empty cache root with mode 0700 (mkdtemp's), under `base` or the system temp dir."""
    if base is not None:
        base.mkdir(parents=True, exist_ok=True)
    return Path(tempfile.mkdtemp(prefix="racegate-cache-", dir=base))


def cache_env(root: Path) -> dict[str, str]:
    """Environment that points every compile cache of a child process at `root`."""
    return {
        "TORCHINDUCTOR_CACHE_DIR": str(root / "inductor"),
        "TRITON_CACHE_DIR": str(root / "triton"),
        "TORCH_EXTENSIONS_DIR": str(root / "torch_extensions"),
        # Make the persistent caches explicit: the warm state depends on them being on.
        "TORCHINDUCTOR_FX_GRAPH_CACHE": "1",
        "TORCHINDUCTOR_AUTOGRAD_CACHE": "1",
    }


def delete_cache(root: Path) -> int:
    """Remove every cache tree under `root` (the `deleted` state); returns bytes removed."""
    removed = 0
    for sub in ("inductor", "triton", "torch_extensions"):
        tree = root / sub
        if tree.exists():
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
