"""The known-bad case as a user would write it for pytest-run-parallel (issue 11 item 3).

One test; pytest-run-parallel runs its body in N threads released together (a barrier), each
thread `--iterations` times. Each thread builds its own replica of the tiny DFlash workload on
CPU with the incident's `per_device` strategy (one compiled kernel per device, created under a
lock and shared by the threads) and steps it like the harness does (1 warm-up + 6 steps on the
steady-state bucket). Run it in a fresh process with a fresh inductor cache per invocation:

    TORCHINDUCTOR_CACHE_DIR=$(mktemp -d) python -m pytest -p no:cacheprovider -q \
        results/2026-11-30-cpu-stress/prp_case.py --parallel-threads=4 --iterations=2

A nested-FX error shows as `RuntimeError: Detected that you are using FX to symbolically
trace a dynamo-optimized function`; a compiled call that ran uncompiled fails the
eager-fallback assertion instead.
"""

from __future__ import annotations

import torch

from model.workload import make_workload

STEPS = 7  # the harness's --warmup-steps 1 + --steps 6
WORKLOAD = make_workload("tiny")


def test_per_device_replica_steps() -> None:
    replica = WORKLOAD.make_replica(torch.device("cpu"), "per_device", seed=0)
    shape = WORKLOAD.shapes()[0]
    for _ in range(STEPS):
        replica.step(shape)
    assert replica.eager_fallbacks() == 0, "compiled attention ran uncompiled (silent fallback)"
