"""One replica: drafter + shared target on a device, AdamW, and the DFlash train step.

step = target forward (no_grad, or cached) -> drafter -> chunked loss -> backward -> AdamW.
"""

from __future__ import annotations

from typing import Any

import torch

from racegate.harness.scenario.workload_api import StepResult
from racegate.model import attention, loss, mask
from racegate.model.config import DrafterConfig
from racegate.model.data import BatchSource, Bucket, make_buckets
from racegate.model.drafter import Drafter
from racegate.model.strategies import make_strategy
from racegate.model.target import (
    Target,
    cast_parameters,
    seeded,
    shared_frozen_heads,
    shared_target,
)


def resolve_dtype(cfg: DrafterConfig, device: torch.device) -> torch.dtype:
    if cfg.dtype == "auto":
        return torch.bfloat16 if device.type == "cuda" else torch.float32
    return getattr(torch, cfg.dtype)


def resolve_device(device: torch.device | str) -> torch.device:
    """A concrete device: 'cuda' becomes 'cuda:<current>' so per-device tables key it stably."""
    device = torch.device(device)
    if device.type == "cuda" and device.index is None:
        device = torch.device("cuda", torch.cuda.current_device())
    return device


class DFlashReplica:
    """One trainable drafter on one device, driven by one thread
    (racegate.harness.scenario.workload_api.Replica).

    Built in whichever thread calls the constructor (the harness: the main thread). The target
    is shared by replicas on the same device; nothing else is shared except, per strategy, the
    compiled attention kernel.
    """

    def __init__(
        self,
        cfg: DrafterConfig,
        device: torch.device | str,
        strategy: str,
        *,
        seed: int,
        target_device: torch.device | str | None = None,
    ) -> None:
        self.cfg = cfg
        self.device = resolve_device(device)
        self.dtype = resolve_dtype(cfg, self.device)
        self.strategy = make_strategy(strategy, self.device)  # ValueError before any allocation
        self.buckets = make_buckets(cfg)
        # The incident's topology runs the target on other GPUs than the drafter threads: its
        # hidden states are copied over, and the frozen embedding/lm_head are mirrored here.
        self.target_device = resolve_device(target_device or self.device)
        target = shared_target(cfg, self.target_device, self.dtype)
        self.frozen = shared_frozen_heads(target, self.device)
        # Held only while needed: for every step (target_every_step), else until every bucket's
        # hidden states are cached below (then its decoder layers are freed: racegate.model.target).
        self.target: Target | None = target
        with seeded(self.device, seed), torch.device(self.device):
            self.drafter = Drafter(cfg, self.strategy.attend)
        cast_parameters(self.drafter, self.dtype)
        self.drafter.train()
        self.optimizer = torch.optim.AdamW(
            self.drafter.parameters(), lr=cfg.lr, fused=self.device.type == "cuda"
        )
        warmup = max(cfg.lr_warmup_steps, 1)
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(
            self.optimizer, lambda step: min(1.0, (step + 1) / warmup)
        )
        self.data = BatchSource(cfg, seed)
        # (bucket, micro) -> inputs and target hidden states, when reused (see _inputs)
        self._cached: dict[tuple[int, int], tuple[torch.Tensor, ...]] = {}
        self._fallbacks = 0
        if not cfg.target_every_step:
            for bucket in self.buckets:
                for micro in range(bucket.micro_batches):
                    self._inputs(bucket, micro)
            self.target = None

    # ---- the Replica protocol --------------------------------------------------------------
    def step(self, shape: int) -> StepResult:
        """One optimizer step on bucket `shape`; tokens = valid anchors x block_size (queries)."""
        bucket = self._bucket(shape)
        before = attention.eager_fallback_count()
        try:
            self.optimizer.zero_grad(set_to_none=True)
            micros, tokens = self._step_inputs(bucket)
            loss_sum = None
            for inputs in micros:
                micro_loss = self._forward_loss(bucket, *inputs)
                (micro_loss / bucket.micro_batches).backward()
                detached = micro_loss.detach()
                loss_sum = detached if loss_sum is None else loss_sum + detached
            self.optimizer.step()
            self.scheduler.step()
        finally:
            self._fallbacks += attention.eager_fallback_count() - before
        return StepResult(tokens=tokens, loss=float(loss_sum) / bucket.micro_batches)

    def eager_fallbacks(self) -> int:
        """Uncompiled runs of the compiled kernel during this replica's steps (its threads only).

        Always 0 for strategies whose compiled object is not ours (singleton) or that compile
        nothing (eager, sdpa_dense): see `counts_fallbacks`.
        """
        return self._fallbacks

    # ---- extras for the harness and tests ---------------------------------------------------
    @property
    def counts_fallbacks(self) -> bool:
        return self.strategy.counts_fallbacks

    def forward_loss(self, shape: int, micro: int = 0) -> torch.Tensor:
        """Loss of one micro-batch (graph kept, nothing stepped): for tests and probes."""
        bucket = self._bucket(shape)
        return self._forward_loss(bucket, *self._step_inputs(bucket)[0][micro])

    # ---- internals --------------------------------------------------------------------------
    def _bucket(self, shape: int) -> Bucket:
        if not 0 <= shape < len(self.buckets):
            allowed = ", ".join(str(b.index) for b in self.buckets)
            raise ValueError(f"unknown shape {shape!r}; choose from: {allowed}")
        return self.buckets[shape]

    def _inputs(self, bucket: Bucket, micro: int) -> tuple[torch.Tensor, ...]:
        """ids, loss_mask (device), target hidden states, loss_mask (CPU, for anchor sampling).

        Cached per (bucket, micro-batch) unless target_every_step, all of them when the replica
        is built: the reference step of docs/workload.md excludes the target, and in the
        incident it ran on other GPUs.
        """
        key = (bucket.index, micro)
        if key in self._cached:
            return self._cached[key]
        assert self.target is not None, "the target is let go only once every input is cached"
        ids_BS, loss_mask_cpu_BS = self.data.sequences(bucket, micro)
        ids_BS = ids_BS.to(self.device, non_blocking=True)
        loss_mask_BS = loss_mask_cpu_BS.to(self.device, non_blocking=True)
        hidden_BSX = self.target.hidden_states(ids_BS.to(self.target_device, non_blocking=True))
        inputs = (ids_BS, loss_mask_BS, hidden_BSX.to(self.device), loss_mask_cpu_BS)
        if not self.cfg.target_every_step:
            self._cached[key] = inputs
        return inputs

    def _step_inputs(self, bucket: Bucket) -> tuple[list[tuple[torch.Tensor, ...]], int]:
        """Per micro-batch (ids, loss_mask, target hidden, anchors, valid) on device; tokens.

        Anchors for the whole step are drawn on CPU and moved in one copy: a copy from pageable
        memory waits for the GPU, so doing it per micro-batch would stall the stream each time.
        """
        block = self.cfg.block_size
        inputs = [self._inputs(bucket, micro) for micro in range(bucket.micro_batches)]
        drawn = [self.data.anchors(bucket, loss_mask_cpu) for *_, loss_mask_cpu in inputs]
        for anchors_BN, valid_BN in drawn:
            mask.check_anchors(anchors_BN, valid_BN, bucket.seq_len, block)
        anchors_MBN = torch.stack([a for a, _ in drawn]).to(self.device, non_blocking=True)
        valid_MBN = torch.stack([v for _, v in drawn]).to(self.device, non_blocking=True)
        tokens = int(sum(int(v.sum()) for _, v in drawn)) * block
        micros = [(*x[:3], anchors_MBN[m], valid_MBN[m]) for m, x in enumerate(inputs)]
        return micros, tokens

    def _forward_loss(
        self, bucket: Bucket, ids_BS, loss_mask_BS, hidden_BSX, anchors_BN, valid_BN
    ) -> torch.Tensor:
        cfg, block = self.cfg, self.cfg.block_size
        noise_BT = self._noise_ids(ids_BS, anchors_BN, valid_BN)
        noise_BTH = self.frozen.embed_tokens(noise_BT)  # frozen: no grad flows into it
        draft_pos_BT = (anchors_BN[:, :, None] + torch.arange(block, device=self.device)).flatten(1)
        context_pos_BS = torch.arange(bucket.seq_len, device=self.device).expand(len(ids_BS), -1)
        positions_BK = torch.cat([context_pos_BS, draft_pos_BT], dim=1)
        attn_mask = self._mask(anchors_BN, valid_BN, bucket.seq_len)

        out_BTH = self.drafter(noise_BTH, hidden_BSX, positions_BK, attn_mask)
        labels_BNK, weights_BNK = loss.block_targets(
            ids_BS, loss_mask_BS, anchors_BN, valid_BN, block, cfg.loss_gamma
        )
        return loss.chunked_loss(
            out_BTH,
            self.frozen.lm_head.weight,
            labels_BNK,
            weights_BNK,
            cfg.loss_chunk_tokens,
            use_reentrant=cfg.use_reentrant,
        )

    def _noise_ids(self, ids_BS, anchors_BN, valid_BN) -> torch.Tensor:
        """Each block = [anchor token, MASK x (block-1)]; invalid blocks are all MASK."""
        batch, n = anchors_BN.shape
        mask_id = self.cfg.mask_token_id
        noise_BNK = ids_BS.new_full((batch, n, self.cfg.block_size), mask_id)
        anchor_tokens_BN = ids_BS.gather(1, anchors_BN)
        noise_BNK[:, :, 0] = torch.where(valid_BN, anchor_tokens_BN, mask_id)
        return noise_BNK.flatten(1)

    def _mask(self, anchors_BN, valid_BN, context_len: int) -> Any:
        if self.strategy.mask_kind == "block":
            return mask.build_block_mask(anchors_BN, valid_BN, context_len, self.cfg.block_size)
        return mask.dense_mask(anchors_BN, valid_BN, context_len, self.cfg.block_size)
