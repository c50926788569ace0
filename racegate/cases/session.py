"""The pytest session's resolved racegate settings, and the stash key the plugin keeps them under.

A front-door module: the plugin (racegate/cases/plugin.py) resolves them once from the option
table (racegate/harness/doors/options.py); the cases, their plan and the terminal verdict read them
from the stash. The judge never sees them (it judges records).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest

from racegate.harness.doors.options import RunOptions
from racegate.harness.judge.race_expectations import ExpectedFailure


@dataclass(frozen=True, kw_only=True)
class RacegateConfig(RunOptions):
    """The resolved plugin settings for this session: the run options and what the plugin adds."""

    gpus: int
    expectations: list[
        ExpectedFailure
    ]  # racegate/harness/expectations/race.toml, loaded and checked once
    versions: dict[str, str]
    # other pytest-xdist workers, or another session in a parent's run slots, run cases beside
    # this one's (no timings)
    overlapping: bool = False
    case_jobs: int = 1  # --case-jobs: a case's isolated runs at once (outcomes only); 0: auto
    # The project's throughput floors (racegate.harness.judge.baselines.project_folder; may be
    # absent)
    baselines: Path = Path("baselines")

    def run_timeout_within(self, budget_s: float) -> float:
        """Seconds per isolated run: --run-timeout when given, never more than the case's share
        of its pytest timeout (past that pytest-timeout would end the whole session)."""
        return min(self.run_timeout, budget_s) if self.run_timeout else budget_s


# Where the pytest plugin stashes the resolved settings; cases read them through it.
racegate_key = pytest.StashKey[RacegateConfig]()
