"""Synthetic data: motif-built token sequences, length buckets, token-budget batches, anchors.

Everything is drawn on CPU from seeded generators (deterministic), then moved to the device.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from racegate.model.config import DrafterConfig

MOTIF_LEN = 24  # not a multiple of any block size, so block slots don't line up with motifs
NOISE = 0.05  # fraction of tokens replaced at random


@dataclass(frozen=True)
class Bucket:
    """One length bucket: its padded length and the stable shapes of its batches."""

    index: int
    seq_len: int  # padded context length S
    min_len: int  # real lengths lie in (min_len, seq_len]
    batch_size: int  # sequences per micro-batch
    micro_batches: int  # micro-batches per optimizer step (token budget / seq_len sequences)
    num_anchors: int  # anchor slots per sequence, fixed so shapes don't change across steps


def make_buckets(cfg: DrafterConfig) -> tuple[Bucket, ...]:
    """Buckets in config order (the first is the steady-state shape)."""
    ascending = sorted(cfg.seq_buckets)
    buckets = []
    for index, seq_len in enumerate(cfg.seq_buckets):
        shorter = [s for s in ascending if s < seq_len]
        per_step = cfg.token_budget // seq_len
        batch = cfg.micro_batch_size or per_step
        buckets.append(
            Bucket(
                index=index,
                seq_len=seq_len,
                min_len=shorter[-1] if shorter else seq_len // 2,
                batch_size=batch,
                micro_batches=max(per_step // batch, 1),
                num_anchors=min(cfg.max_anchors, seq_len - cfg.block_size + 1),
            )
        )
    return tuple(buckets)


class SyntheticText:
    """A fixed 'language' (Zipf-weighted motif bank from data_seed) to draw sequences from.

    Motifs give the drafter something learnable (the next tokens follow from the anchor and
    the context); the prompt part of each sequence is unsupervised (loss_mask 0), the rest
    supervised, padding after the real length.
    """

    def __init__(self, cfg: DrafterConfig) -> None:
        self.pad_id = cfg.pad_token_id
        self.real_vocab = cfg.vocab_size - 2  # the last two ids are pad and mask
        g = torch.Generator().manual_seed(cfg.data_seed)
        token_p = _zipf(self.real_vocab)[torch.randperm(self.real_vocab, generator=g)]
        num_motifs = min(256, self.real_vocab)
        self.motifs_MW = torch.multinomial(
            token_p, num_motifs * MOTIF_LEN, replacement=True, generator=g
        ).view(num_motifs, MOTIF_LEN)
        self.motif_p = _zipf(num_motifs)

    def sample(
        self, bucket: Bucket, count: int, g: torch.Generator
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """input_ids [count, S] (long) and loss_mask [count, S] (float)."""
        s = bucket.seq_len
        per_row = -(-s // MOTIF_LEN)
        picks = torch.multinomial(self.motif_p, count * per_row, replacement=True, generator=g)
        ids_BS = self.motifs_MW[picks].view(count, -1)[:, :s].clone()
        noisy_BS = torch.rand(count, s, generator=g) < NOISE
        ids_BS[noisy_BS] = torch.randint(0, self.real_vocab, (int(noisy_BS.sum()),), generator=g)
        span = s - bucket.min_len
        lengths_B = (
            bucket.min_len + 1 + (torch.rand(count, generator=g) * span).long().clamp(max=span - 1)
        )
        prompt_B = (lengths_B * (0.1 + 0.4 * torch.rand(count, generator=g))).long()
        pos_S = torch.arange(s)
        ids_BS[pos_S >= lengths_B[:, None]] = self.pad_id
        loss_mask_BS = ((pos_S >= prompt_B[:, None]) & (pos_S < lengths_B[:, None])).float()
        return ids_BS, loss_mask_BS


def _zipf(n: int, exponent: float = 1.1) -> torch.Tensor:
    return 1.0 / torch.arange(1, n + 1, dtype=torch.float64).pow(exponent)


def sample_anchors(
    loss_mask_BS: torch.Tensor, num_anchors: int, block: int, g: torch.Generator
) -> tuple[torch.Tensor, torch.Tensor]:
    """Sorted random anchors [B, N] among positions 0..S-block whose next token is supervised.

    Samples with fewer candidates than N are padded at the end with invalid entries (anchor 0,
    valid False), so N and every shape stay fixed within a bucket.
    """
    batch, s = loss_mask_BS.shape
    last = s - block
    candidate_BP = loss_mask_BS[:, 1 : last + 2] > 0  # p in 0..last, target p+1 supervised
    scores_BP = torch.rand(batch, last + 1, generator=g).masked_fill(~candidate_BP, 2.0)
    picked_BN = scores_BP.topk(num_anchors, dim=1, largest=False).indices
    picked_valid_BN = candidate_BP.gather(1, picked_BN)
    key_BN = torch.where(picked_valid_BN, picked_BN, last + 1)  # invalid entries sort last
    key_BN = key_BN.sort(dim=1).values
    valid_BN = key_BN <= last
    return torch.where(valid_BN, key_BN, 0), valid_BN


class BatchSource:
    """Per-replica batches. Sequences are fixed per (bucket, micro-batch) unless the target runs
    every step (then fresh each step); anchors are re-drawn every step."""

    def __init__(self, cfg: DrafterConfig, seed: int) -> None:
        self.cfg = cfg
        self.seed = seed
        self.text = SyntheticText(cfg)
        self.gen = torch.Generator().manual_seed(seed)

    def sequences(self, bucket: Bucket, micro: int) -> tuple[torch.Tensor, torch.Tensor]:
        if self.cfg.target_every_step:
            return self.text.sample(bucket, bucket.batch_size, self.gen)
        g = torch.Generator().manual_seed(hash((self.seed, bucket.index, micro)) & 0x7FFF_FFFF)
        return self.text.sample(bucket, bucket.batch_size, g)

    def anchors(self, bucket: Bucket, loss_mask_BS: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return sample_anchors(loss_mask_BS, bucket.num_anchors, self.cfg.block_size, self.gen)
