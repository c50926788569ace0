"""DrafterConfig: drafter + target shapes, DFlash knobs, the flat preset table (docs/workload.md).

Dataclass defaults are the reference shape (`qwen3-8b-drafter`); presets store only overrides.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

DTYPES = ("auto", "bfloat16", "float32")


@dataclass
class DrafterConfig:
    # drafter (Qwen3-style decoder layers, docs/workload.md)
    hidden_size: int = 4096
    intermediate_size: int = 12288
    num_layers: int = 5
    num_heads: int = 32
    num_kv_heads: int = 8
    head_dim: int = 128
    rms_norm_eps: float = 1e-6
    rope_theta: float = 1e6
    vocab_size: int = 151936
    # target (random-init Qwen3ForCausalLM; only layers up to max(target_layer_ids) are built)
    target_hidden_size: int = 4096
    target_intermediate_size: int = 12288
    target_num_layers: int = 36
    target_num_heads: int = 32
    target_num_kv_heads: int = 8
    target_head_dim: int = 128
    target_layer_ids: tuple[int, ...] = ()  # empty: derived in __post_init__
    # DFlash training
    block_size: int = 16
    max_anchors: int = 512
    seq_buckets: tuple[int, ...] = (3072, 2048)  # padded context length per bucket; first = steady
    token_budget: int = 49152  # padded context tokens per optimizer step (sum over micro-batches)
    micro_batch_size: int = 2  # sequences per forward/backward; 0 = the whole budget at once
    loss_gamma: float = 7.0  # decay exp(-(k-1)/gamma); 7 for block 16
    loss_chunk_tokens: int = 2048  # lm_head + CE run under checkpoint in chunks of this many tokens
    use_reentrant: bool = True  # what the incident's checkpoint used
    lr: float = 5e-5
    lr_warmup_steps: int = 10  # linear warm-up: Adam's sign-like first steps diverge at 4096 wide
    dtype: str = "auto"  # auto: bfloat16 on CUDA, float32 on CPU
    target_every_step: bool = False  # False: target hidden states computed once per bucket, reused
    data_seed: int = 0  # the synthetic "language" (motif bank); replicas differ by their own seed
    preset: str = field(default="custom", compare=False)

    def __post_init__(self) -> None:
        self.seq_buckets = tuple(int(s) for s in self.seq_buckets)
        if not self.target_layer_ids:
            self.target_layer_ids = derive_target_layer_ids(self.target_num_layers, self.num_layers)
        self.target_layer_ids = tuple(int(i) for i in self.target_layer_ids)
        validate(self)

    @property
    def mask_token_id(self) -> int:
        return self.vocab_size - 1

    @property
    def pad_token_id(self) -> int:
        return self.vocab_size - 2

    @property
    def target_layers_built(self) -> int:
        """The target is truncated after the deepest layer the drafter reads."""
        return max(self.target_layer_ids) + 1


def derive_target_layer_ids(target_layers: int, drafter_layers: int) -> tuple[int, ...]:
    """`round(1 + i*(T-4)/(L-1))` clipped to the target, e.g. T=36, L=5 -> (1, 9, 17, 25, 33)."""
    span = max(drafter_layers - 1, 1)
    ids = (round(1 + i * (target_layers - 4) / span) for i in range(drafter_layers))
    return tuple(min(max(i, 0), target_layers - 1) for i in ids)


PRESETS: dict[str, dict[str, Any]] = {
    # CPU debug shape: one full train step (target included) well under 2 s on 2 cores.
    "tiny": dict(
        hidden_size=64,
        intermediate_size=128,
        num_layers=2,
        num_heads=4,
        num_kv_heads=2,
        head_dim=16,
        vocab_size=512,
        target_hidden_size=64,
        target_intermediate_size=128,
        target_num_layers=6,
        target_num_heads=4,
        target_num_kv_heads=2,
        target_head_dim=16,
        block_size=8,
        max_anchors=12,
        # Four new shapes, compiled in turns by the threads under `recompile`
        # (threads.planned_shapes): each compile a window for the race, so the control fires in
        # more CPU runs (results/cpu-bare-race, results/control-every-time).
        seq_buckets=(128, 96, 64, 112, 80),
        token_budget=512,
        micro_batch_size=0,
        loss_chunk_tokens=64,
        lr=3e-3,
        lr_warmup_steps=0,
    ),
    # GPU shape that compiles in seconds: the 3-layer 1024-wide block of docs/race.md's table.
    "small": dict(
        hidden_size=1024,
        intermediate_size=3072,
        num_layers=3,
        num_heads=8,
        num_kv_heads=4,
        head_dim=128,
        vocab_size=32000,
        target_hidden_size=1024,
        target_intermediate_size=3072,
        target_num_layers=8,
        target_num_heads=8,
        target_num_kv_heads=4,
        target_head_dim=128,
        max_anchors=128,
        seq_buckets=(2048, 1024),
        token_budget=8192,
        micro_batch_size=0,
        lr=3e-4,
    ),
    # The reference shape (docs/workload.md): the dataclass defaults.
    "qwen3-8b-drafter": dict(),
    # Qwen3-4B target (36 layers, 2560/9728, 32/8 heads x 128, tied embeddings upstream).
    "qwen3-4b-drafter": dict(
        hidden_size=2560,
        intermediate_size=9728,
        target_hidden_size=2560,
        target_intermediate_size=9728,
    ),
}


def from_name(name: str, **overrides: Any) -> DrafterConfig:
    """A preset by name, with field overrides; ValueError names the bad preset or field."""
    if name not in PRESETS:
        raise ValueError(f"unknown preset {name!r}; choose from: {', '.join(PRESETS)}")
    known = [f.name for f in dataclasses.fields(DrafterConfig) if f.name != "preset"]
    for key in overrides:
        if key not in known:
            raise ValueError(
                f"unknown DrafterConfig field {key!r}; choose from: {', '.join(known)}"
            )
    return DrafterConfig(**{**PRESETS[name], **overrides, "preset": name})


def _fail(field_name: str, value: object, allowed: str) -> None:
    raise ValueError(f"invalid {field_name} {value!r}; allowed: {allowed}")


POSITIVE_FIELDS = (
    "hidden_size",
    "intermediate_size",
    "num_layers",
    "num_heads",
    "num_kv_heads",
    "head_dim",
    "target_intermediate_size",
    "target_num_heads",
    "target_num_kv_heads",
    "target_head_dim",
    "token_budget",
    "loss_chunk_tokens",
)


def _validate_blocks(cfg: DrafterConfig) -> None:
    """The sequence buckets, anchor blocks and loss chunks fit each other."""
    if not cfg.seq_buckets or len(set(cfg.seq_buckets)) != len(cfg.seq_buckets):
        _fail("seq_buckets", cfg.seq_buckets, "a non-empty tuple of distinct lengths")
    shortest = min(cfg.seq_buckets)
    if not 2 <= cfg.block_size <= shortest // 2:
        _fail(
            "block_size",
            cfg.block_size,
            f"2..{shortest // 2} (half the shortest bucket {shortest}, so context fits)",
        )
    if not 1 <= cfg.max_anchors <= shortest - cfg.block_size + 1:
        _fail(
            "max_anchors",
            cfg.max_anchors,
            f"1..{shortest - cfg.block_size + 1} (anchor positions 0..S-block_size of the "
            f"shortest bucket {shortest})",
        )
    if cfg.loss_chunk_tokens % cfg.block_size:
        _fail(
            "loss_chunk_tokens",
            cfg.loss_chunk_tokens,
            f"a multiple of block_size={cfg.block_size} (chunks are whole anchor blocks)",
        )


def validate(cfg: DrafterConfig) -> None:
    """Raise ValueError naming the first bad field and what it may be."""
    for name in POSITIVE_FIELDS:
        if getattr(cfg, name) < 1:
            _fail(name, getattr(cfg, name), "a positive integer")
    if cfg.hidden_size != cfg.target_hidden_size:
        raise ValueError(
            f"hidden_size {cfg.hidden_size} does not match target_hidden_size "
            f"{cfg.target_hidden_size}; allowed: equal sizes (the drafter shares the target's "
            "embedding and lm_head)"
        )
    if cfg.num_heads % cfg.num_kv_heads:
        _fail("num_kv_heads", cfg.num_kv_heads, f"a divisor of num_heads={cfg.num_heads}")
    if cfg.target_num_heads % cfg.target_num_kv_heads:
        _fail(
            "target_num_kv_heads",
            cfg.target_num_kv_heads,
            f"a divisor of target_num_heads={cfg.target_num_heads}",
        )
    if cfg.target_num_layers < 1:
        _fail("target_num_layers", cfg.target_num_layers, "a positive integer")
    bad_ids = [i for i in cfg.target_layer_ids if not 0 <= i < cfg.target_num_layers]
    if bad_ids:
        _fail(
            "target_layer_ids",
            cfg.target_layer_ids,
            f"layer indices in [0, {cfg.target_num_layers - 1}]",
        )
    if cfg.vocab_size < 8:
        _fail("vocab_size", cfg.vocab_size, "at least 8 (the last two ids are pad and mask)")
    _validate_blocks(cfg)
    if cfg.micro_batch_size < 0:
        _fail("micro_batch_size", cfg.micro_batch_size, "0 (whole budget) or a positive integer")
    per_micro = max(cfg.seq_buckets) * max(cfg.micro_batch_size, 1)
    if cfg.token_budget < per_micro:
        _fail(
            "token_budget",
            cfg.token_budget,
            f">= {per_micro} (longest bucket x micro_batch_size: one micro-batch per step)",
        )
    if cfg.loss_gamma <= 0:
        _fail("loss_gamma", cfg.loss_gamma, "a positive number (7 for block 16)")
    if cfg.dtype not in DTYPES:
        _fail("dtype", cfg.dtype, ", ".join(DTYPES))
    if cfg.lr <= 0:
        _fail("lr", cfg.lr, "a positive number")
    if cfg.lr_warmup_steps < 0:
        _fail("lr_warmup_steps", cfg.lr_warmup_steps, "0 (none) or a positive integer")


def trainable_params(cfg: DrafterConfig) -> int:
    """Trainable parameters (drafter layers, fc, norms), from the config alone; no allocation.

    The embedding and lm_head belong to the target and stay frozen, so they are not counted.
    """
    h, d = cfg.hidden_size, cfg.head_dim
    attn = h * cfg.num_heads * d * 2 + h * cfg.num_kv_heads * d * 2 + 2 * d  # q,o,k,v + q/k norms
    mlp = 3 * h * cfg.intermediate_size
    per_layer = attn + mlp + 2 * h  # + input/post-attention RMSNorm
    fc = len(cfg.target_layer_ids) * cfg.target_hidden_size * h
    return cfg.num_layers * per_layer + fc + 2 * h  # + context norm + final norm
