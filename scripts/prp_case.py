"""The known-bad case as a user would write it for pytest-run-parallel.

One test; pytest-run-parallel runs its body in N threads released together (its own barrier),
each thread `--iterations` times. Thread i builds its own replica of a DFlash workload on
device i mod len(devices), with the incident's `per_device` strategy (one compiled kernel per
device, shared by that device's threads), and steps it like the harness (1 warm-up + 6 steps).
Run each invocation in a fresh process with a fresh inductor cache:

    RACEGATE_PRP_DEVICES=cuda:0,cuda:1 RACEGATE_PRP_PRESET=small \\
    TORCHINDUCTOR_CACHE_DIR=$(mktemp -d) python -m pytest -p no:cacheprovider -q \\
        scripts/prp_case.py --parallel-threads=4 --iterations=2

Defaults: devices `cpu`, preset `tiny`. A nested-FX error fails the test with `RuntimeError:
Detected that you are using FX to symbolically trace a dynamo-optimized function`; a compiled
call that ran uncompiled fails the eager-fallback assertion instead.
"""

from __future__ import annotations

import os

import torch

from racegate.model.workload import make_workload

STEPS = 7  # the harness's --warmup-steps 1 + --steps 6
DEVICES = [torch.device(d) for d in os.environ.get("RACEGATE_PRP_DEVICES", "cpu").split(",")]
WORKLOAD = make_workload(os.environ.get("RACEGATE_PRP_PRESET", "tiny"))


def test_per_device_replica_steps(thread_index: int) -> None:
    device = DEVICES[thread_index % len(DEVICES)]
    replica = WORKLOAD.make_replica(device, "per_device", seed=thread_index)
    shape = WORKLOAD.shapes()[0]
    for _ in range(STEPS):
        replica.step(shape)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    assert replica.eager_fallbacks() == 0, "compiled attention ran uncompiled (silent fallback)"
