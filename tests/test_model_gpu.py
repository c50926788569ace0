"""GPU checks: compiled flex vs dense SDPA in bf16 (outputs and gradients) and real train steps."""

from __future__ import annotations

import math

import pytest
import torch

from racegate.model import attention
from racegate.model.data import sample_anchors
from racegate.model.mask import build_block_mask, dense_mask
from racegate.model.workload import make_workload

# The root conftest skips `gpu` tests without CUDA; the skipif makes sure they never pass silently
# if it does not.
pytestmark = [
    pytest.mark.gpu,
    pytest.mark.process,  # compiles for real: triton and inductor start their compilers
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
]


def _inputs(seed: int, s: int = 512, n: int = 20, block: int = 16):
    dev = torch.device("cuda")
    g = torch.Generator().manual_seed(seed)
    t = n * block  # 320 queries: not a multiple of the 128 tile
    qkv = [
        torch.randn(2, heads, length, 128, generator=g).to(dev, torch.bfloat16).requires_grad_()
        for heads, length in ((8, t), (4, s + t), (4, s + t))
    ]
    anchors, valid = sample_anchors((torch.rand(2, s, generator=g) > 0.3).float(), n, block, g)
    valid[1, -3:] = False
    anchors[1, -3:] = 0
    return qkv, anchors.to(dev), valid.to(dev), s, block


def _rel_err(a: torch.Tensor, b: torch.Tensor) -> float:
    a, b = a.detach().float(), b.detach().float()
    return float((a - b).norm() / b.norm().clamp(min=1e-6))


@pytest.mark.parametrize("kernel", ["per_device", "eager", "singleton"])
def test_flex_matches_sdpa_dense_outputs_and_grads_bf16(kernel):
    (q, k, v), anchors, valid, s, block = _inputs(0)
    fn = {
        "per_device": attention.compiled_for_device(q.device),
        "eager": attention.flex_kernel,
        "singleton": attention.transformers_singleton,
    }[kernel]
    out = fn(q, k, v, build_block_mask(anchors, valid, s, block), 128**-0.5)
    grad_out = torch.randn_like(out)
    grads = torch.autograd.grad(out, (q, k, v), grad_out)
    ref = attention.dense_kernel(q, k, v, dense_mask(anchors, valid, s, block), 128**-0.5)
    ref_grads = torch.autograd.grad(ref, (q, k, v), grad_out)
    torch.testing.assert_close(out, ref, atol=2e-2, rtol=2e-2)
    assert _rel_err(out, ref) < 1e-2
    for got, want in zip(grads, ref_grads, strict=True):
        assert torch.isfinite(got).all()
        assert _rel_err(got, want) < 2e-2
    assert not out[1, :, -3 * block :].any()  # invalid blocks: zero rows


@pytest.mark.parametrize("strategy", ["per_device", "singleton", "eager", "sdpa_dense"])
def test_small_train_step_runs(strategy):
    w = make_workload("small")
    replica = w.make_replica(torch.device("cuda"), strategy, seed=0)
    results = [replica.step(0) for _ in range(3)]
    bound = math.log(w.config.vocab_size) + 3  # random frozen lm_head: CE starts near log(V)
    assert all(r.tokens > 0 and math.isfinite(r.loss) and r.loss < bound for r in results)
    assert replica.eager_fallbacks() == 0
    assert next(replica.drafter.parameters()).dtype == torch.bfloat16


@pytest.mark.slow
def test_qwen3_8b_drafter_per_device_step_runs():
    w = make_workload("qwen3-8b-drafter")
    replica = w.make_replica(torch.device("cuda"), "per_device", seed=0)
    first = replica.step(0)
    second = replica.step(0)
    assert first.tokens > 0 and math.isfinite(second.loss)
    assert replica.eager_fallbacks() == 0
