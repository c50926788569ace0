"""`make_workload()`: the built-in DFlash workload behind harness.workload_api.Workload.

Importable in a spawned child: no state at import beyond module-level caches.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from model.config import DrafterConfig, from_name
from model.data import BatchSource, make_buckets
from model.flops import step_flops
from model.mask import visible_pairs
from model.strategies import CUDA_ONLY, STRATEGIES
from model.train_step import DFlashReplica

FLOPS_SAMPLE_SEED = 0  # anchors drawn to estimate the mask's density for flops_per_step


class DFlashWorkload:
    """DFlash drafter training on one preset; shapes are bucket ids (first = steady state)."""

    def __init__(self, config: DrafterConfig) -> None:
        self.config = config
        self.name = f"dflash-{config.preset}"
        self.buckets = make_buckets(config)
        self._flops: dict[int, float] = {}

    def strategies(self) -> Sequence[str]:
        """All of model.strategies.STRATEGIES on CUDA; singleton and eager need CUDA."""
        if torch.cuda.is_available():
            return STRATEGIES
        return tuple(s for s in STRATEGIES if s not in CUDA_ONLY)

    def shapes(self) -> Sequence[int]:
        return [b.index for b in self.buckets]

    def make_replica(self, device: torch.device, strategy: str, *, seed: int,
                     target_device: torch.device | None = None) -> DFlashReplica:
        """`target_device`: where the frozen target runs (default: `device`), as in the
        incident's topology (target on GPUs 0-4, drafter threads on 5-7)."""
        return DFlashReplica(self.config, device, strategy, seed=seed,
                             target_device=target_device)

    def flops_per_step(self, shape: int) -> float | None:
        """Analytic FLOPs (model.flops) with the attention term at a sampled mask density."""
        if shape not in self._flops:
            bucket = self.buckets[shape]
            source = BatchSource(self.config, FLOPS_SAMPLE_SEED)
            _, loss_mask = source.sequences(bucket, 0)
            anchors, valid = source.anchors(bucket, loss_mask)
            pairs = visible_pairs(anchors, valid, self.config.block_size)
            self._flops[shape] = step_flops(self.config, bucket, pairs).total
        return self._flops[shape]

    def __repr__(self) -> str:
        sizes = ", ".join(f"{b.index}:S={b.seq_len}x{b.batch_size}x{b.micro_batches}"
                          for b in self.buckets)
        return f"DFlashWorkload({self.name}; buckets {sizes})"


def make_workload(preset: str = "tiny", **overrides: Any) -> DFlashWorkload:
    """The workload for `preset` (tiny, small, qwen3-8b-drafter, qwen3-4b-drafter) + overrides."""
    return DFlashWorkload(from_name(preset, **overrides))
