"""The bisection's oracle pieces (racegate.harness.doors.bisection.evidence): a step's decision from
probe verdicts, and the probes read from a real interpreter (the one running these tests)."""

from __future__ import annotations

import pytest
import torch
from packaging.version import Version

from racegate.harness.doors.bisection.evidence import (
    NESTED_FX_PROBES,
    Runner,
    installed,
    probe_decision,
    probe_verdicts,
)
from racegate.harness.judge.gate import Word
from racegate.harness.probes.runner import PROBES
from racegate.harness.run import envs

GATING = ("compiled_call_during_make_fx", "flag_stuck_after_overlap")


def test_a_hazard_in_a_gating_probe_is_unsafe_and_other_probes_do_not_decide() -> None:
    verdicts = {"compiled_call_during_make_fx": "safe", "flag_stuck_after_overlap": "hazard"}
    assert probe_decision(verdicts, GATING).word is Word.UNSAFE
    others = {**dict.fromkeys(GATING, "safe"), "is_compiling_leak": "hazard"}
    assert probe_decision(others, GATING).word is Word.SAFE


def test_a_gating_probe_that_hung_failed_or_is_missing_is_never_safe() -> None:
    for bad in ("hang", "error"):
        verdicts = {GATING[0]: bad, GATING[1]: "safe"}
        assert probe_decision(verdicts, GATING).word is Word.UNDECIDED
    assert probe_decision({GATING[0]: "safe"}, GATING).word is Word.UNDECIDED
    assert probe_decision({}, ()).word is Word.SAFE  # --probe none: the race cases decide


@pytest.mark.process
def test_probes_and_versions_read_from_an_interpreter() -> None:
    here = Runner(envs.current())
    got = installed(here)
    assert got["torch"] == torch.__version__ and got["git_version"] == torch.version.git_version
    verdicts = probe_verdicts(here)
    assert set(verdicts) == set(PROBES)
    thread_local_flag = Version(torch.__version__).release >= (2, 14)
    want = Word.SAFE if thread_local_flag else Word.UNSAFE
    assert probe_decision(verdicts, NESTED_FX_PROBES).word is want
