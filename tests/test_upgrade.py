"""harness.upgrade: bad input is one line and exit 2; a side's decision read from the file its
pytest wrote (harness.judge.decision_file), UNDECIDED where that file is missing or disagrees."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from harness import envs, upgrade
from harness.judge import decision_file
from harness.judge.gate import EXIT_SAFE, EXIT_UNDECIDED, EXIT_UNSAFE, Decision, Word

pytest_plugins = ["pytester"]


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


def _decided(tmp_path: Path, decision: Decision, records: Path) -> Path:
    path = tmp_path / "decision.json"
    decision_file.write(path, decision_file.SessionDecision(decision, str(records)))
    return path


def test_the_side_decision_is_the_one_its_pytest_wrote(tmp_path: Path) -> None:
    made = Decision(Word.UNSAFE, "warmup_locked UNSAFE: 1 of 2 runs failed", "do not upgrade")
    records = tmp_path / "records.jsonl"
    got = upgrade.side_decision(_decided(tmp_path, made, records), records, EXIT_UNSAFE, [])
    assert got == made


def test_a_side_without_a_decision_file_is_undecided_naming_its_end(tmp_path: Path) -> None:
    lines = ["E   ImportError: no module named x"]
    got = upgrade.side_decision(tmp_path / "decision.json", tmp_path / "r.jsonl", 4, lines)
    assert got.word is Word.UNDECIDED and got.exit_code == EXIT_UNDECIDED
    assert "exited 4" in got.reason and "no decision file" in got.reason
    assert "ImportError" in got.reason


@pytest.mark.parametrize(
    ("exit_code", "other_records", "edit", "said"),
    [
        (EXIT_UNSAFE, False, None, "says SAFE (exit 0), but pytest exited 1"),
        (EXIT_SAFE, True, None, "not this session's records"),
        (EXIT_SAFE, False, ("schema", 2), "schema 2"),
        (EXIT_SAFE, False, ("exit_code", 7), "exit_code 7 is not SAFE's (0)"),
        (EXIT_SAFE, False, ("word", "MASKED"), "word 'MASKED' is not one of"),
    ],
    ids=["exit-mismatch", "other-records", "other-schema", "bad-exit-code", "bad-word"],
)
def test_a_decision_file_that_disagrees_is_not_taken(
    tmp_path: Path,
    exit_code: int,
    other_records: bool,
    edit: tuple[str, object] | None,
    said: str,
) -> None:
    records = tmp_path / "records.jsonl"
    path = _decided(tmp_path, Decision(Word.SAFE, "warmup_locked SAFE: clean", ""), records)
    if edit is not None:
        data = json.loads(path.read_text())
        path.write_text(json.dumps({**data, edit[0]: edit[1]}))
    asked = tmp_path / "other.jsonl" if other_records else records
    got = upgrade.side_decision(path, asked, exit_code, [])
    assert got.word is Word.UNDECIDED and said in got.reason, got.reason


@pytest.mark.process  # a real pytest session in a python of its own
@pytest.mark.parametrize(("cell", "word"), [("safe", Word.SAFE), ("hangs", Word.UNSAFE)])
def test_a_real_session_writes_the_decision_its_block_prints(
    cell: str, word: Word, pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`pytest -m race` judging a real cell's records (tests/test_exit_table's): the decision
    upgrade reads from the file is the one the verdict block's last line prints, and pytest
    exited with its code."""
    from tests import test_exit_table as cells

    records = cells.cell_runs(cell, None)
    cells._plugin(pytester, monkeypatch)
    cells._workload(pytester, None)
    monkeypatch.setenv("RACEGATE_WORKLOAD", "cell_workload:make_workload")
    for name in ("RACEGATE_PRODUCTION_STRATEGY", "RACEGATE_CONTROL_STRATEGY"):
        monkeypatch.delenv(name, raising=False)
    pytester.makepyfile(
        test_stub="import pytest\n\n@pytest.mark.race\ndef test_case():\n    pass\n"
    )
    evidence = cells.write(pytester.path / "evidence.jsonl", records)
    here = envs.Environment(Path(sys.executable), {"torch": "?", "transformers": "?"}, {}, None)
    args = ["--devices", "cpu", "--records-from", str(evidence), "test_stub.py"]
    side = upgrade.run_side("current", here, pytester.path, args, "nothing")
    assert side.decision.word is word, side.decision
    written = side.records.parent / upgrade.DECISION_FILE
    assert json.loads(written.read_text())["word"] == str(word)
    printed = " ".join(" ".join(side.block).split())
    assert " ".join(side.decision.line().split()) in printed, (side.decision, side.block)


def test_each_ended_case_is_progress_whatever_its_word() -> None:
    """The suite's cases are harness/cases/...: an XFAIL there is progress too (only lines
    starting cases/ or tests/, or saying PASSED/FAILED, were shown before)."""
    ended = "harness/cases/test_race.py::test_race[per_device-cold-cpux2] XFAIL (row 3) [ 50%]"
    assert upgrade.is_progress(ended)
    assert upgrade.is_progress("test_stub.py::test_case PASSED                 [100%]")
    assert not upgrade.is_progress("platform linux -- Python 3.11.7, pytest-9.2.0")
    assert not upgrade.is_progress("harness/cases/test_race.py::test_race[per_device-cold-cpux2] ")


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
