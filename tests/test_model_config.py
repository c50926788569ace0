"""Presets, derived fields, bad-input errors, and the analytic counts (no allocation)."""

from __future__ import annotations

import pytest

from racegate.model.config import (
    PRESETS,
    DrafterConfig,
    derive_target_layer_ids,
    from_name,
    trainable_params,
)
from racegate.model.data import make_buckets
from racegate.model.flops import step_flops
from racegate.model.workload import make_workload


def test_presets_build_and_are_flat():
    assert list(PRESETS) == ["tiny", "small", "qwen3-8b-drafter", "qwen3-4b-drafter"]
    for name in PRESETS:
        assert from_name(name).preset == name


def test_reference_shapes():
    big = from_name("qwen3-8b-drafter")
    assert (big.num_layers, big.hidden_size, big.intermediate_size) == (5, 4096, 12288)
    assert (big.num_heads, big.num_kv_heads, big.head_dim, big.vocab_size) == (32, 8, 128, 151936)
    assert big.target_layer_ids == (1, 9, 17, 25, 33) and big.target_layers_built == 34
    assert (big.block_size, big.max_anchors, big.token_budget) == (16, 512, 49152)
    assert big.loss_gamma == 7.0
    assert big.seq_buckets[0] == 3072 and big.use_reentrant
    four = from_name("qwen3-4b-drafter")
    assert (four.hidden_size, four.intermediate_size) == (2560, 9728)


def test_target_layer_ids_formula():
    assert derive_target_layer_ids(36, 5) == (1, 9, 17, 25, 33)
    assert derive_target_layer_ids(28, 3) == (1, 13, 25)
    assert derive_target_layer_ids(4, 1) == (1,)
    assert all(0 <= i < 3 for i in derive_target_layer_ids(3, 4))  # clipped


def test_trainable_params_8b_without_allocating():
    n = trainable_params(from_name("qwen3-8b-drafter"))
    assert 1.04e9 < n < 1.06e9


def test_trainable_params_match_the_module():
    import torch

    from racegate.model.attention import dense_kernel
    from racegate.model.drafter import Drafter

    cfg = from_name("tiny")
    drafter = Drafter(cfg, dense_kernel)
    assert sum(p.numel() for p in drafter.parameters()) == trainable_params(cfg)
    assert all(b.dtype == torch.float32 for b in drafter.buffers())


def test_token_budget_batches_and_8b_flops():
    cfg = from_name("qwen3-8b-drafter")
    b0 = make_buckets(cfg)[0]
    assert b0.seq_len * b0.batch_size * b0.micro_batches == 49152
    # docs/workload.md reference: one 3072-context sample, 512 x 16 queries, mask density ~13.9%
    one = step_flops(cfg, b0.__class__(0, 3072, 2048, 1, 1, 512), 0.139 * 8192 * (3072 + 8192))
    assert 7.5e13 < one.total < 8.5e13
    assert 0.55 < one.gemm / one.total < 0.65 and 0.33 < one.lm_head / one.total < 0.42
    assert 0.03 < one.attention / one.total < 0.05  # GEMMs 58%, lm_head 37%, attention 4%


def test_workload_flops_per_step_positive():
    w = make_workload("tiny")
    assert all(w.flops_per_step(s) > 0 for s in w.shapes())


def test_unknown_preset_message():
    with pytest.raises(ValueError) as err:
        from_name("x")
    assert str(err.value) == (
        "unknown preset 'x'; choose from: tiny, small, qwen3-8b-drafter, qwen3-4b-drafter"
    )


@pytest.mark.parametrize(
    "overrides, field",
    [
        (dict(target_hidden_size=128), "target_hidden_size"),
        (dict(block_size=64), "block_size"),
        (dict(block_size=1), "block_size"),
        (dict(max_anchors=0), "max_anchors"),
        (dict(max_anchors=1000), "max_anchors"),
        (dict(num_kv_heads=3), "num_kv_heads"),
        (dict(target_layer_ids=(1, 99)), "target_layer_ids"),
        (dict(dtype="fp8"), "dtype"),
        (dict(loss_chunk_tokens=60), "loss_chunk_tokens"),
        (dict(token_budget=64), "token_budget"),
        (dict(seq_buckets=()), "seq_buckets"),
        (dict(bogus=1), "bogus"),
    ],
)
def test_bad_config_raises_naming_the_field(overrides, field):
    with pytest.raises(ValueError, match=field):
        from_name("tiny", **overrides)


def test_bad_values_name_allowed_values():
    with pytest.raises(ValueError, match=r"allowed: auto, bfloat16, float32"):
        DrafterConfig(dtype="half")
    with pytest.raises(ValueError, match=r"allowed: 1\.\.57"):
        from_name("tiny", max_anchors=58)
