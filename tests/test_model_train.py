"""The tiny train step on CPU: loss falls, frozen parts stay frozen, the compiled path runs."""

from __future__ import annotations

import time

import pytest
import torch

from racegate.harness.scenario.workload_api import (
    Replica,
    StepResult,
    Workload,
    WorkloadSpec,
    load_workload,
)
from racegate.model import target as target_module
from racegate.model.workload import make_workload

CPU = torch.device("cpu")


@pytest.fixture(scope="module")
def tiny():
    return make_workload("tiny")


def test_workload_fits_the_harness_interface(tiny):
    loaded = load_workload(WorkloadSpec(options={"preset": "tiny"}))
    assert isinstance(loaded, Workload) and isinstance(tiny, Workload)
    buckets = len(tiny.config.seq_buckets)
    assert loaded.name == "dflash-tiny" and list(loaded.shapes()) == list(range(buckets))
    assert "sdpa_dense" in tiny.strategies() and "per_device" in tiny.strategies()
    replica = tiny.make_replica(CPU, "sdpa_dense", seed=0)
    assert isinstance(replica, Replica)


def test_loss_falls_over_20_steps(tiny):
    replica = tiny.make_replica(CPU, "sdpa_dense", seed=0)
    losses = [replica.step(0).loss for _ in range(24)]
    assert all(torch.isfinite(torch.tensor(losses)))
    first, last = sum(losses[:4]) / 4, sum(losses[-4:]) / 4
    assert last < first - 0.15, losses


def test_step_reports_valid_query_tokens(tiny):
    replica = tiny.make_replica(CPU, "sdpa_dense", seed=3)
    for bucket in replica.buckets:
        result = replica.step(bucket.index)
        assert isinstance(result, StepResult)
        assert result.tokens % tiny.config.block_size == 0
        assert 0 < result.tokens <= bucket.batch_size * bucket.num_anchors * tiny.config.block_size
    assert replica.eager_fallbacks() == 0


def test_frozen_embedding_and_lm_head_get_no_grad(tiny):
    replica = tiny.make_replica(CPU, "sdpa_dense", seed=1)
    replica.forward_loss(0).backward()
    frozen = replica.frozen
    assert frozen.embed_tokens.weight.grad is None and frozen.lm_head.weight.grad is None
    assert not any(p.requires_grad for p in frozen.parameters())
    grads = [p.grad for p in replica.drafter.parameters()]
    assert all(g is not None for g in grads) and any(g.abs().sum() > 0 for g in grads)
    optimised = {id(p) for group in replica.optimizer.param_groups for p in group["params"]}
    assert id(frozen.lm_head.weight) not in optimised


def test_replicas_on_a_device_share_the_frozen_heads_and_a_live_target(tiny):
    a = tiny.make_replica(CPU, "sdpa_dense", seed=0)
    b = tiny.make_replica(CPU, "sdpa_dense", seed=1)
    assert a.frozen is b.frozen and a.drafter is not b.drafter
    every_step = make_workload("tiny", target_every_step=True)
    c = every_step.make_replica(CPU, "sdpa_dense", seed=0)
    d = every_step.make_replica(CPU, "sdpa_dense", seed=1)
    assert c.target is not None and c.target is d.target


def test_the_target_is_let_go_once_every_input_is_cached(tiny):
    """Its decoder layers (12.2 GiB at the 8B shape) are not kept beside the drafter once its
    hidden states are cached; a rebuilt target is the same (seeded), so the losses are too."""
    replica = tiny.make_replica(CPU, "sdpa_dense", seed=2)
    key = target_module.target_key(tiny.config, CPU, torch.float32)
    assert replica.target is None and key not in target_module._targets  # freed, no gc needed
    cached = {(b.index, m) for b in replica.buckets for m in range(b.micro_batches)}
    assert set(replica._cached) == cached
    again = tiny.make_replica(CPU, "sdpa_dense", seed=2)
    assert [again.step(b.index).loss for b in again.buckets] == [
        replica.step(b.index).loss for b in replica.buckets
    ]


def test_same_seed_same_losses(tiny):
    runs = [
        [tiny.make_replica(CPU, "sdpa_dense", seed=7).step(0).loss for _ in range(1)]
        for _ in range(2)
    ]
    assert runs[0] == runs[1]


@pytest.mark.process
def test_per_device_step_on_cpu_runs_compiled(tiny):
    replica = tiny.make_replica(CPU, "per_device", seed=0)
    reference = tiny.make_replica(CPU, "sdpa_dense", seed=0)
    compiled = [replica.step(0).loss for _ in range(3)]
    eager = [reference.step(0).loss for _ in range(3)]
    assert compiled == pytest.approx(eager, rel=1e-4, abs=1e-4)
    assert replica.eager_fallbacks() == 0 and replica.counts_fallbacks


def test_tiny_step_is_fast(tiny):
    replica = tiny.make_replica(CPU, "sdpa_dense", seed=0)
    replica.step(0)
    times = []
    for _ in range(3):  # best of 3: CI neighbours can steal one of the two cores for a while
        start = time.perf_counter()
        replica.step(0)
        times.append(time.perf_counter() - start)
    assert min(times) < 2.0


def test_target_every_step_recomputes_targets():
    w = make_workload("tiny", target_every_step=True)
    replica = w.make_replica(CPU, "sdpa_dense", seed=0)
    replica.step(0)
    replica.step(0)
    assert not replica._cached


def test_bad_inputs_raise(tiny):
    with pytest.raises(ValueError, match="unknown strategy"):
        tiny.make_replica(CPU, "fastest", seed=0)
    with pytest.raises(ValueError, match="needs a CUDA device"):
        tiny.make_replica(CPU, "singleton", seed=0)
    replica = tiny.make_replica(CPU, "sdpa_dense", seed=0)
    with pytest.raises(ValueError, match=r"unknown shape 9; choose from: 0, 1, 2"):
        replica.step(9)
    with pytest.raises(ValueError, match="unknown preset"):
        make_workload("huge")


@pytest.mark.process
def test_importable_in_a_spawned_child():
    import multiprocessing as mp

    ctx = mp.get_context("spawn")
    with ctx.Pool(1) as pool:
        assert pool.apply(_child_shapes) == list(
            range(len(make_workload("tiny").config.seq_buckets))
        )


def _child_shapes():
    from racegate.model.workload import make_workload

    return list(make_workload("tiny").shapes())


def test_the_cross_entropy_sees_the_logits_in_the_model_dtype():
    """No float32 upcast before the CE (SpecForge computes it on bf16 logits; the upcast cost
    7.3% of the step on an H200): every log-softmax of a bf16 chunked loss runs on bf16 input."""
    from torch.utils._python_dispatch import TorchDispatchMode

    from racegate.model.loss import chunked_loss

    class SoftmaxInputs(TorchDispatchMode):  # notes each real log-softmax's input dtype
        def __init__(self) -> None:
            super().__init__()
            self.dtypes: list[torch.dtype] = []

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            if func.overloadpacket is torch.ops.aten._log_softmax:
                self.dtypes.append(args[0].dtype)
            return func(*args, **(kwargs or {}))

    gen = torch.Generator().manual_seed(0)
    hidden = torch.randn(2, 24, 32, generator=gen).to(torch.bfloat16).requires_grad_()
    lm_head = (torch.randn(300, 32, generator=gen) * 0.5).to(torch.bfloat16)
    labels = torch.randint(0, 300, (2, 3, 8), generator=gen)
    weights = torch.rand(2, 3, 8, generator=gen)
    with SoftmaxInputs() as mode:
        loss = chunked_loss(hidden, lm_head, labels, weights, chunk_tokens=16)
    assert mode.dtypes == [torch.bfloat16] * 3, mode.dtypes  # 48 tokens in chunks of 16
    assert loss.dtype == torch.float32 and torch.isfinite(loss)
