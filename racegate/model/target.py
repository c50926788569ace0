"""The frozen target: a random-init Qwen3ForCausalLM (no downloads), one per device, read-only.

It yields hidden states after `target_layer_ids`, plus the embedding and lm_head the drafter uses.
"""

from __future__ import annotations

import contextlib
import copy
import threading
import weakref
from collections.abc import Iterator

import torch
from torch import nn
from transformers import Qwen3Config, Qwen3ForCausalLM

from racegate.model.config import DrafterConfig


def target_config(cfg: DrafterConfig) -> Qwen3Config:
    """Target shapes, truncated after the deepest layer the drafter reads (its only consumer)."""
    return Qwen3Config(
        vocab_size=cfg.vocab_size,
        hidden_size=cfg.target_hidden_size,
        intermediate_size=cfg.target_intermediate_size,
        num_hidden_layers=cfg.target_layers_built,
        num_attention_heads=cfg.target_num_heads,
        num_key_value_heads=cfg.target_num_kv_heads,
        head_dim=cfg.target_head_dim,
        hidden_act="silu",
        rms_norm_eps=cfg.rms_norm_eps,
        rope_parameters={"rope_type": "default", "rope_theta": cfg.rope_theta},
        max_position_embeddings=max(cfg.seq_buckets),
        tie_word_embeddings=False,
        pad_token_id=cfg.pad_token_id,
        attn_implementation="sdpa",
    )


def cast_parameters(module: nn.Module, dtype: torch.dtype) -> None:
    """Cast parameters only: RoPE's inv_freq buffers stay float32, as transformers keeps them."""
    for param in module.parameters():
        param.data = param.data.to(dtype)


@contextlib.contextmanager
def seeded(device: torch.device, seed: int) -> Iterator[None]:
    """Seed CPU (and `device`'s CUDA generator) for module init; restore them afterwards."""
    rng_devices = [device] if device.type == "cuda" else []
    with torch.random.fork_rng(devices=rng_devices):
        torch.random.default_generator.manual_seed(seed)
        if device.type == "cuda":
            with torch.cuda.device(device):
                torch.cuda.manual_seed(seed)
        yield


class Target:
    """Frozen, eval-mode target on one device; every method runs without autograd."""

    def __init__(self, cfg: DrafterConfig, device: torch.device, dtype: torch.dtype) -> None:
        self.key = target_key(cfg, device, dtype)
        self.device = device
        self.layer_ids = cfg.target_layer_ids
        # Built on the device itself so the 8B preset's ~7.8 B params never touch host memory;
        # seeded from data_seed so every replica and run sees the same frozen target.
        with seeded(device, cfg.data_seed), torch.device(device):
            model = Qwen3ForCausalLM(target_config(cfg))
        cast_parameters(model, dtype)
        model.eval().requires_grad_(False)
        self.model = model

    @property
    def embed_tokens(self) -> nn.Embedding:
        return self.model.model.embed_tokens

    @property
    def lm_head(self) -> nn.Linear:
        return self.model.lm_head

    @torch.no_grad()
    def hidden_states(self, input_ids_BS: torch.Tensor) -> torch.Tensor:
        """Outputs of layers `target_layer_ids`, concatenated: [B, S, len(ids) * H].

        The layers are run one by one rather than through `output_hidden_states=True`: that
        path records outputs via a collector which, while `torch.compiler.is_compiling()` reads
        True (process-wide on torch 2.13, i.e. while *another* thread compiles), switches to a
        process-global variable, so concurrent targets could clobber each other's outputs.
        """
        inner = self.model.model
        positions_BS = torch.arange(input_ids_BS.shape[1], device=input_ids_BS.device)[None]
        x_BSH = inner.embed_tokens(input_ids_BS)
        cos_sin = inner.rotary_emb(x_BSH, positions_BS)
        wanted = set(self.layer_ids)
        picked: dict[int, torch.Tensor] = {}
        for i, layer in enumerate(inner.layers):
            # attention_mask=None: transformers' SDPA path then runs causal (is_causal=True)
            x_BSH = layer(
                x_BSH, attention_mask=None, position_ids=positions_BS, position_embeddings=cos_sin
            )
            if isinstance(x_BSH, tuple):  # older decoder layers returned (hidden, ...)
                x_BSH = x_BSH[0]
            if i in wanted:
                picked[i] = x_BSH
        return torch.cat([picked[i] for i in self.layer_ids], dim=-1)


def target_key(cfg: DrafterConfig, device: torch.device, dtype: torch.dtype) -> tuple:
    """What makes two targets the same: device, shapes, layers read, dtype (weights are seeded)."""
    return (str(device), (target_config(cfg).to_json_string(), cfg.target_layer_ids, str(dtype)))


# One target per (device, shape) while anyone holds it: replicas on a device share it
# (read-only, no_grad). Held weakly: a replica that caches its hidden states lets go of the
# target once they are made, so its decoder layers (12.2 GiB at the 8B shape) are freed; a
# later replica rebuilds it, bit-identical (seeded from data_seed).
_targets: weakref.WeakValueDictionary[tuple, Target] = weakref.WeakValueDictionary()
_targets_lock = threading.Lock()


def shared_target(cfg: DrafterConfig, device: torch.device, dtype: torch.dtype) -> Target:
    """The device's target for this config, built under a lock unless one is alive."""
    key = target_key(cfg, device, dtype)
    with _targets_lock:
        target = _targets.get(key)
        if target is None:
            target = Target(cfg, device, dtype)
            _targets[key] = target
    return target


class TargetHeads(torch.nn.Module):
    """The target's own embedding and lm_head (no copy), kept when its decoder layers go."""

    def __init__(self, target: Target) -> None:
        super().__init__()
        self.embed_tokens = target.embed_tokens
        self.lm_head = target.lm_head


class FrozenHeads(torch.nn.Module):
    """A frozen copy of the target's embedding and lm_head on a drafter device of its own."""

    def __init__(self, target: Target, device: torch.device) -> None:
        super().__init__()
        self.embed_tokens = copy.deepcopy(target.embed_tokens).to(device).requires_grad_(False)
        self.lm_head = copy.deepcopy(target.lm_head).to(device).requires_grad_(False)


_heads: dict[tuple[tuple, str], TargetHeads | FrozenHeads] = {}


def shared_frozen_heads(target: Target, device: torch.device) -> TargetHeads | FrozenHeads:
    """The frozen embedding and lm_head a drafter on `device` uses, one per (target, device),
    shared by that device's replicas: the target's own on its device, else a mirror."""
    key = (target.key, str(device))
    with _targets_lock:
        if key not in _heads:
            same = target.device == device
            _heads[key] = TargetHeads(target) if same else FrozenHeads(target, device)
        return _heads[key]
