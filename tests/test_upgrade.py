"""harness.upgrade: bad input is one line and exit 2; a side's decision read from its block."""

from __future__ import annotations

import subprocess
import sys

import pytest

from harness import upgrade
from harness.judge.gate import EXIT_UNDECIDED, EXIT_UNSAFE, Decision, Word


@pytest.mark.process  # the real command line, in a python of its own
@pytest.mark.parametrize(
    "argv",
    [
        ["numpy==2.0.0"],
        ["transformers>=5.8.1"],
        ["transformers==5.8.1", "--ab-runs", "1"],
    ],
)
def test_bad_upgrade_input_is_one_line_exit_2(argv: list[str]) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "harness", "upgrade", *argv], capture_output=True, text=True
    )
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "error" in lines[0]
    assert argv[0] in lines[0] or argv[-1] in lines[0]


def test_the_side_decision_is_its_block_last_line() -> None:
    made = Decision(Word.UNSAFE, "warmup_locked UNSAFE: 1 of 2 runs failed", "do not upgrade")
    lines = ["cases/test_x.py ....", " racegate verdict ".center(78, "="), "a", made.line()]
    got, block = upgrade._decision_from(lines, EXIT_UNSAFE)
    assert got.word is Word.UNSAFE and block[0].strip("= ") == "racegate verdict"


def test_a_side_without_a_decision_is_undecided_naming_its_end() -> None:
    got, _ = upgrade._decision_from(["E   ImportError: no module named x"], 4)
    assert got.word is Word.UNDECIDED and got.exit_code == EXIT_UNDECIDED
    assert "exited 4" in got.reason and "ImportError" in got.reason


def test_a_decision_line_disagreeing_with_the_exit_code_is_not_taken() -> None:
    made = Decision(Word.SAFE, "warmup_locked SAFE: clean", "")
    got, _ = upgrade._decision_from([" racegate verdict ", made.line()], EXIT_UNSAFE)
    assert got.word is Word.UNDECIDED


def test_the_probe_that_shows_the_hazard_is_quoted_from_a_wrapped_block() -> None:
    lines = [
        " racegate verdict ",
        "  warmup_locked MASKED: 1 clean, but per_device never failed here (cold) while probe",
        "    compiled_call_during_make_fx shows the hazard on torch 2.13.0; the race is masked",
    ]
    side = upgrade.SideResult(
        "candidate",
        None,
        None,
        Decision(Word.UNDECIDED, "x", "y"),
        lines,
        1.0,  # type: ignore[arg-type]
    )
    got = upgrade._probe_lines(side)
    assert got == ["probe compiled_call_during_make_fx shows the hazard on torch 2.13.0"]
    assert upgrade._masked(side)


def test_a_wrapped_decision_line_is_read_whole() -> None:
    made = Decision(Word.UNDECIDED, "r", "run warmup_locked again before upgrading: 0 of 3 failed")
    text = made.line()
    cut = text.index("failed")
    lines = [" racegate verdict ", text[:cut], "           " + text[cut:], "=== 11 passed ==="]
    got, _ = upgrade._decision_from(lines, EXIT_UNDECIDED)
    assert got.word is Word.UNDECIDED and got.reason.startswith("run warmup_locked again")
