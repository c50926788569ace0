"""benchmarks/plain_step.py: its DFlash mask, and a CPU smoke run at the tiny shape."""

from __future__ import annotations

import importlib.util
import json
import math
import sys
from pathlib import Path
from types import ModuleType

import pytest
import torch

PATH = Path(__file__).resolve().parents[1] / "benchmarks" / "plain_step.py"


def _load() -> ModuleType:
    spec = importlib.util.spec_from_file_location("plain_step", PATH)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["plain_step"] = module  # dataclasses look their module up here
    spec.loader.exec_module(module)
    return module


def test_mask_context_strictly_before_anchor_own_block_and_invalid_sees_nothing() -> None:
    ps = _load()
    anchors, valid = torch.tensor([[3, 0]]), torch.tensor([[True, False]])
    mod = ps.mask_mod_for(anchors, valid, 8, 2)  # context 8, blocks of 2
    m = ps.dense_mask(mod, 1, 4, 12, "cpu")[0, 0]
    seen = {q: [kv for kv in range(12) if m[q, kv]] for q in range(4)}
    assert seen[0] == seen[1] == [0, 1, 2, 8, 9]  # kv < 3 (not 3), and block 0 at 8..9
    assert seen[2] == seen[3] == []  # block 1 is invalid


def test_visible_pairs_counts_the_mask() -> None:
    ps = _load()
    gen = torch.Generator().manual_seed(3)
    anchors = torch.randint(0, 57, (2, 6), generator=gen)  # context 64, blocks of 8
    valid = torch.rand(2, 6, generator=gen) > 0.3
    mask = ps.dense_mask(ps.mask_mod_for(anchors, valid, 64, 8), 2, 48, 64 + 48, "cpu")
    assert ps.visible_pairs(anchors, valid, 8) == int(mask.sum())


def test_tiny_cpu_step_runs_and_reports(tmp_path: Path) -> None:
    ps = _load()
    out = tmp_path / "plain.json"
    table = tmp_path / "plain-profile.txt"
    argv = ["--tiny", "--steps", "2", "--warmup", "1", "--json", str(out)]
    assert ps.main([*argv, "--profile-table", str(table), "--profile-steps", "1"]) == 0
    text = table.read_text()  # torch.profiler's key_averages table of one more step
    assert text.startswith("plain step, 1 steps after the timed ones") and "Self CPU" in text
    assert "aten::mm" in text or "aten::addmm" in text
    res = json.loads(out.read_text())
    assert res["attention"] == "dense sdpa" and res["steps"] == 2 and len(res["step_ms"]) == 2
    assert math.isfinite(res["final_loss"]) and res["query_tokens_per_s"] > 0
    assert res["mfu"] is None  # no MFU claimed off an H200
    # a query sees its own block (8) and a < 121 context keys, of 128 + 12 x 8 keys
    assert 8 / 224 < res["mask_density"] < (8 + 120) / 224


def _plain_shape(ps: ModuleType, preset: str, **small: int):
    """The plain step's Shape for racegate's `preset` at its steady bucket (bucket 0): the same
    layers, heads and vocabulary, the same sequences per step, context, anchors and block."""
    from racegate.model.config import from_name
    from racegate.model.data import make_buckets

    cfg = from_name(preset)
    bucket = make_buckets(cfg)[0]
    fields = dict(
        hidden=cfg.hidden_size, intermediate=cfg.intermediate_size, layers=cfg.num_layers,
        heads=cfg.num_heads, kv_heads=cfg.num_kv_heads, head_dim=cfg.head_dim,
        vocab=cfg.vocab_size, target_layers=len(cfg.target_layer_ids), context=bucket.seq_len,
        anchors=bucket.num_anchors, block=cfg.block_size,
        batch=bucket.batch_size * bucket.micro_batches, loss_chunk=cfg.loss_chunk_tokens,
    )  # fmt: skip
    return cfg, bucket, ps.Shape(**(fields | small))


def test_tokens_per_step_count_what_the_harness_counts() -> None:
    """Both steps on CPU at racegate's tiny preset: the plain step's query tokens per step are
    racegate's StepResult.tokens (so their tokens/s are in one unit)."""
    from racegate.model.workload import make_workload

    ps = _load()
    _, bucket, shape = _plain_shape(ps, "tiny")
    assert shape == ps.Shape(**{**ps.asdict(ps.TINY), "batch": shape.batch})  # --tiny is tiny
    replica = make_workload("tiny").make_replica(torch.device("cpu"), "sdpa_dense", seed=0)
    racegate = replica.step(bucket.index).tokens
    plain = ps.run(shape, torch.device("cpu"), steps=1, warmup=0)
    assert plain.query_tokens_per_step == racegate == 4 * 12 * 8  # 4 sequences, 12 anchors x 8
    assert plain.query_tokens_per_s == pytest.approx(racegate / (plain.median_step_ms / 1e3))


def test_the_8b_shape_is_the_harness_steady_bucket_and_counts_alike() -> None:
    """At qwen3-8b-drafter the plain shape is racegate's bucket 0 per sequence, and every anchor
    racegate draws there is valid: its tokens per step are batch x anchors x block, as here."""
    from racegate.model.data import BatchSource

    ps = _load()
    cfg, bucket, shape = _plain_shape(ps, "qwen3-8b-drafter")
    assert shape == ps.Shape(batch=shape.batch)  # the plain step's defaults are that shape
    source = BatchSource(cfg, seed=0)
    drawn = [source.anchors(bucket, source.sequences(bucket, m)[1]) for m in range(3)]
    counted = [ps.query_tokens(valid, cfg.block_size) for _, valid in drawn]
    per_micro = bucket.batch_size * bucket.num_anchors * cfg.block_size
    assert counted == [per_micro] * 3, counted
    assert shape.query_slots == per_micro * bucket.micro_batches


def test_the_cross_entropy_runs_on_the_logits_dtype_it_is_asked_for(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """--ce-dtype model keeps bf16 logits (SpecForge's trainer); float32 upcasts them first
    (as both steps did before the bf16 change). The losses agree to bf16's precision and
    differ: each ran."""
    ps = _load()
    gen = torch.Generator().manual_seed(0)
    hidden = torch.randn(64, 32, generator=gen).to(torch.bfloat16)
    lm_head = (torch.randn(500, 32, generator=gen) * 0.5).to(torch.bfloat16)
    labels = torch.randint(0, 500, (64,), generator=gen)
    weights = torch.rand(64, generator=gen)
    seen: list[torch.dtype] = []
    ce = torch.nn.functional.cross_entropy

    def recorded(logits, *args, **kwargs):  # the real cross-entropy, its input dtype noted
        seen.append(logits.dtype)
        return ce(logits, *args, **kwargs)

    monkeypatch.setattr(ps.F, "cross_entropy", recorded)
    up = ps.chunked_ce(hidden, lm_head, labels, weights, 16, upcast=True)
    bf = ps.chunked_ce(hidden, lm_head, labels, weights, 16, upcast=False)
    assert seen == [torch.float32] * 4 + [torch.bfloat16] * 4
    assert up.dtype == bf.dtype == torch.float32  # the weighted sum is float32 either way
    assert up != bf and abs(float(up) - float(bf)) < 0.02 * float(up)
