"""A test tool: a trainer whose steps last a set CPU time, free, locked or serial.

`--workload tests.step_length_workload:make_workload --preset KIND-MSms`, e.g. `free-1ms`:
- `free`: each step works (pure Python, holding the GIL, as short steps of a small model do
  between their ops) until its thread's own CPU time has moved MS ms, then one small torch op:
  two threads interleave under the GIL, taking turns at it every switch interval;
- `locked`: the same step under one process-wide lock around the whole step (threads take turns
  a whole step at a time);
- `serial`: free, but every thread other than the first starts its first step only once the
  first has made SERIAL_AFTER steps (a thread that starts after the other has done its part).
The judge must call `free` concurrent and `locked` and `serial` not (racegate.harness.judge.decide
.interleaving), at 1 ms and 10 ms steps alike.
"""

from __future__ import annotations

import re
import threading
import time

import torch

from racegate.harness.scenario.workload_api import StepResult

KINDS = ("free", "locked", "serial")
PRESET = re.compile(r"^(?P<kind>free|locked|serial)-(?P<ms>\d+(?:\.\d+)?)ms$")
SERIAL_AFTER = 60  # steps of the first thread before the others start (more than the tests' quota)
_STEP_LOCK = threading.Lock()


class _Shared:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.made = 0  # replicas made so far: the first is the one the others wait for
        self.first_steps = 0  # the first replica's steps (its thread's alone: no lock needed)
        self.first_done = threading.Event()  # set once it made SERIAL_AFTER steps


class _Replica:
    def __init__(
        self, device: torch.device, kind: str, seconds: float, order: int, shared: _Shared
    ) -> None:
        self.kind, self.seconds, self.order, self.shared = kind, seconds, order, shared
        self.w = torch.randn(16, 16, device=device)  # on a GPU: a kernel launched each step
        self.steps = 0

    def _work(self) -> None:
        until = time.thread_time() + self.seconds
        x = 0
        while time.thread_time() < until:
            for k in range(200):
                x += k * k
        torch.mm(self.w, self.w)

    def step(self, shape: int) -> StepResult:
        if self.kind == "serial" and self.order > 0 and self.steps == 0:
            self.shared.first_done.wait()  # parked: no wake-up before the first is done
        if self.kind == "locked":
            with _STEP_LOCK:
                self._work()
        else:
            self._work()
        self.steps += 1
        if self.order == 0:
            self.shared.first_steps += 1
            if self.shared.first_steps >= SERIAL_AFTER:
                self.shared.first_done.set()
        return StepResult(tokens=1)

    def eager_fallbacks(self) -> int:
        return 0


class StepLengthWorkload:
    name = "step_length"

    def __init__(self, kind: str, seconds: float) -> None:
        self.kind, self.seconds = kind, seconds
        self.shared = _Shared()

    def strategies(self) -> list[str]:
        return ["eager"]

    def shapes(self) -> list[int]:
        return [0]

    def make_replica(self, device: torch.device, strategy: str, *, seed: int) -> _Replica:
        with self.shared.lock:
            order = self.shared.made
            self.shared.made += 1
        return _Replica(torch.device(device), self.kind, self.seconds, order, self.shared)

    def flops_per_step(self, shape: int) -> float | None:
        return None


def make_workload(preset: str = "free-1ms") -> StepLengthWorkload:
    m = PRESET.match(preset)
    if m is None:
        raise ValueError(
            f"unknown preset {preset!r}; choose KIND-MSms with KIND one of {', '.join(KINDS)} "
            "(e.g. free-1ms)"
        )
    return StepLengthWorkload(m["kind"], float(m["ms"]) / 1000)
