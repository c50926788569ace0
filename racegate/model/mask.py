"""The DFlash attention mask: flex `mask_mod`, an independent dense reference, and the BlockMask.

KV = [context S | block_0 .. block_{N-1}], Q = [block_0 .. block_{N-1}] (docs/workload.md).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch.nn.attention.flex_attention import BlockMask, create_block_mask

MaskMod = Callable[[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]


def check_anchors(anchors: torch.Tensor, valid: torch.Tensor, context_len: int, block: int) -> None:
    """ValueError unless anchors/valid are matching [batch, N] tensors with valid anchors in range.

    Reads values, so call it on CPU tensors (data does) rather than on the device in the hot path.
    """
    if anchors.dim() != 2 or anchors.shape != valid.shape:
        raise ValueError(
            f"anchors {tuple(anchors.shape)} and valid {tuple(valid.shape)}: allowed: two "
            "[batch, num_anchors] tensors of the same shape"
        )
    if valid.dtype != torch.bool:
        raise ValueError(f"valid has dtype {valid.dtype}; allowed: torch.bool")
    live = anchors[valid]
    if live.numel() and (int(live.min()) < 0 or int(live.max()) > context_len - block):
        raise ValueError(
            f"anchors out of range [{int(live.min())}, {int(live.max())}]; allowed: "
            f"0..{context_len - block} (context_len {context_len} - block_size {block})"
        )


def dflash_mask_mod(
    anchors: torch.Tensor, valid: torch.Tensor, context_len: int, block: int
) -> MaskMod:
    """mask_mod for flex: a query in block j (anchor a) sees context kv < a and its own block.

    Rows past the last block (create_block_mask pads Q to its 128 tile) clamp the block index
    before gathering and are masked out by `in_range`; invalid anchors see nothing.
    """
    num_blocks = anchors.shape[1]

    def mask_mod(b: torch.Tensor, h: torch.Tensor, q_idx: torch.Tensor, kv_idx: torch.Tensor):
        q_block = q_idx // block
        safe_block = q_block.clamp(max=num_blocks - 1)
        anchor = anchors[b, safe_block]
        sees_context = (kv_idx < context_len) & (kv_idx < anchor)
        kv_block = (kv_idx - context_len) // block
        sees_own_block = (kv_idx >= context_len) & (kv_block == q_block)
        in_range = q_block < num_blocks
        return (sees_context | sees_own_block) & valid[b, safe_block] & in_range

    return mask_mod


def build_block_mask(
    anchors: torch.Tensor, valid: torch.Tensor, context_len: int, block: int
) -> BlockMask:
    """A fresh BlockMask for this step (anchors are random), never compiled, never cached.

    `anchors`/`valid` live on the target device; the BlockMask is built there.
    """
    batch, num_blocks = anchors.shape
    q_len = num_blocks * block
    return create_block_mask(
        dflash_mask_mod(anchors, valid, context_len, block),
        B=batch,
        H=None,
        Q_LEN=q_len,
        KV_LEN=context_len + q_len,
        device=anchors.device,
    )


def dense_mask(
    anchors: torch.Tensor, valid: torch.Tensor, context_len: int, block: int
) -> torch.Tensor:
    """Dense boolean [batch, 1, N*block, S + N*block] mask, written from the rule, not mask_mod.

    Built per anchor block: the context part is a prefix of length `anchor`, the draft part an
    identity over blocks expanded to block x block tiles. Used by sdpa_dense and the tests.
    """
    num_blocks = anchors.shape[1]
    device = anchors.device
    positions = torch.arange(context_len, device=device)
    context_BNS = (positions[None, None, :] < anchors[:, :, None]) & valid[:, :, None]
    own_NN = torch.eye(num_blocks, dtype=torch.bool, device=device)
    draft_BNN = own_NN[None] & valid[:, :, None]
    # each block row repeats for its `block` queries; each draft block column for its keys
    context_BTS = context_BNS.repeat_interleave(block, dim=1)
    draft_BTT = draft_BNN.repeat_interleave(block, dim=1).repeat_interleave(block, dim=2)
    return torch.cat([context_BTS, draft_BTT], dim=2)[:, None]


def visible_pairs(anchors: torch.Tensor, valid: torch.Tensor, block: int) -> int:
    """(query, key) pairs the mask allows, per head: block x (anchor + block) per valid block."""
    per_block = (anchors + block) * block
    return int((per_block * valid).sum())
