"""Attention kernels, the per-device compiled-kernel table, and the silent-fallback counter.

`attend(q_BHTD, k_BKSD, v_BKSD, mask, scale) -> out_BHTD`; GQA is left to the kernel.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F
from torch.nn.attention.flex_attention import BlockMask, flex_attention

Attend = Callable[[torch.Tensor, torch.Tensor, torch.Tensor, Any, float], torch.Tensor]

# ---- silent-fallback detector --------------------------------------------------------------
# The functions handed to torch.compile start with `if not is_dynamo_compiling(): count`.
# Dynamo folds that branch away in the compiled graph, so the count only moves when the
# compile wrapper ran the function *uncompiled*: the nested-FX eager path
# (error_on_nested_fx_trace=False) or a dynamo fallback (recompile limit, force_eager).
_fallbacks = threading.local()


def eager_fallback_count() -> int:
    """Uncompiled runs of a compiled kernel seen by *this thread* so far."""
    return getattr(_fallbacks, "count", 0)


def _note_uncompiled_run() -> None:
    _fallbacks.count = getattr(_fallbacks, "count", 0) + 1


# ---- kernels ---------------------------------------------------------------------------------
def flex_kernel(
    q_BHTD: torch.Tensor,
    k_BKSD: torch.Tensor,
    v_BKSD: torch.Tensor,
    mask: BlockMask,
    scale: float,
) -> torch.Tensor:
    """flex_attention on the DFlash BlockMask; rows that see nothing come out as zeros."""
    return flex_attention(q_BHTD, k_BKSD, v_BKSD, block_mask=mask, scale=scale, enable_gqa=True)


def dense_kernel(
    q_BHTD: torch.Tensor,
    k_BKSD: torch.Tensor,
    v_BKSD: torch.Tensor,
    mask: torch.Tensor,
    scale: float,
) -> torch.Tensor:
    """SDPA with a dense boolean [B, 1, T, S] mask, matching flex on fully masked rows.

    SDPA turns an all-False row into NaN (softmax over nothing); such rows (invalid anchors)
    attend to everything here and are zeroed afterwards, which is flex's output and gradient.
    """
    sees_any_B1T1 = mask.any(dim=-1, keepdim=True)
    out_BHTD = F.scaled_dot_product_attention(
        q_BHTD, k_BKSD, v_BKSD, attn_mask=mask | ~sees_any_B1T1, scale=scale, enable_gqa=True
    )
    return out_BHTD * sees_any_B1T1.to(out_BHTD.dtype)


def _counted_flex(q, k, v, mask, scale):  # the function handed to torch.compile (flex)
    if not torch.compiler.is_dynamo_compiling():
        _note_uncompiled_run()
    return flex_kernel(q, k, v, mask, scale)


def _counted_dense(q, k, v, mask, scale):  # the function handed to torch.compile (dense, CPU)
    if not torch.compiler.is_dynamo_compiling():
        _note_uncompiled_run()
    return dense_kernel(q, k, v, mask, scale)


def kernel_kind(device: torch.device) -> str:
    """'flex' on CUDA; 'dense' on CPU, where flex has no backward (raises with grad)."""
    return "flex" if device.type == "cuda" else "dense"


# ---- per-device compiled kernels: the incident's code ----------------------------------------
# Shared by every replica (thread) on the same device, for per_device, warmup, nested_fx_off
# and processes alike; creation is guarded, calls are not (exactly as in the incident).
_compiled_per_device: dict[tuple[str, str], Attend] = {}
_compile_lock = threading.Lock()


def compiled_for_device(device: torch.device) -> Attend:
    """The process-wide compiled kernel for `device`, created on first request under the lock.

    On CUDA this is `torch.compile` of flex_attention; on CPU of the dense SDPA kernel, which
    still drives dynamo, AOTAutograd and inductor (make_fx) from every thread. dynamic=False:
    each bucket is its own static graph, so `warmup` can compile every bucket up front.
    """
    kind = kernel_kind(device)
    key = (str(device), kind)
    with _compile_lock:
        fn = _compiled_per_device.get(key)
        if fn is None:
            fn = torch.compile(_counted_flex if kind == "flex" else _counted_dense, dynamic=False)
            _compiled_per_device[key] = fn
    return fn


# ---- warmup: one compiled call at a time ------------------------------------------------------
# After a warm-up every input has its cache entry, yet dynamo's frame-cache lookup can miss an
# entry whose guards match when another thread looks up at the same moment (guard evaluation
# runs Python, so the GIL can drop mid-walk: pytorch/pytorch#123177, PR #193697). Under
# fail_on_recompile that miss raises in the step (3 of 20 GPU runs under load; reproduced
# without racegate on CPU torch 2.11-2.15, where this lock removed it: results/
# guard-lookup-spurious-miss). No compile runs after the warm-up, and backward runs outside
# dynamo's lookup, so the lock only serialises the host-side dispatch of the forward call.
compiled_call_lock = threading.Lock()


def serialized(fn: Attend) -> Attend:
    """`fn` called under the process-wide `compiled_call_lock`."""

    @functools.wraps(fn)  # keeps `__wrapped__`: the compiled kernel stays reachable
    def call(q_BHTD, k_BKSD, v_BKSD, mask, scale):
        with compiled_call_lock:
            return fn(q_BHTD, k_BKSD, v_BKSD, mask, scale)

    return call


def transformers_singleton(
    q_BHTD: torch.Tensor,
    k_BKSD: torch.Tensor,
    v_BKSD: torch.Tensor,
    mask: BlockMask,
    scale: float,
) -> torch.Tensor:
    """transformers' own process-global compiled flex (WrappedFlexAttention), no lock.

    Its compiled object wraps torch's flex_attention directly, so the fallback counter cannot
    see inside it. What it can see is transformers' own branch: `compile_friendly_flex_attention`
    runs plain, uncompiled `flex_attention` when `torch.compiler.is_compiling()` reads True.
    Outside a dynamo trace of this thread that is a silent fallback, counted here: from torch
    2.13 any thread's compile makes it read True in every thread (probe
    compile_friendly_flex_uncompiled), so the run comes out `silent_fallback`, not `ok`. The
    flag is read just before transformers reads it; a compile that starts or ends in between
    can make one call miscounted.
    """
    if torch.compiler.is_compiling() and not torch.compiler.is_dynamo_compiling():
        _note_uncompiled_run()
    from transformers.integrations.flex_attention import compile_friendly_flex_attention

    return compile_friendly_flex_attention(
        q_BHTD, k_BKSD, v_BKSD, training=True, block_mask=mask, scale=scale, enable_gqa=True
    )
