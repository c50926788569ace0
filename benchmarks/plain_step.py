"""A plain, hand-written DFlash drafter training step: the speed reference for racegate's own.

No racegate code and no target model: 5 Qwen3-style decoder layers at the qwen3-8b-drafter
shape (hidden 4096, intermediate 12288, GQA 32/8 heads x 128, RMSNorm, q_norm/k_norm, RoPE,
SwiGLU, non-causal), compiled flex_attention on the DFlash mask (3,072-token context, 512
anchors x 16-token blocks, built once with create_block_mask), the frozen lm_head (vocab
151,936) + cross-entropy in 2,048-token chunks under torch.utils.checkpoint, fused AdamW,
bf16. Prints the median step time, query tokens/s and MFU (analytic FLOPs / 790 TFLOP/s)
over steady steps. Query tokens are counted as racegate counts them, so the two tokens/s
compare: valid anchors x block size over the step's sequences (query_tokens(); every anchor
here is valid, so that is batch x anchors x block). The target's hidden states are random
and fixed (racegate, too, computes them once per bucket), so neither step has a target
forward in it.

    python benchmarks/plain_step.py                    # one GPU, the 8B-drafter shape
    python benchmarks/plain_step.py --tiny --steps 3   # CPU smoke test (dense SDPA fallback)
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.attention.flex_attention import create_block_mask, flex_attention
from torch.profiler import ProfilerActivity, profile
from torch.utils.checkpoint import checkpoint

PEAK_FLOPS = 790e12  # bf16 dense matmul on one H200, measured (an 8192³ torch.matmul)
# One compiled flex_attention for the whole process: every layer of the one model calls it.
compiled_flex = torch.compile(flex_attention)


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
    batch: int = 1  # sequences per step
    loss_chunk: int = 2048
    gamma: float = 7.0
    rope_theta: float = 1e6
    eps: float = 1e-6
    lr: float = 5e-5

    @property
    def query_slots(self) -> int:
        """Query rows per step, valid or not: what the FLOPs count (the padded work)."""
        return self.batch * self.anchors * self.block


# racegate's `tiny` preset at its steady bucket (its 4 sequences per step: --tiny --batch 4).
TINY = Shape(
    hidden=64, intermediate=128, layers=2, heads=4, kv_heads=2, head_dim=16, vocab=512,
    target_layers=2, context=128, anchors=12, block=8, loss_chunk=64,
)  # fmt: skip


# ---- the model -------------------------------------------------------------------------------
class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x32 = x.float()
        return (x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.eps)).to(
            x.dtype
        ) * self.weight


def rotate(x_BHKD: torch.Tensor, cos_BKD: torch.Tensor, sin_BKD: torch.Tensor) -> torch.Tensor:
    half = x_BHKD.shape[-1] // 2
    rotated = torch.cat([-x_BHKD[..., half:], x_BHKD[..., :half]], dim=-1)
    return x_BHKD * cos_BKD[:, None] + rotated * sin_BKD[:, None]


Attend = Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]


class Layer(nn.Module):
    """Pre-norm Qwen3 block; K/V = [context ; blocks], Q = blocks, one mask (non-causal)."""

    def __init__(self, s: Shape) -> None:
        super().__init__()
        h, d = s.hidden, s.head_dim
        self.s = s
        self.norm1, self.norm2 = RMSNorm(h, s.eps), RMSNorm(h, s.eps)
        self.q = nn.Linear(h, s.heads * d, bias=False)
        self.k = nn.Linear(h, s.kv_heads * d, bias=False)
        self.v = nn.Linear(h, s.kv_heads * d, bias=False)
        self.o = nn.Linear(s.heads * d, h, bias=False)
        self.q_norm, self.k_norm = RMSNorm(d, s.eps), RMSNorm(d, s.eps)
        self.gate = nn.Linear(h, s.intermediate, bias=False)
        self.up = nn.Linear(h, s.intermediate, bias=False)
        self.down = nn.Linear(s.intermediate, h, bias=False)

    def forward(self, x_BTH, ctx_BSH, cos_BKD, sin_BKD, attend: Attend) -> torch.Tensor:
        b, t, _ = x_BTH.shape
        n_ctx, d = ctx_BSH.shape[1], self.s.head_dim
        y_BTH = self.norm1(x_BTH)
        kv_BKH = torch.cat([ctx_BSH, y_BTH], dim=1)
        q_BHTD = self.q_norm(self.q(y_BTH).view(b, t, -1, d)).transpose(1, 2)
        k_BNKD = self.k_norm(self.k(kv_BKH).view(b, n_ctx + t, -1, d)).transpose(1, 2)
        v_BNKD = self.v(kv_BKH).view(b, n_ctx + t, -1, d).transpose(1, 2)
        q_BHTD = rotate(q_BHTD, cos_BKD[:, n_ctx:], sin_BKD[:, n_ctx:])
        k_BNKD = rotate(k_BNKD, cos_BKD, sin_BKD)
        out_BHTD = attend(q_BHTD, k_BNKD, v_BNKD)
        x_BTH = x_BTH + self.o(out_BHTD.transpose(1, 2).reshape(b, t, -1))
        z_BTH = self.norm2(x_BTH)
        return x_BTH + self.down(F.silu(self.gate(z_BTH)) * self.up(z_BTH))


class PlainDrafter(nn.Module):
    def __init__(self, s: Shape) -> None:
        super().__init__()
        self.fc = nn.Linear(s.target_layers * s.hidden, s.hidden, bias=False)
        self.ctx_norm = RMSNorm(s.hidden, s.eps)
        self.layers = nn.ModuleList(Layer(s) for _ in range(s.layers))
        self.norm = RMSNorm(s.hidden, s.eps)

    def forward(self, noise_BTH, target_BSX, cos_BKD, sin_BKD, attend: Attend) -> torch.Tensor:
        ctx_BSH = self.ctx_norm(self.fc(target_BSX))
        x_BTH = noise_BTH
        for layer in self.layers:
            x_BTH = layer(x_BTH, ctx_BSH, cos_BKD, sin_BKD, attend)
        return self.norm(x_BTH)


# ---- the DFlash mask ---------------------------------------------------------------------
def mask_mod_for(anchors_BN: torch.Tensor, valid_BN: torch.Tensor, context: int, block: int):
    """A query in block j (anchor a) sees context kv < a and its own block; invalid: nothing."""
    n = anchors_BN.shape[1]

    def mask_mod(b, h, q_idx, kv_idx):
        j = (q_idx // block).clamp(max=n - 1)
        own = (kv_idx >= context) & ((kv_idx - context) // block == q_idx // block)
        ctx = (kv_idx < context) & (kv_idx < anchors_BN[b, j])
        return (own | ctx) & valid_BN[b, j] & (q_idx // block < n)

    return mask_mod


def dense_mask(mask_mod, batch: int, q_len: int, kv_len: int, device) -> torch.Tensor:
    """The same mask as a [B, 1, Q, KV] boolean tensor (CPU fallback: flex has no CPU backward)."""
    b = torch.arange(batch, device=device)[:, None, None]
    q = torch.arange(q_len, device=device)[None, :, None]
    kv = torch.arange(kv_len, device=device)[None, None, :]
    return mask_mod(b, None, q, kv)[:, None]


def visible_pairs(anchors_BN: torch.Tensor, valid_BN: torch.Tensor, block: int) -> float:
    """(query, key) pairs the mask lets through, per head: a valid block's `block` queries
    each see its anchor's `a` context keys and the block's own `block` keys."""
    return float((block * (anchors_BN + block) * valid_BN).sum())


# ---- data, loss, FLOPs -----------------------------------------------------------------------
def query_tokens(valid_BN: torch.Tensor, block: int) -> int:
    """Query tokens of one step as racegate counts them (racegate/model/train_step.py): valid
    anchors x block size, over every sequence of the step. The unit of this benchmark's tokens/s."""
    return int(valid_BN.sum()) * block


def make_batch(s: Shape, device, dtype, gen: torch.Generator):
    ids_BS = torch.randint(0, s.vocab - 2, (s.batch, s.context), generator=gen)
    anchors_BN = torch.stack(
        [torch.randperm(s.context - s.block + 1, generator=gen)[: s.anchors].sort().values
         for _ in range(s.batch)]
    )  # fmt: skip
    valid_BN = torch.ones_like(anchors_BN, dtype=torch.bool)
    k_K = torch.arange(s.block)
    labels_BNK = ids_BS.gather(1, (anchors_BN[:, :, None] + k_K).flatten(1)).view(
        s.batch, s.anchors, s.block
    )
    decay_K = torch.exp(-(k_K - 1).clamp(min=0).float() / s.gamma) * (k_K > 0)
    weights_BNK = valid_BN[:, :, None].float() * decay_K
    mask_id = s.vocab - 1
    block_ids_BNK = torch.full((s.batch, s.anchors, s.block), mask_id)
    block_ids_BNK[:, :, 0] = ids_BS.gather(1, anchors_BN)
    positions_BK = torch.cat(
        [torch.arange(s.context).expand(s.batch, -1),
         (anchors_BN[:, :, None] + k_K).flatten(1)], dim=1,
    )  # fmt: skip
    target_BSX = torch.randn(s.batch, s.context, s.target_layers * s.hidden, generator=gen)
    to = dict(device=device)
    return (
        block_ids_BNK.flatten(1).to(**to), target_BSX.to(device=device, dtype=dtype),
        positions_BK.to(**to), anchors_BN.to(**to), valid_BN.to(**to),
        labels_BNK.flatten().to(**to), weights_BNK.flatten().to(**to),
    )  # fmt: skip


def rope(positions_BK: torch.Tensor, s: Shape, dtype) -> tuple[torch.Tensor, torch.Tensor]:
    inv = s.rope_theta ** (-torch.arange(0, s.head_dim, 2, device=positions_BK.device) / s.head_dim)
    freqs_BKD = positions_BK[..., None].float() * inv
    emb = torch.cat([freqs_BKD, freqs_BKD], dim=-1)
    return emb.cos().to(dtype), emb.sin().to(dtype)


# Cross-entropy on the model's dtype (bf16 on a GPU), as SpecForge's open DFlash trainer does
# (specforge/core/dflash.py: F.cross_entropy on the lm_head's output) and racegate's
# racegate/model/loss.py does now, or on float32 logits, as both did before: the upcast is a
# copy of every chunk's logits and doubled the softmax's memory traffic. bf16 ran 1.068x the
# tokens/s here and 1.079x in racegate's step on one H200 (results/h200-step-float32-cross-entropy).
# --ce-dtype picks one.
CE_DTYPES = ("float32", "model")


def _chunk_ce(hidden_CH, lm_head_VH, labels_C, weights_C, upcast: bool) -> torch.Tensor:
    logits_CV = hidden_CH @ lm_head_VH.t()
    if upcast:
        logits_CV = logits_CV.float()
    return (F.cross_entropy(logits_CV, labels_C, reduction="none") * weights_C).sum()


def chunked_ce(
    hidden_TH, lm_head_VH, labels_T, weights_T, chunk: int, upcast: bool = True
) -> torch.Tensor:
    total = hidden_TH.new_zeros((), dtype=torch.float32)
    for i in range(0, hidden_TH.shape[0], chunk):
        part = slice(i, i + chunk)
        total = total + checkpoint(
            _chunk_ce, hidden_TH[part], lm_head_VH, labels_T[part], weights_T[part], upcast,
            use_reentrant=False,
        )  # fmt: skip
    return total / weights_T.sum()


def step_flops(s: Shape, visible_pairs: float) -> dict[str, float]:
    """Analytic model FLOPs of one step: a GEMM with a weight and an input gradient costs 3x
    its forward; fc 2x (no input gradient: the target is frozen); the frozen lm_head 3x (the
    input gradient, plus its checkpoint recompute, counted once as model FLOPs do)."""
    t, keys = s.query_slots, s.batch * (s.context + s.anchors * s.block)
    qw, kw = s.heads * s.head_dim, s.kv_heads * s.head_dim
    per_layer = 2 * t * s.hidden * qw * 2 + 2 * keys * s.hidden * kw * 2
    per_layer += 2 * t * s.hidden * s.intermediate * 3
    fc = 2 * s.batch * s.context * s.target_layers * s.hidden * s.hidden
    return {
        "gemm": 3.0 * per_layer * s.layers + 2.0 * fc,
        "attention": 3.0 * 4 * qw * visible_pairs * s.layers,  # QK^T + PV, fwd + 2x bwd
        "lm_head": 3.0 * 2 * t * s.hidden * s.vocab,
    }


# ---- the benchmark ---------------------------------------------------------------------------
@dataclass
class Result:
    device: str
    shape: dict[str, object]
    attention: str  # "flex (compiled)" or "dense sdpa"
    steps: int
    step_ms: list[float]
    median_step_ms: float
    query_tokens_per_step: int  # query_tokens(): racegate's unit, valid anchors x block
    query_tokens_per_s: float
    window_tokens_per_s: list[float]
    tflops_per_s: float
    mfu: float | None  # only on a GPU whose peak is PEAK_FLOPS (H200)
    mask_density: float
    peak_mem_bytes: int | None
    final_loss: float
    ce_dtype: str = "model"  # CE_DTYPES: the logits' dtype in the cross-entropy
    torch: str = torch.__version__
    schema_version: int = 2  # 2: query_tokens_per_step


def _attention(
    s: Shape, anchors: torch.Tensor, valid: torch.Tensor, device: torch.device
) -> tuple[Callable[..., torch.Tensor], str]:
    """(attend(q, k, v), its name): compiled flex on CUDA, dense SDPA on CPU."""
    q_len, kv_len = s.anchors * s.block, s.context + s.anchors * s.block
    mod = mask_mod_for(anchors, valid, s.context, s.block)
    scale = s.head_dim**-0.5
    if device.type == "cuda":  # built once: anchors are fixed for the whole benchmark
        block_mask = create_block_mask(mod, s.batch, None, q_len, kv_len, device=device)

        def attend(q, k, v):
            return compiled_flex(q, k, v, block_mask=block_mask, scale=scale, enable_gqa=True)

        return attend, "flex (compiled)"
    dense = dense_mask(mod, s.batch, q_len, kv_len, device)

    def attend_dense(q, k, v):
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=dense, scale=scale, enable_gqa=True)
        return out.nan_to_num()  # a row that sees nothing (invalid block): 0, like flex

    return attend_dense, "dense sdpa"


def _timed(
    one_step: Callable[[], torch.Tensor], warmup: int, steps: int, cuda: bool
) -> tuple[list[float], torch.Tensor]:
    """Seconds of each step after `warmup` (CUDA events on GPU), and the last loss."""
    times: list[float] = []
    loss = torch.zeros(())
    for i in range(warmup + steps):
        if cuda:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            loss = one_step()
            end.record()
            end.synchronize()
            dt = start.elapsed_time(end) / 1e3
        else:
            t0 = time.perf_counter()
            loss = one_step()
            dt = time.perf_counter() - t0
        if i >= warmup:
            times.append(dt)
    return times, loss


def write_profile(
    one_step: Callable[[], torch.Tensor], device: torch.device, steps: int, path: Path, what: str
) -> None:
    """Profile `steps` more steps (after the timed ones: the profiler's overhead never enters
    them) and write torch.profiler's key_averages table to `path`."""
    cuda = device.type == "cuda"
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    with profile(activities=activities) as prof:
        for _ in range(steps):
            one_step()
        if cuda:
            torch.cuda.synchronize(device)
    sort = "self_cuda_time_total" if cuda else "self_cpu_time_total"
    table = prof.key_averages().table(sort_by=sort, row_limit=40)
    path.write_text(f"plain step, {steps} steps after the timed ones, {what}\n{table}\n")


def run(
    s: Shape,
    device: torch.device,
    steps: int,
    warmup: int,
    seed: int = 0,
    profile_table: Path | None = None,
    profile_steps: int = 2,
    ce_dtype: str = "model",
) -> Result:
    """Time `steps` steady steps after `warmup`; with `profile_table`, profile `profile_steps`
    more and write the table there (write_profile)."""
    cuda = device.type == "cuda"
    dtype = torch.bfloat16 if cuda else torch.float32
    gen = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)
    with torch.device(device):
        model = PlainDrafter(s).to(dtype)
        embed = torch.randn(s.vocab, s.hidden, dtype=dtype) * 0.02  # frozen, like the target's
        lm_head = torch.randn(s.vocab, s.hidden, dtype=dtype) * 0.02
    opt = torch.optim.AdamW(model.parameters(), lr=s.lr, fused=cuda)
    block_ids, target, positions, anchors, valid, labels, weights = make_batch(
        s, device, dtype, gen
    )
    cos, sin = rope(positions, s, dtype)
    q_len, kv_len = s.anchors * s.block, s.context + s.anchors * s.block
    visible = visible_pairs(anchors, valid, s.block)
    density = visible / (s.batch * q_len * kv_len)
    attend, kind = _attention(s, anchors, valid, device)
    noise = embed[block_ids]

    def one_step() -> torch.Tensor:
        hidden = model(noise, target, cos, sin, attend)
        loss = chunked_ce(
            hidden.reshape(-1, s.hidden), lm_head, labels, weights, s.loss_chunk,
            upcast=ce_dtype == "float32",
        )  # fmt: skip
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss.detach()

    times, loss = _timed(one_step, warmup, steps, cuda)
    med = statistics.median(times)
    thirds = [times[i::3] for i in range(min(3, len(times)))]  # interleaved windows
    tokens = query_tokens(valid, s.block)
    windows = [tokens / statistics.median(w) for w in thirds if w]
    flops = sum(step_flops(s, visible).values())
    on_h200 = cuda and "H200" in torch.cuda.get_device_name(device)
    result = Result(
        device=torch.cuda.get_device_name(device) if cuda else "cpu",
        shape=asdict(s),
        attention=kind,
        steps=steps,
        step_ms=[t * 1e3 for t in times],
        median_step_ms=med * 1e3,
        query_tokens_per_step=tokens,
        query_tokens_per_s=tokens / med,
        window_tokens_per_s=windows,
        tflops_per_s=flops / med / 1e12,
        mfu=flops / med / PEAK_FLOPS if on_h200 else None,
        mask_density=density,
        peak_mem_bytes=torch.cuda.max_memory_allocated(device) if cuda else None,
        final_loss=float(loss),
        ce_dtype=ce_dtype,
    )
    if profile_table is not None:
        what = f"{result.device}, torch {result.torch}"
        write_profile(one_step, device, profile_steps, profile_table, what)
    return result


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="benchmarks/plain_step.py", description=__doc__.split("\n")[0])
    p.add_argument("--tiny", action="store_true", help="tiny shape (CPU smoke test)")
    p.add_argument("--device", default=None, help="default: cuda if available, else cpu")
    p.add_argument("--steps", type=int, default=20, help="steady steps (default: %(default)s)")
    p.add_argument("--warmup", type=int, default=3, help="excluded steps (default: %(default)s)")
    p.add_argument("--batch", type=int, default=1, help="sequences per step (default: %(default)s)")
    p.add_argument("--json", type=Path, default=None, help="write the result here as JSON")
    p.add_argument(
        "--profile-table", type=Path, default=None,
        help="profile --profile-steps more steps after the timed ones; write the table here",
    )  # fmt: skip
    p.add_argument("--profile-steps", type=int, default=2, help="(default: %(default)s)")
    p.add_argument(
        "--ce-dtype", choices=CE_DTYPES, default="model",
        help="the logits' dtype in the cross-entropy: the model's (racegate/model/loss.py and "
        "SpecForge's trainer; bf16 on a GPU) or float32 (default: %(default)s)",
    )  # fmt: skip
    args = p.parse_args(argv)
    if args.steps < 1 or args.warmup < 0 or args.batch < 1 or args.profile_steps < 1:
        print(
            "plain_step: error: --steps, --batch and --profile-steps must be ≥ 1, --warmup ≥ 0",
            file=sys.stderr,
        )
        return 2
    device = torch.device(args.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    shape = TINY if args.tiny else Shape()
    shape = Shape(**{**asdict(shape), "batch": args.batch})
    res = run(
        shape, device, args.steps, args.warmup,
        profile_table=args.profile_table, profile_steps=args.profile_steps,
        ce_dtype=args.ce_dtype,
    )  # fmt: skip
    mfu = f"{res.mfu:.1%}" if res.mfu is not None else "n/a (not an H200)"
    mem = f"{res.peak_mem_bytes / 2**30:.1f} GiB" if res.peak_mem_bytes else "n/a"
    print(
        f"plain step on {res.device} ({res.attention}, torch {res.torch}): median "
        f"{res.median_step_ms:.1f} ms/step over {res.steps} steps, "
        f"{res.query_tokens_per_s / 1e3:.2f} K query tokens/s "
        f"(windows {', '.join(f'{w / 1e3:.2f}' for w in res.window_tokens_per_s)} K), "
        f"{res.tflops_per_s:.0f} TFLOP/s, MFU {mfu}, mask density {res.mask_density:.1%}, "
        f"peak {mem}, loss {res.final_loss:.3f} (cross-entropy in {res.ce_dtype})"
    )
    if args.json is not None:
        args.json.write_text(json.dumps(asdict(res), indent=2) + "\n")
    return 0 if math.isfinite(res.final_loss) else 1


if __name__ == "__main__":
    sys.exit(main())
