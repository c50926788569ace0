"""A trainer with its own bug, outside torch: its make_replica or its step raises ValueError.

Presets: `replica_raise` (make_replica raises), `step_raise` (each replica's 2nd step raises),
`ok` (a tiny linear model that trains). The verdict must name the bug as the trainer's, not
read it like a race regression (issue 54)."""

from __future__ import annotations

import torch

from racegate.harness.scenario.workload_api import StepResult


def check_size(size: int) -> int:
    if size > 8:
        raise ValueError(f"bucket size {size} is larger than the model's 8")
    return size


class _Replica:
    def __init__(self, device: torch.device, preset: str, seed: int) -> None:
        torch.manual_seed(seed)
        self.preset = preset
        self.model = torch.nn.Linear(8, 8).to(device)
        self.opt = torch.optim.SGD(self.model.parameters(), lr=0.01)
        self.device = device
        self.steps = 0

    def step(self, shape: int) -> StepResult:
        self.steps += 1
        if self.preset == "step_raise" and self.steps == 2:
            check_size(64)
        x = torch.randn(16, 8, device=self.device)
        loss = self.model(x).pow(2).mean()
        loss.backward()
        self.opt.step()
        self.opt.zero_grad()
        return StepResult(tokens=16, loss=float(loss.detach()))

    def eager_fallbacks(self) -> int:
        return 0


class OwnBugWorkload:
    name = "own_bug"

    def __init__(self, preset: str) -> None:
        self.preset = preset

    def strategies(self) -> list[str]:
        return ["eager"]

    def shapes(self) -> list[int]:
        return [0]

    def make_replica(self, device: torch.device, strategy: str, *, seed: int) -> _Replica:
        if self.preset == "replica_raise":
            check_size(32)
        return _Replica(device, self.preset, seed)

    def flops_per_step(self, shape: int) -> float | None:
        return None


def make_workload(preset: str = "ok") -> OwnBugWorkload:
    if preset not in ("ok", "replica_raise", "step_raise"):
        raise ValueError(f"unknown preset {preset!r}; choose from: ok, replica_raise, step_raise")
    return OwnBugWorkload(preset)
