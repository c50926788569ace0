"""racegate: gates a torch or transformers upgrade on a multi-threaded torch.compile training
step.

What a workload author imports (docs/workload.md, docs/your-trainer.md):
`from racegate import Workload, Replica, StepResult, WorkloadRoles, StrategySpec`. Each name is
resolved on first use (PEP 562 `__getattr__`): `import racegate` itself, which every pytest
session of a project where racegate is installed does through its plugin, imports nothing more
(and never torch). tests/test_public_names.py holds the docs and examples to these names.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

# Public name → the module that defines it (the only place it is defined).
PUBLIC = {
    "Workload": "racegate.harness.scenario.workload_api",
    "Replica": "racegate.harness.scenario.workload_api",
    "StepResult": "racegate.harness.scenario.workload_api",
    "WorkloadRoles": "racegate.harness.scenario.workload_api",
    "WorkloadError": "racegate.harness.scenario.workload_api",
    "StrategySpec": "racegate.harness.scenario.vocab",
    "Strategy": "racegate.harness.scenario.vocab",
}
__all__ = [  # PUBLIC's names (tests/test_public_names.py), written out for type checkers
    "Replica",
    "StepResult",
    "Strategy",
    "StrategySpec",
    "Workload",
    "WorkloadError",
    "WorkloadRoles",
]

if TYPE_CHECKING:
    from racegate.harness.scenario.vocab import Strategy, StrategySpec
    from racegate.harness.scenario.workload_api import (
        Replica,
        StepResult,
        Workload,
        WorkloadError,
        WorkloadRoles,
    )


def __getattr__(name: str) -> Any:
    if name not in PUBLIC:
        raise AttributeError(f"module 'racegate' has no attribute {name!r}")
    value = getattr(importlib.import_module(PUBLIC[name]), name)
    globals()[name] = value  # once
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *PUBLIC})
