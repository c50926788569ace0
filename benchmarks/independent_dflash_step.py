"""An independently written DFlash drafter training step: the reference racegate's own is held to.

No racegate code and no target model. What one step does, at the qwen3-8b-drafter shape:

- 5 decoder layers, hidden 4096, intermediate 12288, 32 query / 8 KV heads of 128, bf16
  parameters, bias-free `nn.Linear` everywhere;
- one sequence of 3,072 context tokens whose target hidden states (5 x 4096 wide) are
  precomputed random numbers, projected by one bias-free `fc` and RMSNorm-ed;
- 512 anchors x block 16 = 8,192 query tokens, embedded by a frozen embedding;
- per layer: RMSNorm -> q from the block, k and v from concat(context, block) ->
  `torch.compile(flex_attention, dynamic=False)` with GQA on the DFlash block mask from
  `create_block_mask` -> o-proj, residual; RMSNorm -> SwiGLU MLP, residual. No RoPE and no
  q/k norm unless `--rope-qk-norm` (the real DFlash drafter's extra work, to measure its cost);
- a final RMSNorm; the loss is a weighted cross-entropy of a frozen lm_head (vocab 151,936)
  over 2,048-token chunks, each under `checkpoint(use_reentrant=True)`; `AdamW(fused=True)`.

Anchors are drawn afresh every step and the mask is rebuilt every step, as a trainer must
(`--fixed-mask`: drawn and built once). Timing: `--warmup` steps (compile), then the median of
`--windows` windows of `--window-steps` steps, each window timed with CUDA events. Tokens are
query tokens (valid anchors x block), racegate's unit; MFU is analytic FLOPs over 790 TFLOP/s
(one H200's measured bf16 matmul rate), counted as racegate's racegate/model/flops.py counts them.
Peak memory is `torch.cuda.max_memory_allocated` over the whole run, with a line-by-line
account of what is resident (`memory` in the JSON).

    python benchmarks/independent_dflash_step.py --json out.json          # one GPU, 8B shape
    python benchmarks/independent_dflash_step.py --rope-qk-norm           # + RoPE and q/k norm
    python benchmarks/independent_dflash_step.py --tiny                   # CPU smoke test
    python benchmarks/independent_dflash_step.py --profile out-prof.json  # + kernel table
"""

from __future__ import annotations

import argparse
import json
import math
import re
import statistics
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.attention.flex_attention import create_block_mask, flex_attention
from torch.profiler import ProfilerActivity, profile, record_function
from torch.utils.checkpoint import checkpoint

PEAK_FLOPS = 790e12  # bf16 dense matmul on one H200, measured (an 8192^3 torch.matmul)
GIB = 2**30
REGIONS = ("mask",)  # record_function ranges whose device time a profile reports
compiled_flex = torch.compile(flex_attention, dynamic=False)


@dataclass(frozen=True)
class Shape:
    hidden: int = 4096
    intermediate: int = 12288
    layers: int = 5
    heads: int = 32
    kv_heads: int = 8
    head_dim: int = 128
    vocab: int = 151936
    target_layers: int = 5  # target hidden states concatenated into the context (fc input)
    context: int = 3072
    anchors: int = 512
    block: int = 16
    loss_chunk: int = 2048
    gamma: float = 7.0
    rope_theta: float = 1e6
    eps: float = 1e-6
    lr: float = 5e-5


TINY = Shape(
    hidden=64, intermediate=128, layers=2, heads=4, kv_heads=2, head_dim=16, vocab=512,
    target_layers=2, context=128, anchors=12, block=8, loss_chunk=64,
)  # fmt: skip


# ---- the model -------------------------------------------------------------------------------
class RMSNorm(nn.Module):
    """x / rms(x) in float32, back to x's dtype, times a weight (Qwen3's RMSNorm)."""

    def __init__(self, dim: int, eps: float) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x32 = x.float()
        x32 = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * x32.to(x.dtype)


def rotate(x_BHKD: torch.Tensor, cos_KD: torch.Tensor, sin_KD: torch.Tensor) -> torch.Tensor:
    half = x_BHKD.shape[-1] // 2
    rotated = torch.cat([-x_BHKD[..., half:], x_BHKD[..., :half]], dim=-1)
    return x_BHKD * cos_KD + rotated * sin_KD


Attend = Callable[[torch.Tensor, torch.Tensor, torch.Tensor, Any], torch.Tensor]


class Layer(nn.Module):
    """Pre-norm block; K/V = [context ; block tokens], Q = block tokens, non-causal."""

    def __init__(self, s: Shape, rope_qk_norm: bool) -> None:
        super().__init__()
        h, d = s.hidden, s.head_dim
        self.head_dim = d
        self.norm1, self.norm2 = RMSNorm(h, s.eps), RMSNorm(h, s.eps)
        self.q = nn.Linear(h, s.heads * d, bias=False)
        self.k = nn.Linear(h, s.kv_heads * d, bias=False)
        self.v = nn.Linear(h, s.kv_heads * d, bias=False)
        self.o = nn.Linear(s.heads * d, h, bias=False)
        self.gate = nn.Linear(h, s.intermediate, bias=False)
        self.up = nn.Linear(h, s.intermediate, bias=False)
        self.down = nn.Linear(s.intermediate, h, bias=False)
        self.qk_norm = (RMSNorm(d, s.eps), RMSNorm(d, s.eps)) if rope_qk_norm else None
        if self.qk_norm:
            self.q_norm, self.k_norm = self.qk_norm

    def forward(self, x_TH, ctx_SH, rope: tuple | None, mask: Any, attend: Attend):
        t, s, d = x_TH.shape[0], ctx_SH.shape[0], self.head_dim
        y_TH = self.norm1(x_TH)
        kv_KH = torch.cat([ctx_SH, y_TH])
        q_THD = self.q(y_TH).view(t, -1, d)
        k_KND = self.k(kv_KH).view(s + t, -1, d)
        v_NKD = self.v(kv_KH).view(s + t, -1, d).transpose(0, 1)
        if self.qk_norm:
            q_THD, k_KND = self.q_norm(q_THD), self.k_norm(k_KND)
        q_HTD, k_NKD = q_THD.transpose(0, 1), k_KND.transpose(0, 1)
        if rope is not None:
            cos_KD, sin_KD = rope
            q_HTD = rotate(q_HTD, cos_KD[s:], sin_KD[s:])
            k_NKD = rotate(k_NKD, cos_KD, sin_KD)
        out_HTD = attend(q_HTD[None], k_NKD[None], v_NKD[None], mask)[0]
        x_TH = x_TH + self.o(out_HTD.transpose(0, 1).reshape(t, -1))
        z_TH = self.norm2(x_TH)
        return x_TH + self.down(F.silu(self.gate(z_TH)) * self.up(z_TH))


class Drafter(nn.Module):
    def __init__(self, s: Shape, rope_qk_norm: bool) -> None:
        super().__init__()
        self.fc = nn.Linear(s.target_layers * s.hidden, s.hidden, bias=False)
        self.ctx_norm = RMSNorm(s.hidden, s.eps)
        self.layers = nn.ModuleList(Layer(s, rope_qk_norm) for _ in range(s.layers))
        self.norm = RMSNorm(s.hidden, s.eps)

    def forward(self, noise_TH, target_SX, rope, mask, attend: Attend) -> torch.Tensor:
        ctx_SH = self.ctx_norm(self.fc(target_SX))
        x_TH = noise_TH
        for layer in self.layers:
            x_TH = layer(x_TH, ctx_SH, rope, mask, attend)
        return self.norm(x_TH)


# ---- the DFlash mask -------------------------------------------------------------------------
def mask_mod_for(anchors_N: torch.Tensor, context: int, block: int):
    """A query in block j (anchor a) sees context keys < a and every key of its own block."""
    n = anchors_N.shape[0]

    def mask_mod(b, h, q_idx, kv_idx):
        j = q_idx // block
        own = (kv_idx >= context) & ((kv_idx - context) // block == j)
        ctx = (kv_idx < context) & (kv_idx < anchors_N[j.clamp(max=n - 1)])
        return (own | ctx) & (j < n)

    return mask_mod


def dense_mask(mask_mod, q_len: int, kv_len: int, device) -> torch.Tensor:
    """The same mask as a [1, 1, Q, KV] boolean tensor (CPU: flex has no CPU backward)."""
    q = torch.arange(q_len, device=device)[:, None]
    kv = torch.arange(kv_len, device=device)[None, :]
    return mask_mod(None, None, q, kv)[None, None]


def visible_pairs(anchors_N: torch.Tensor, block: int) -> float:
    """(query, key) pairs the mask lets through, per head: block x (anchor + block) per block."""
    return float((block * (anchors_N + block)).sum())


# ---- FLOPs, loss -----------------------------------------------------------------------------
def step_flops(s: Shape, pairs: float) -> dict[str, float]:
    """Analytic FLOPs, as racegate's racegate/model/flops.py: a GEMM with weight and input gradients
    3x its forward; fc 2x (its input needs no gradient); the frozen lm_head 3x (forward,
    checkpoint recompute, input gradient); attention 3 x 4 x q-width x visible pairs."""
    t, keys = s.anchors * s.block, s.context + s.anchors * s.block
    qw, kw = s.heads * s.head_dim, s.kv_heads * s.head_dim
    per_layer = 2 * t * s.hidden * qw * 2 + 2 * keys * s.hidden * kw * 2
    per_layer += 2 * t * s.hidden * s.intermediate * 3
    fc = 2 * s.context * s.target_layers * s.hidden * s.hidden
    return {
        "gemm": 3.0 * per_layer * s.layers + 2.0 * fc,
        "attention": 3.0 * 4 * qw * pairs * s.layers,
        "lm_head": 3.0 * 2 * t * s.hidden * s.vocab,
    }


def _chunk_ce(hidden_CH, lm_head_VH, labels_C, weights_C, upcast: bool) -> torch.Tensor:
    logits_CV = hidden_CH @ lm_head_VH.t()
    if upcast:
        logits_CV = logits_CV.float()
    return (F.cross_entropy(logits_CV, labels_C, reduction="none") * weights_C).sum()


def chunked_ce(hidden_TH, lm_head_VH, labels_T, weights_T, chunk: int, upcast: bool):
    """sum(w * CE) / sum(w), logits made one chunk at a time under a reentrant checkpoint."""
    total = hidden_TH.new_zeros((), dtype=torch.float32)
    for i in range(0, hidden_TH.shape[0], chunk):
        part = slice(i, i + chunk)
        total = total + checkpoint(
            _chunk_ce, hidden_TH[part], lm_head_VH, labels_T[part], weights_T[part], upcast,
            use_reentrant=True,
        )  # fmt: skip
    return total / weights_T.sum()


# ---- timing, profiling, memory: shared with benchmarks/builtin_vs_independent.py -------------
def timed_windows(
    one_step: Callable[[], Any], warmup: int, windows: int, window_steps: int, cuda: bool
) -> list[float]:
    """Seconds of each window of `window_steps` steps after `warmup` (CUDA events on a GPU)."""
    for _ in range(warmup):
        one_step()
    if cuda:
        torch.cuda.synchronize()
    out = []
    for _ in range(windows):
        if cuda:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            for _ in range(window_steps):
                one_step()
            end.record()
            end.synchronize()
            out.append(start.elapsed_time(end) / 1e3)
        else:
            t0 = time.perf_counter()
            for _ in range(window_steps):
                one_step()
            out.append(time.perf_counter() - t0)
    return out


# Kernel groups, first match wins (CUDA kernel names; aten op names on CPU).
KERNEL_GROUPS: tuple[tuple[str, re.Pattern[str]], ...] = tuple(
    (name, re.compile(pattern, re.I))
    for name, pattern in (
        ("flex bwd", r"flex_attention_backward|triton_tem_fused_.*backward|flex.*bwd"),
        ("flex fwd", r"flex_attention|triton_tem_fused|scaled_dot_product"),
        ("optimizer", r"adam|multi_tensor"),
        ("matmul", r"gemm|nvjet|cutlass|sm90_xmma|cublas|aten::(mm|addmm|bmm|matmul|linear)$"),
        ("cross-entropy", r"softmax|nll_loss|cross_entropy|logsumexp"),
        ("copies/casts", r"memcpy|memset|copy|cat|fill|index|gather|scatter|aten::(to|_to_copy)"),
        ("norm/elementwise", r"elementwise|reduce|triton_|pow|mean|rsqrt|mul|add|silu|where"),
    )
)


# torch's own ranges (Optimizer.step#AdamW.step, ProfilerStep#3) also have a GPU-timeline row,
# whose time is their span, never a kernel's (a range of our own is named in `regions`).
RANGE = re.compile(r"^(Optimizer\.\w+#|ProfilerStep#)")


def kernel_group(name: str) -> str:
    return next((g for g, pattern in KERNEL_GROUPS if pattern.search(name)), "other")


def profile_steps(
    one_step: Callable[[], Any],
    steps: int,
    cuda: bool,
    title: str,
    table_path: Path | None,
    per: float = 1.0,
    regions: Sequence[str] = (),
) -> dict[str, Any]:
    """Kernel time by group and the top kernels, per step / `per` (a step of another size is
    set against this one's), over `steps` profiled steps; with the device time of each
    `record_function` region named in `regions`: its kernels' time and, on CUDA, its span on
    the GPU timeline (kernels and the gaps between them)."""
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    with profile(activities=activities) as prof:
        for _ in range(steps):
            one_step()
        if cuda:
            torch.cuda.synchronize()
    groups: dict[str, float] = {}
    top: list[tuple[float, int, str]] = []
    region_ms: dict[str, float] = {}
    for ev in prof.key_averages():
        if ev.key in regions:  # its kernels' time, and its span on the GPU timeline
            if ev.device_type.name == "CPU":
                us = ev.device_time_total if cuda else ev.cpu_time_total
                region_ms[ev.key] = us / 1e3 / steps / per
            else:
                region_ms[f"{ev.key} (GPU span)"] = ev.self_device_time_total / 1e3 / steps / per
            continue
        if cuda:  # the kernels themselves: an aten op's device time is its kernels' again
            is_kernel = ev.device_type.name == "CUDA" and not RANGE.match(ev.key)
            us = ev.self_device_time_total if is_kernel else 0.0
        else:
            us = ev.self_cpu_time_total if ev.key.startswith("aten::") else 0.0
        if us <= 0:
            continue
        ms = us / 1e3 / steps / per
        group = kernel_group(ev.key)
        groups[group] = groups.get(group, 0.0) + ms
        top.append((ms, round(ev.count / steps / per), ev.key))
    if table_path is not None:
        sort = "self_cuda_time_total" if cuda else "self_cpu_time_total"
        table = prof.key_averages().table(sort_by=sort, row_limit=45, max_name_column_width=90)
        table_path.write_text(f"{title}, {steps} profiled steps\n{table}\n")
    top.sort(reverse=True)
    return {
        "steps": steps,
        "per": per,
        "region_ms": {k: round(v, 3) for k, v in region_ms.items()},
        "kernel_ms_by_group": {k: round(v, 3) for k, v in sorted(groups.items())},
        "kernel_ms": round(sum(groups.values()), 3),
        "top_kernels": [
            {"ms": round(ms, 3), "calls": n, "group": kernel_group(k), "name": k[:140]}
            for ms, n, k in top[:30]
        ],
    }


def tensor_bytes(tensors: Iterable[torch.Tensor | None]) -> int:
    """Bytes of distinct storages among `tensors` (a view of another counts once)."""
    seen: set[int] = set()
    total = 0
    for t in tensors:
        if t is None:
            continue
        storage = t.untyped_storage()
        if storage.data_ptr() not in seen:
            seen.add(storage.data_ptr())
            total += storage.nbytes()
    return total


def optimizer_state_bytes(opt: torch.optim.Optimizer) -> int:
    return tensor_bytes(
        v for state in opt.state.values() for v in state.values() if isinstance(v, torch.Tensor)
    )


# ---- the benchmark ---------------------------------------------------------------------------
@dataclass
class Result:
    name: str
    device: str
    shape: dict[str, Any]
    rope_qk_norm: bool
    fixed_mask: bool
    ce_dtype: str
    attention: str
    warmup: int
    window_steps: int
    window_s: list[float]
    query_tokens_per_step: int
    window_tokens_per_s: list[float]
    query_tokens_per_s: float  # median over windows
    median_step_ms: float
    flops_per_step: float
    mfu: float | None  # only on an H200, whose measured peak is PEAK_FLOPS
    mask_density: float
    peak_mem_bytes: int | None  # max_memory_allocated over the whole run
    memory: dict[str, int] = field(default_factory=dict)  # bytes by line (see run())
    final_loss: float = math.nan
    profile: dict[str, Any] | None = None
    torch: str = torch.__version__
    schema_version: int = 1


def _attend_for(device: torch.device) -> tuple[Attend, str]:
    if device.type == "cuda":
        return (
            lambda q, k, v, m: compiled_flex(q, k, v, block_mask=m, scale=q.shape[-1] ** -0.5,
                                             enable_gqa=True),
            "flex (torch.compile, dynamic=False)",
        )  # fmt: skip

    def dense(q, k, v, m):
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=m, enable_gqa=True)
        return out.nan_to_num()  # a row that sees nothing: 0, as flex gives

    return dense, "dense sdpa (CPU)"


def run(
    s: Shape,
    device: torch.device,
    *,
    rope_qk_norm: bool = False,
    fixed_mask: bool = False,
    ce_dtype: str = "model",
    warmup: int = 3,
    windows: int = 3,
    window_steps: int = 5,
    seed: int = 0,
    profile_json_steps: int = 0,
    profile_table: Path | None = None,
) -> Result:
    """Build, warm up, time; memory lines are storage bytes, `activations and transients` is
    the whole-run peak less everything resident."""
    cuda = device.type == "cuda"
    dtype = torch.bfloat16 if cuda else torch.float32
    if cuda:
        torch.cuda.reset_peak_memory_stats(device)
    gen = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)
    t, kv_len = s.anchors * s.block, s.context + s.anchors * s.block
    with torch.device(device):
        model = Drafter(s, rope_qk_norm).to(dtype)
        embed_VH = torch.randn(s.vocab, s.hidden, dtype=dtype) * 0.02  # frozen
        lm_head_VH = torch.randn(s.vocab, s.hidden, dtype=dtype) * 0.02  # frozen
    opt = torch.optim.AdamW(model.parameters(), lr=s.lr, fused=cuda)
    ids_S = torch.randint(0, s.vocab - 2, (s.context,), generator=gen).to(device)
    target_SX = torch.randn(s.context, s.target_layers * s.hidden, generator=gen)
    target_SX = target_SX.to(device=device, dtype=dtype)
    attend, kind = _attend_for(device)
    k_K = torch.arange(s.block, device=device)
    decay_K = torch.exp(-(k_K - 1).clamp(min=0).float() / s.gamma) * (k_K > 0)
    inv_freq = s.rope_theta ** (-torch.arange(0, s.head_dim, 2, device=device) / s.head_dim)
    mask_id = s.vocab - 1

    def batch() -> tuple[torch.Tensor, ...]:
        """Anchors (sorted, distinct, all valid), the mask, the block inputs and the labels."""
        anchors_N = torch.randperm(s.context - s.block + 1, generator=gen)[: s.anchors]
        anchors_N = anchors_N.sort().values.to(device, non_blocking=True)
        mod = mask_mod_for(anchors_N, s.context, s.block)
        with record_function("mask"):
            if cuda:
                mask = create_block_mask(mod, None, None, t, kv_len, device=device)
            else:
                mask = dense_mask(mod, t, kv_len, device)
        pos_NK = anchors_N[:, None] + k_K
        labels_T = ids_S[pos_NK.flatten()]
        noise_ids_NK = torch.full((s.anchors, s.block), mask_id, device=device)
        noise_ids_NK[:, 0] = ids_S[anchors_N]
        weights_T = decay_K.expand(s.anchors, -1).flatten()
        rope = None
        if rope_qk_norm:
            positions_K = torch.cat([torch.arange(s.context, device=device), pos_NK.flatten()])
            freqs_KD = positions_K[:, None].float() * inv_freq
            emb_KD = torch.cat([freqs_KD, freqs_KD], dim=-1)
            rope = (emb_KD.cos().to(dtype), emb_KD.sin().to(dtype))
        return anchors_N, mask, noise_ids_NK.flatten(), labels_T, weights_T, rope

    fixed = batch() if fixed_mask else None
    state: dict[str, Any] = {}

    def one_step() -> torch.Tensor:
        anchors_N, mask, noise_ids_T, labels_T, weights_T, rope = fixed or batch()
        state["anchors"] = anchors_N
        hidden_TH = model(embed_VH[noise_ids_T], target_SX, rope, mask, attend)
        loss = chunked_ce(
            hidden_TH, lm_head_VH, labels_T, weights_T, s.loss_chunk, upcast=ce_dtype == "float32"
        )
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss.detach()

    # one step first, to read what a step leaves resident (grads are freed by zero_grad)
    loss = one_step()
    if cuda:
        torch.cuda.synchronize(device)
    params = list(model.parameters())
    memory = {
        "drafter parameters": tensor_bytes(params),
        "gradients (while they exist)": sum(p.numel() * p.element_size() for p in params),
        "optimizer state": optimizer_state_bytes(opt),
        "frozen embedding + lm_head": tensor_bytes([embed_VH, lm_head_VH]),
        "target hidden states (inputs)": tensor_bytes([target_SX, ids_S]),
    }
    window_s = timed_windows(one_step, max(warmup - 1, 0), windows, window_steps, cuda)
    tokens = s.anchors * s.block
    anchors_N = state["anchors"].cpu()
    pairs = visible_pairs(anchors_N, s.block)
    flops = sum(step_flops(s, pairs).values())
    per_window = [tokens * window_steps / w for w in window_s]
    med_tps = statistics.median(per_window)
    peak = torch.cuda.max_memory_allocated(device) if cuda else None
    if peak is not None:
        memory["activations and transients (peak - the lines above)"] = peak - sum(memory.values())
    name = "independent" + ("+rope+qk_norm" if rope_qk_norm else "")
    name += "+fixed_mask" if fixed_mask else ""
    name += "+ce_float32" if ce_dtype == "float32" else ""
    dev_name = torch.cuda.get_device_name(device) if cuda else "cpu"
    result = Result(
        name=name,
        device=dev_name,
        shape=asdict(s),
        rope_qk_norm=rope_qk_norm,
        fixed_mask=fixed_mask,
        ce_dtype=ce_dtype,
        attention=kind,
        warmup=warmup,
        window_steps=window_steps,
        window_s=window_s,
        query_tokens_per_step=tokens,
        window_tokens_per_s=per_window,
        query_tokens_per_s=med_tps,
        median_step_ms=tokens / med_tps * 1e3,
        flops_per_step=flops,
        mfu=flops * med_tps / tokens / PEAK_FLOPS if cuda and "H200" in dev_name else None,
        mask_density=pairs / (t * kv_len),
        peak_mem_bytes=peak,
        memory=memory,
        final_loss=float(loss),
    )
    if profile_json_steps:
        result.profile = profile_steps(
            one_step, profile_json_steps, cuda, name, profile_table, regions=REGIONS
        )
    return result


def summary_line(r: Result) -> str:
    mfu = f"{r.mfu:.1%}" if r.mfu is not None else "n/a"
    peak = f"{r.peak_mem_bytes / GIB:.1f} GiB" if r.peak_mem_bytes else "n/a"
    windows = ", ".join(f"{w / 1e3:.2f}" for w in r.window_tokens_per_s)
    return (
        f"{r.name} on {r.device} ({r.attention}, torch {r.torch}): "
        f"{r.query_tokens_per_s / 1e3:.2f} K query tokens/s (windows {windows} K), "
        f"{r.median_step_ms:.1f} ms/step, MFU {mfu}, peak {peak}, "
        f"mask density {r.mask_density:.1%}, loss {r.final_loss:.3f}"
    )


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="benchmarks/independent_dflash_step.py", description=__doc__.split("\n")[0]
    )
    p.add_argument("--tiny", action="store_true", help="tiny shape on the CPU (smoke test)")
    p.add_argument("--device", default=None, help="default: cuda if available, else cpu")
    p.add_argument("--rope-qk-norm", action="store_true", help="add RoPE and per-head q/k norm")
    p.add_argument("--fixed-mask", action="store_true", help="draw anchors, build mask once")
    p.add_argument("--ce-dtype", choices=("model", "float32"), default="model",
                   help="the logits' dtype in the CE (default: %(default)s)")  # fmt: skip
    p.add_argument("--warmup", type=int, default=3, help="(default: %(default)s)")
    p.add_argument("--windows", type=int, default=3, help="(default: %(default)s)")
    p.add_argument("--window-steps", type=int, default=5, help="(default: %(default)s)")
    p.add_argument("--json", type=Path, default=None, help="write the result here")
    p.add_argument("--profile", type=Path, default=None,
                   help="profile --profile-steps more steps; kernel groups and top kernels to "
                   "this JSON, torch.profiler's table beside it (.txt)")  # fmt: skip
    p.add_argument("--profile-steps", type=int, default=2, help="(default: %(default)s)")
    args = p.parse_args(argv)
    for name in ("warmup", "windows", "window_steps", "profile_steps"):
        value, low = getattr(args, name), 0 if name == "warmup" else 1
        if value < low:
            print(
                f"independent_dflash_step: --{name.replace('_', '-')} {value} from the command "
                f"line; allowed: an integer >= {low}",
                file=sys.stderr,
            )
            return 2
    device = torch.device(args.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    res = run(
        TINY if args.tiny else Shape(), device,
        rope_qk_norm=args.rope_qk_norm, fixed_mask=args.fixed_mask, ce_dtype=args.ce_dtype,
        warmup=args.warmup, windows=args.windows, window_steps=args.window_steps,
        profile_json_steps=args.profile_steps if args.profile else 0,
        profile_table=args.profile.with_suffix(".txt") if args.profile else None,
    )  # fmt: skip
    print(summary_line(res))
    if args.profile and res.profile is not None:
        args.profile.write_text(json.dumps(res.profile, indent=2) + "\n")
    if args.json is not None:
        args.json.write_text(json.dumps(asdict(res), indent=2) + "\n")
    return 0 if math.isfinite(res.final_loss) and res.query_tokens_per_s > 0 else 1


if __name__ == "__main__":
    sys.exit(main())
