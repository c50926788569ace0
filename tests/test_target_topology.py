"""The incident's topology as data: target devices given apart from the drafter devices."""

from __future__ import annotations

import torch

from racegate.harness.scenario.spec import make_scenario
from racegate.model.target import FrozenHeads, shared_target
from racegate.model.train_step import DFlashReplica
from racegate.model.workload import make_workload


def test_scenario_carries_target_devices() -> None:
    sc = make_scenario(devices="5,6,7", target_devices="0,1,2,3,4", threads_per_device=1)
    assert sc.target_devices == tuple(f"cuda:{i}" for i in range(5))
    assert sc.threads == 3 and sc.uses_cuda
    assert make_scenario(**sc.to_json()) == sc


def test_replica_takes_an_explicit_target_device() -> None:
    workload = make_workload("tiny")
    replica = workload.make_replica(
        torch.device("cpu"), "sdpa_dense", seed=0, target_device=torch.device("cpu")
    )
    assert isinstance(replica, DFlashReplica)
    assert replica.target_device == torch.device("cpu")
    assert replica.step(0).tokens > 0


def test_frozen_heads_mirror_the_target() -> None:
    cfg = make_workload("tiny").config
    target = shared_target(cfg, torch.device("cpu"), torch.float32)
    heads = FrozenHeads(target, torch.device("cpu"))
    assert torch.equal(heads.lm_head.weight, target.lm_head.weight)
    assert heads.lm_head.weight.data_ptr() != target.lm_head.weight.data_ptr()
    assert not any(p.requires_grad for p in heads.parameters())
