"""Reads what a process runs on: installed versions and hardware, with one marker for missing.

Every reader in racegate (the worker's report, the runner's fallback for a child that never
reported, the pytest plugin, the probes, `nox`'s cell check through `python -m
racegate.harness.scenario.versions`) goes through here, so a record, a probe result and a cell agree
on what "torch 2.13.0+cpu" or "no triton" looks like: a package that is not installed is `ABSENT`.
"""

from __future__ import annotations

import contextlib
import json
import os
import platform
import sys
from importlib import metadata
from typing import Any

ABSENT = "absent"  # the one marker for a package (or CUDA) that is not there

# Module name -> the distributions that may provide it (nightly torch ships triton as
# pytorch-triton); the first one installed is the version.
DISTRIBUTIONS: dict[str, tuple[str, ...]] = {
    "torch": ("torch",),
    "transformers": ("transformers",),
    "triton": ("triton", "pytorch-triton", "pytorch-triton-rocm"),
}


def _version(module: str) -> str:
    """The imported module's own `__version__` if it is loaded (what actually ran), else the
    installed metadata (no import: importing transformers takes seconds), else ABSENT."""
    loaded = sys.modules.get(module)
    if loaded is not None and isinstance(getattr(loaded, "__version__", None), str):
        return str(loaded.__version__)
    for dist in DISTRIBUTIONS[module]:
        try:
            return metadata.version(dist)
        except metadata.PackageNotFoundError:
            continue
    return ABSENT


def software(*, import_torch: bool = False) -> dict[str, str]:
    """python, torch (with its build tag, +cu130), cuda, transformers, triton; ABSENT if missing.

    `cuda` is known only once torch is imported (`import_torch` imports it first when it is
    installed); without it, and on CPU torch, it is ABSENT.
    """
    if import_torch and "torch" not in sys.modules:
        with contextlib.suppress(ImportError):
            import torch  # noqa: F401
    out = {"python": platform.python_version()}
    for module in DISTRIBUTIONS:
        out[module] = _version(module)
    torch_mod = sys.modules.get("torch")
    cuda = getattr(getattr(torch_mod, "version", None), "cuda", None)
    out["cuda"] = str(cuda) if cuda else ABSENT
    return out


def _gpu_uuid(device: Any) -> str | None:
    """The GPU's UUID as nvidia-smi -L shows it (`GPU-` + torch's 8-4-4-4-12 hex), or None
    where this torch build's device properties have none."""
    import torch

    uuid = getattr(torch.cuda.get_device_properties(device), "uuid", None)
    if uuid is None:
        return None
    text = str(uuid)
    return text if text.startswith("GPU-") else f"GPU-{text}"


def hardware(devices: tuple[str, ...] = ()) -> dict[str, Any]:
    """cpu_count, cuda_device_count, and the names and UUIDs of `devices`' GPUs (imports torch).

    The UUIDs tell one GPU from another of the same name: racegate.harness.ab's sides must step on
    the same one."""
    import torch

    info: dict[str, Any] = {"cpu_count": os.cpu_count(), "cuda_device_count": 0}
    if torch.cuda.is_available():
        info["cuda_device_count"] = torch.cuda.device_count()
        gpus = [torch.device(d) for d in devices if d != "cpu"]
        names = [torch.cuda.get_device_name(d) for d in gpus]
        info["device_names"] = names
        info["device_name"] = names[0] if names else "cpu"
        info["device_uuids"] = [_gpu_uuid(d) for d in gpus]
    else:
        info["device_name"] = "cpu"
    return info


if (
    __name__ == "__main__"
):  # `python -m racegate.harness.scenario.versions`: what noxfile's cell check reads
    print(json.dumps(software(import_torch="--import-torch" in sys.argv[1:])))
