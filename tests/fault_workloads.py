"""Workloads that misbehave on purpose (crash, hang, run serially) to test the harness's isolation.

They train a real (tiny) torch module; only the failure is injected.
"""

from __future__ import annotations

import os
import threading
import time

import torch

from harness.workload_api import StepResult

_serial_lock = threading.Lock()


class _Replica:
    def __init__(self, device: torch.device, behaviour: str, seed: int) -> None:
        torch.manual_seed(seed)
        self.layer = torch.nn.Linear(8, 8).to(device)
        self.opt = torch.optim.SGD(self.layer.parameters(), lr=0.1)
        self.behaviour, self.seed, self.device = behaviour, seed, device
        self.calls = 0
        if behaviour == "late_start" and seed == 1:
            time.sleep(3.0)  # one process is ready long after the other (a loaded host)

    def step(self, shape: int) -> StepResult:
        self.calls += 1
        if self.behaviour == "crash" and self.calls == 2:
            os.abort()  # SIGABRT: a native crash mid-run
        if self.behaviour == "hang" and self.seed == 1 and self.calls == 2:
            threading.Event().wait()  # one thread never returns
        if self.behaviour == "serial":
            # Holding a lock across the whole step and sleeping makes the run effectively serial.
            with _serial_lock:
                time.sleep(0.05)
                return self._train(shape)
        if self.behaviour == "error" and self.seed == 0:
            raise RuntimeError("injected failure: not a race")
        return self._train(shape)

    def _train(self, shape: int) -> StepResult:
        # A real step lasts long enough for the other threads' steps to overlap it; a 1 ms step
        # can finish before the next thread is scheduled, which the runner rightly calls serial.
        time.sleep(0.1)
        x = torch.randn(4 + shape, 8, device=self.device)
        loss = self.layer(x).square().mean()
        loss.backward()
        self.opt.step()
        self.opt.zero_grad()
        return StepResult(tokens=x.shape[0], loss=float(loss))

    def eager_fallbacks(self) -> int:
        return 0


class FaultWorkload:
    name = "fault"

    def __init__(self, preset: str = "ok") -> None:
        self.behaviour = preset

    def strategies(self) -> list[str]:
        return ["eager"]

    def shapes(self) -> list[int]:
        return [0, 1]

    def make_replica(self, device: torch.device, strategy: str, *, seed: int) -> _Replica:
        return _Replica(device, self.behaviour, seed)

    def flops_per_step(self, shape: int) -> float | None:
        return None


def make_workload(preset: str = "ok") -> FaultWorkload:
    return FaultWorkload(preset)


class MissingMethods:
    name = "incomplete"

    def shapes(self) -> list[int]:
        return [0]


def make_incomplete(preset: str = "") -> MissingMethods:
    return MissingMethods()
