"""A test tool: the built-in DFlash workload with one process-wide lock around every step, so
its threads take turns (a serialised trainer): `--workload tests.serial_workload:make_workload`.

The run must come out `not_concurrent` (racegate.harness.judge.decide.coactive_shares): each
thread's step spans still overlap the others' (a thread waits for the lock inside its step), but
their work never meets. On CPU the fault kit's `serial` shows the same with a toy step; this one
shows it on the real step, on a GPU too.
"""

from __future__ import annotations

import threading
from typing import Any

import torch

from racegate.model.workload import DFlashWorkload
from racegate.model.workload import make_workload as make_builtin

_STEP = threading.Lock()


class _SerialReplica:
    def __init__(self, inner: Any) -> None:
        self.inner = inner

    def step(self, shape: int) -> Any:
        with _STEP:
            return self.inner.step(shape)

    def __getattr__(self, name: str) -> Any:  # eager_fallbacks, counts_fallbacks, … as inner's
        return getattr(self.inner, name)


class SerialWorkload:
    """The built-in workload for `preset`, every replica's step under the one lock."""

    def __init__(self, inner: DFlashWorkload) -> None:
        self.inner = inner
        self.name = f"{inner.name}+serial"

    def make_replica(
        self, device: torch.device, strategy: str, *, seed: int, **kw: Any
    ) -> _SerialReplica:
        return _SerialReplica(self.inner.make_replica(device, strategy, seed=seed, **kw))

    def __getattr__(self, name: str) -> Any:  # strategies, shapes, flops_per_step as inner's
        return getattr(self.inner, name)


def make_workload(preset: str = "tiny") -> SerialWorkload:
    return SerialWorkload(make_builtin(preset))
