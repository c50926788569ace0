"""The DFlash drafter on transformers' Qwen3 parts: context fusion, KV injection, non-causal blocks.

Read top-down: Drafter -> DrafterLayer -> DFlashAttention; RMSNorm, MLP and RoPE are transformers'.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn
from transformers.models.qwen3.modeling_qwen3 import (
    Qwen3Config,
    Qwen3MLP,
    Qwen3RMSNorm,
    Qwen3RotaryEmbedding,
    rotate_half,
)

from racegate.model.attention import Attend
from racegate.model.config import DrafterConfig


def qwen3_config(cfg: DrafterConfig) -> Qwen3Config:
    """The drafter's layer shapes as a transformers Qwen3Config (its modules are built from it)."""
    return Qwen3Config(
        vocab_size=cfg.vocab_size,
        hidden_size=cfg.hidden_size,
        intermediate_size=cfg.intermediate_size,
        num_hidden_layers=cfg.num_layers,
        num_attention_heads=cfg.num_heads,
        num_key_value_heads=cfg.num_kv_heads,
        head_dim=cfg.head_dim,
        hidden_act="silu",
        rms_norm_eps=cfg.rms_norm_eps,
        rope_parameters={"rope_type": "default", "rope_theta": cfg.rope_theta},
        max_position_embeddings=max(cfg.seq_buckets) + cfg.block_size,
    )


def rope(x_BHLD: torch.Tensor, cos_BLD: torch.Tensor, sin_BLD: torch.Tensor) -> torch.Tensor:
    """transformers' apply_rotary_pos_emb for one tensor: queries and keys here differ in length
    (T draft positions against S + T), so each is rotated once, whole, at its own positions."""
    return x_BHLD * cos_BLD[:, None] + rotate_half(x_BHLD) * sin_BLD[:, None]


class Drafter(nn.Module):
    """Trainable part only: fc + context norm, decoder layers, final norm (no embedding/lm_head)."""

    def __init__(self, cfg: DrafterConfig, attend: Attend) -> None:
        super().__init__()
        qcfg = qwen3_config(cfg)
        h = cfg.hidden_size
        # context fusion: concatenated target hidden states -> H, computed once per forward
        self.fc = nn.Linear(len(cfg.target_layer_ids) * cfg.target_hidden_size, h, bias=False)
        self.hidden_norm = Qwen3RMSNorm(h, eps=cfg.rms_norm_eps)
        self.layers = nn.ModuleList(DrafterLayer(qcfg, attend) for _ in range(cfg.num_layers))
        self.norm = Qwen3RMSNorm(h, eps=cfg.rms_norm_eps)
        self.rotary_emb = Qwen3RotaryEmbedding(config=qcfg)

    def forward(
        self,
        noise_BTH: torch.Tensor,  # embedded blocks [anchor token, MASK x (block-1)] x N
        target_hidden_BSX: torch.Tensor,  # X = len(target_layer_ids) * target hidden
        positions_BK: torch.Tensor,  # K = S + T: context positions ++ draft positions
        mask: Any,  # BlockMask or dense boolean, per the strategy
    ) -> torch.Tensor:
        ctx_BSH = self.hidden_norm(self.fc(target_hidden_BSX))
        cos_BKD, sin_BKD = self.rotary_emb(noise_BTH, positions_BK)
        x_BTH = noise_BTH
        for layer in self.layers:
            x_BTH = layer(x_BTH, ctx_BSH, cos_BKD, sin_BKD, mask)
        return self.norm(x_BTH)


class DrafterLayer(nn.Module):
    """Pre-norm Qwen3 block; the attention also reads the (un-normed) fused context."""

    def __init__(self, qcfg: Qwen3Config, attend: Attend) -> None:
        super().__init__()
        self.input_layernorm = Qwen3RMSNorm(qcfg.hidden_size, eps=qcfg.rms_norm_eps)
        self.self_attn = DFlashAttention(qcfg, attend)
        self.post_attention_layernorm = Qwen3RMSNorm(qcfg.hidden_size, eps=qcfg.rms_norm_eps)
        self.mlp = Qwen3MLP(qcfg)

    def forward(self, x_BTH, ctx_BSH, cos_BKD, sin_BKD, mask) -> torch.Tensor:
        x_BTH = x_BTH + self.self_attn(self.input_layernorm(x_BTH), ctx_BSH, cos_BKD, sin_BKD, mask)
        return x_BTH + self.mlp(self.post_attention_layernorm(x_BTH))


class DFlashAttention(nn.Module):
    """Non-causal GQA with KV injection: K/V = [context ; blocks], Q = blocks only."""

    def __init__(self, qcfg: Qwen3Config, attend: Attend) -> None:
        super().__init__()
        h, d = qcfg.hidden_size, qcfg.head_dim
        self.num_heads, self.num_kv_heads, self.head_dim = (
            qcfg.num_attention_heads,
            qcfg.num_key_value_heads,
            d,
        )
        self.scale = d**-0.5
        self.q_proj = nn.Linear(h, self.num_heads * d, bias=False)
        self.k_proj = nn.Linear(h, self.num_kv_heads * d, bias=False)
        self.v_proj = nn.Linear(h, self.num_kv_heads * d, bias=False)
        self.o_proj = nn.Linear(self.num_heads * d, h, bias=False)
        self.q_norm = Qwen3RMSNorm(d, eps=qcfg.rms_norm_eps)  # per head, like Qwen3
        self.k_norm = Qwen3RMSNorm(d, eps=qcfg.rms_norm_eps)
        # a plain function, not a module: shared compiled objects must not become submodules
        self.attend = attend

    def forward(self, x_BTH, ctx_BSH, cos_BKD, sin_BKD, mask) -> torch.Tensor:
        batch, t, _ = x_BTH.shape
        s = ctx_BSH.shape[1]
        d = self.head_dim
        q_BHTD = self.q_norm(self.q_proj(x_BTH).view(batch, t, -1, d)).transpose(1, 2)
        kv_in_BKH = torch.cat([ctx_BSH, x_BTH], dim=1)  # K = S + T
        k_BNKD = self.k_norm(self.k_proj(kv_in_BKH).view(batch, s + t, -1, d)).transpose(1, 2)
        v_BNKD = self.v_proj(kv_in_BKH).view(batch, s + t, -1, d).transpose(1, 2)
        # RoPE: queries at draft positions (the last T of K), keys at context ++ draft positions
        q_BHTD = rope(q_BHTD, cos_BKD[:, s:], sin_BKD[:, s:])
        k_BNKD = rope(k_BNKD, cos_BKD, sin_BKD)
        out_BHTD = self.attend(q_BHTD, k_BNKD, v_BNKD, mask, self.scale)
        return self.o_proj(out_BHTD.transpose(1, 2).reshape(batch, t, -1))
