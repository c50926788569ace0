"""How the positive control's runs turn into a number of runs: the calibration's settings.

Standard library only (with the vocabulary): the option table imports it, and bootstrap.py
imports that before any environment exists (tests/test_imports.py).
"""

from __future__ import annotations

from dataclasses import dataclass

from racegate.harness.scenario.vocab import Strategy


@dataclass(frozen=True)
class Calibration:
    """How the positive control turns into a number of runs."""

    control: str = str(Strategy.PER_DEVICE)  # the known-bad strategy: the incident's code
    target: float = 0.99  # catch a strategy as race-prone as the control with this probability
    cap: int = 30  # at most this many production runs per cache state × topology
    # Below this power (where the cap binds) a clean strategy is not called SAFE.
    min_power: float = 0.9
    control_repeat: int = 4  # the control's runs per case, all run (a rate, not a first failure)
    # Where those runs cannot give a SAFE its power in a cell (the control never fired there but
    # did elsewhere, or fired too seldom), the production case adds control runs there, up to
    # this many in all (racegate.cases.plan.control_top_up).
    control_max: int = 12
