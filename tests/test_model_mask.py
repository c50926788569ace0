"""The DFlash mask_mod against the independently written dense reference, and anchor checks."""

from __future__ import annotations

import pytest
import torch
from torch.nn.attention.flex_attention import create_mask

from racegate.model.data import sample_anchors
from racegate.model.mask import (
    build_block_mask,
    check_anchors,
    dense_mask,
    dflash_mask_mod,
    visible_pairs,
)


def _mask_mod_dense(anchors, valid, s, block, q_len=None):
    n = anchors.shape[1]
    q_len = q_len or n * block
    mod = dflash_mask_mod(anchors, valid, s, block)
    return create_mask(mod, anchors.shape[0], None, q_len, s + n * block, device="cpu")


def _rule(anchors, valid, s, block):
    """The rule spelled out element by element (a third, loop-based statement of the mask)."""
    b, n = anchors.shape
    out = torch.zeros(b, 1, n * block, s + n * block, dtype=torch.bool)
    for i in range(b):
        for j in range(n):
            if not valid[i, j]:
                continue
            rows = slice(j * block, (j + 1) * block)
            out[i, 0, rows, : int(anchors[i, j])] = True
            out[i, 0, rows, s + j * block : s + (j + 1) * block] = True
    return out


@pytest.mark.parametrize("seed", range(4))
def test_mask_mod_matches_dense_reference_random(seed):
    g = torch.Generator().manual_seed(seed)
    s, block, n = 40, 4, 6
    loss_mask = (torch.rand(3, s, generator=g) > 0.3).float()
    anchors, valid = sample_anchors(loss_mask, n, block, g)
    ref = dense_mask(anchors, valid, s, block)
    assert torch.equal(_mask_mod_dense(anchors, valid, s, block), ref)
    assert torch.equal(_rule(anchors, valid, s, block), ref)
    assert visible_pairs(anchors, valid, block) == int(ref.sum())


@pytest.mark.parametrize(
    "anchors, valid",
    [
        ([[0, 5]], [[True, True]]),  # anchor 0 sees no context, only its own block
        ([[3, 36]], [[True, True]]),  # anchor at S - B
        ([[7, 0]], [[True, False]]),  # an invalid (padding) anchor sees nothing
        ([[0, 0]], [[False, False]]),  # a sample with no valid anchor at all
    ],
)
def test_mask_mod_edge_cases(anchors, valid):
    a, v = torch.tensor(anchors), torch.tensor(valid)
    s, block = 40, 4
    ref = dense_mask(a, v, s, block)
    assert torch.equal(_mask_mod_dense(a, v, s, block), ref)
    assert torch.equal(_rule(a, v, s, block), ref)
    for j in range(a.shape[1]):
        rows = ref[0, 0, j * block : (j + 1) * block]
        expected = int(a[0, j]) + block if v[0, j] else 0  # context prefix + own block, or nothing
        assert rows.sum(dim=-1).tolist() == [expected] * block


def test_padded_query_rows_are_safe_and_empty():
    # 5 blocks of 8 = 40 queries, not a multiple of the 128 tile: rows past 40 clamp and see nothing
    g = torch.Generator().manual_seed(0)
    s, block, n = 64, 8, 5
    anchors, valid = sample_anchors(torch.ones(2, s), n, block, g)
    padded = _mask_mod_dense(anchors, valid, s, block, q_len=128)
    assert not padded[:, :, n * block :].any()
    assert torch.equal(padded[:, :, : n * block], dense_mask(anchors, valid, s, block))
    bm = build_block_mask(anchors, valid, s, block)
    assert bm.shape[-2:] == (n * block, s + n * block)


def test_build_block_mask_is_fresh_each_call():
    anchors, valid = torch.tensor([[0, 8]]), torch.tensor([[True, True]])
    first = build_block_mask(anchors, valid, 32, 4)
    second = build_block_mask(anchors, valid, 32, 4)
    assert first is not second


@pytest.mark.parametrize(
    "anchors, valid, match",
    [
        ([[0, 37]], [[True, True]], "anchors out of range"),
        ([[-1, 3]], [[True, True]], "anchors out of range"),
        ([[0, 3]], [[True]], "same shape"),
        ([[0, 3]], [[1, 1]], "torch.bool"),
    ],
)
def test_check_anchors_rejects_bad_input(anchors, valid, match):
    with pytest.raises(ValueError, match=match):
        check_anchors(torch.tensor(anchors), torch.tensor(valid), 40, 4)


def test_check_anchors_ignores_invalid_entries():
    anchors = torch.tensor([[36, 999]])
    assert check_anchors(anchors, torch.tensor([[True, False]]), 40, 4) is None
    with pytest.raises(ValueError, match="out of range"):  # the same entry, marked valid
        check_anchors(anchors, torch.tensor([[True, True]]), 40, 4)


def test_sample_anchors_sorted_padded_and_supervised():
    g = torch.Generator().manual_seed(1)
    s, block, n = 48, 4, 10
    loss_mask = torch.zeros(3, s)
    loss_mask[0, 20:30] = 1  # few candidates: padding must appear
    loss_mask[1:, 5:] = 1
    anchors, valid = sample_anchors(loss_mask, n, block, g)
    assert anchors.shape == valid.shape == (3, n)
    check_anchors(anchors, valid, s, block)
    for i in range(3):
        live = anchors[i][valid[i]]
        assert torch.equal(live, live.sort().values) and len(set(live.tolist())) == len(live)
        assert bool((loss_mask[i, live + 1] > 0).all())
        k = int(valid[i].sum())
        assert valid[i, :k].all() and not valid[i, k:].any()  # padding at the end
        assert (anchors[i, k:] == 0).all()
    assert int(valid[0].sum()) == 10  # positions 19..28 have a supervised next token
