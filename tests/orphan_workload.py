"""A test tool: a tiny real trainer whose thread 0 starts a process that would outlive the run
(tests/test_orphans.py SIGKILLs the runner meanwhile): `--workload
tests.orphan_workload:make_workload`, preset `fork`, `setsid` or `daemon`.

The process is `sleep 300` with argv[0] set to $RACEGATE_TEST_ORPHAN_MARKER, so a test finds
it in /proc/*/cmdline whatever its parent or session became.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time

import torch

from racegate.harness.scenario.workload_api import StepResult

MARKER = "RACEGATE_TEST_ORPHAN_MARKER"
HOW = ("fork", "setsid", "daemon")


def _sleeper() -> list[str]:
    return [os.environ.get(MARKER, "racegate-orphan"), "300"]


def start_sleeper(how: str) -> None:
    """`fork`: a forked child execs sleep (the run's session); `setsid`: sleep in a new
    session; `daemon`: fork, setsid, fork again, the middle one exits (its parent is gone)."""
    sleep = shutil.which("sleep") or "/bin/sleep"
    if how == "setsid":
        subprocess.Popen(_sleeper(), executable=sleep, start_new_session=True)
        return
    pid = os.fork()
    if pid == 0:
        try:
            if how == "daemon":
                os.setsid()
                if os.fork():
                    os._exit(0)
            os.execv(sleep, _sleeper())
        finally:
            os._exit(127)
    if how == "daemon":
        os.waitpid(pid, 0)


class _Replica:
    def __init__(self, device: torch.device, how: str, seed: int) -> None:
        torch.manual_seed(seed)
        self.layer = torch.nn.Linear(8, 8).to(device)
        self.how, self.seed, self.device, self.calls = how, seed, device, 0

    def step(self, shape: int) -> StepResult:
        self.calls += 1
        if self.calls == 1 and self.seed == 0:
            start_sleeper(self.how)
        time.sleep(0.05)
        x = torch.randn(4 + shape, 8, device=self.device)
        loss = self.layer(x).square().mean()
        loss.backward()
        return StepResult(tokens=x.shape[0], loss=float(loss))

    def eager_fallbacks(self) -> int:
        return 0


class OrphanWorkload:
    name = "orphan"

    def __init__(self, how: str) -> None:
        self.how = how

    def strategies(self) -> list[str]:
        return ["eager"]

    def shapes(self) -> list[int]:
        return [0]

    def make_replica(self, device: torch.device, strategy: str, *, seed: int) -> _Replica:
        return _Replica(device, self.how, seed)

    def flops_per_step(self, shape: int) -> float | None:
        return None


def make_workload(preset: str = "fork") -> OrphanWorkload:
    if preset not in HOW:
        raise ValueError(f"unknown preset {preset!r}; choose from: {', '.join(HOW)}")
    return OrphanWorkload(preset)
