"""Workloads for the launcher's isolation tests (racegate.harness.run.launcher): each run of
`taint` fails if it finds what an earlier run left in its process, then leaves it all behind.

What it leaves is the real thing: a module global set, a variable in os.environ, a module planted
in sys.modules, torch's dynamo config changed, a non-daemon thread running and the working folder
moved. A run forked from a clean launcher finds none of them; a run in a process an earlier run
used would find every one.
"""

from __future__ import annotations

import os
import sys
import threading
import time
import types

import torch
import torch._dynamo

from racegate.harness.scenario.workload_api import StepResult
from tests.busy import one_intra_op_thread

_TAINTED = False  # set by a taint run, in its process
_ENV = "LAUNCHER_TEST_TAINT"
_PLANTED = "launcher_test_planted_module"
_CACHE_LIMIT = 977  # torch._dynamo.config.cache_size_limit as a taint run leaves it


def left_behind() -> list[str]:
    """What an earlier run left in this process."""
    found = []
    if _TAINTED:
        found.append("a module global")
    if _ENV in os.environ:
        found.append("an environment variable")
    if _PLANTED in sys.modules:
        found.append("a planted module")
    if torch._dynamo.config.cache_size_limit == _CACHE_LIMIT:
        found.append("dynamo's config")
    leaked = [t.name for t in threading.enumerate() if t.name.startswith("leaked-by-")]
    if leaked:
        found.append(f"threads {leaked}")
    return found


def taint() -> None:
    global _TAINTED
    _TAINTED = True
    os.environ[_ENV] = "1"
    sys.modules[_PLANTED] = types.ModuleType(_PLANTED)
    torch._dynamo.config.cache_size_limit = _CACHE_LIMIT
    threading.Thread(target=time.sleep, args=(3600,), name=f"leaked-by-{os.getpid()}").start()
    os.chdir("/")


class _Replica:
    def __init__(self, device: torch.device, seed: int) -> None:
        torch.manual_seed(seed)
        self.layer = torch.nn.Linear(8, 8).to(device)

    def step(self, shape: int) -> StepResult:
        self.layer(torch.ones(4, 8)).sum().backward()
        return StepResult(tokens=4)

    def eager_fallbacks(self) -> int:
        return 0


class TaintWorkload:
    name = "taint"

    def __init__(self, preset: str = "taint") -> None:
        self.preset = preset

    def strategies(self) -> list[str]:
        return ["eager"]

    def shapes(self) -> list[int]:
        return [0]

    def make_replica(self, device: torch.device, strategy: str, *, seed: int) -> _Replica:
        if self.preset == "abort":
            os.abort()  # a run that crashes: SIGABRT, as a failed assertion in C++ ends one
        if seed == 0:  # once per process: the first replica looks, then leaves its marks
            if found := left_behind():
                raise RuntimeError(f"an earlier run left {', '.join(found)} in this process")
            taint()
        one_intra_op_thread()
        return _Replica(device, seed)

    def flops_per_step(self, shape: int) -> float | None:
        return None


def make_workload(preset: str = "taint") -> TaintWorkload:
    if preset not in ("taint", "abort"):
        raise ValueError(f"unknown preset {preset!r}; choose from: abort, taint")
    return TaintWorkload(preset)
