"""Compile strategies by name (docs/vocabulary.md): a replica's attention kernel and mask kind.

The harness, not the model, runs `warmup`'s single-threaded warm-up and sets the stance.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from racegate.harness.scenario.vocab import STRATEGIES as REGISTRY
from racegate.harness.scenario.vocab import Strategy, strategies_where
from racegate.model import attention
from racegate.model.attention import Attend

# Names and properties come from the harness's registry
# (racegate.harness.scenario.vocab.STRATEGIES).
STRATEGIES = tuple(str(s) for s in REGISTRY)
CUDA_ONLY = tuple(str(s) for s in strategies_where(trains_on_cpu=False))
# These share compiled_for_device (warmup_locked calls it under a lock).
COMPILED = tuple(str(s) for s, spec in REGISTRY.items() if spec.counts_fallbacks)


@dataclass(frozen=True)
class AttentionStrategy:
    """What one replica uses: its attention callable and the mask kind that callable takes."""

    name: str
    attend: Attend
    mask_kind: str  # "block" (flex BlockMask) or "dense" (boolean [B, 1, T, S])
    counts_fallbacks: bool  # True when `attend` is one of our counting compiled wrappers


def make_strategy(name: str, device: torch.device) -> AttentionStrategy:
    """Resolve a strategy for a replica on `device`; ValueError for unknown or unsupported ones.

    per_device / warmup / processes: the per-device compiled kernel (flex on CUDA, dense SDPA
    on CPU). warmup differs in what the harness does around it (compile every bucket in one
    thread, then `torch.compiler.set_stance("fail_on_recompile")`); warmup_locked also calls
    the kernel under one process-wide lock (`attention.serialized`: dynamo's cache lookup is
    not safe across threads); processes only in topology. nested_fx_off: per_device plus the
    incident's silent "fix", set here, i.e. in the thread that builds the replica (from torch
    2.12 dynamo config is per-thread, so a main-thread setting does not reach worker threads).
    """
    if name not in STRATEGIES:
        raise ValueError(f"unknown strategy {name!r}; choose from: {', '.join(STRATEGIES)}")
    on_cuda = device.type == "cuda"
    if name in CUDA_ONLY and not on_cuda:
        cpu_ok = ", ".join(s for s in STRATEGIES if s not in CUDA_ONLY)
        raise ValueError(
            f"strategy {name!r} needs a CUDA device (flex_attention has no CPU backward); "
            f"on {device.type} choose from: {cpu_ok}"
        )
    spec = REGISTRY[Strategy(name)]
    if spec.nested_fx_trace_off:
        torch._dynamo.config.error_on_nested_fx_trace = False
    if name in COMPILED:
        mask_kind = "block" if attention.kernel_kind(device) == "flex" else "dense"
        attend = attention.compiled_for_device(device)
        if spec.locked:
            attend = attention.serialized(attend)
        return AttentionStrategy(name, attend, mask_kind, True)
    if name == "singleton":
        return AttentionStrategy(name, attention.transformers_singleton, "block", False)
    if name == "eager":
        return AttentionStrategy(name, attention.flex_kernel, "block", False)
    return AttentionStrategy(name, attention.dense_kernel, "dense", False)  # sdpa_dense
