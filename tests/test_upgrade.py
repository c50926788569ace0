"""racegate.harness.doors.upgrade: bad input is one line and exit 2; a side's decision read from the
file its pytest wrote (racegate.harness.judge.decision_file), UNDECIDED where that file is missing
or disagrees."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from racegate.harness.doors import upgrade
from racegate.harness.judge import decision_file
from racegate.harness.judge.gate import EXIT_SAFE, EXIT_UNDECIDED, EXIT_UNSAFE, Decision, Word
from racegate.harness.run import envs

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
        [sys.executable, "-m", "racegate", "upgrade", *argv], capture_output=True, text=True
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
    args = ["--racegate-devices", "cpu", "--racegate-records-from", str(evidence), "test_stub.py"]
    side = upgrade.run_side("current", here, pytester.path, args, "nothing")
    assert side.decision.word is word, side.decision
    written = side.records.parent / upgrade.DECISION_FILE
    assert json.loads(written.read_text())["word"] == str(word)
    printed = " ".join(" ".join(side.block).split())
    assert " ".join(side.decision.line().split()) in printed, (side.decision, side.block)


def test_each_ended_case_is_progress_whatever_its_word() -> None:
    """The suite's cases are racegate/cases/...: an XFAIL there is progress too (only lines
    starting cases/ or tests/, or saying PASSED/FAILED, were shown before)."""
    ended = "racegate/cases/test_race.py::test_race[per_device-cold-cpux2] XFAIL (row 3) [ 50%]"
    assert upgrade.is_progress(ended)
    assert upgrade.is_progress("test_stub.py::test_case PASSED                 [100%]")
    assert not upgrade.is_progress("platform linux -- Python 3.11.7, pytest-9.2.0")
    assert not upgrade.is_progress("racegate/cases/test_race.py::test_race[per_device-cold-cpux2] ")


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


# A race case of the stub suite: holds its own run slot (racegate.harness.run.slots, the parent's
# pool) a while and logs when, so the test sees which sides' cases overlapped.
_TIMED_CASE = """
import os, time
import pytest
from racegate.cases.race_session import slot_pool

@pytest.mark.race
def test_case(pytestconfig, racegate_config):
    assert racegate_config.overlapping  # the other side's runs overlap its runs: no timings
    pool = slot_pool(pytestconfig)
    assert pool is not None and pool.from_parent and pool.size == int(os.environ["SLOTS_WANTED"])
    own = pool.own()
    start = time.monotonic()
    open(f"{os.environ['TIMES_FILE']}.{os.getpid()}", "w").close()
    if pool.size == 2:  # hold the slot until the other side's case holds one too (≤ 30 s): a
        # loaded box may start the two pytests seconds apart; run one after the other, the
        # other never comes and the spans do not overlap
        folder, name = os.path.split(os.environ["TIMES_FILE"])
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if sum(f.startswith(name + ".") for f in os.listdir(folder)) >= 2:
                break
            time.sleep(0.1)
    time.sleep(0.5)
    with open(os.environ["TIMES_FILE"], "a") as log:
        log.write(f"{start} {time.monotonic()}\\n")
    own[0].release()
"""


@pytest.mark.process  # two real pytest sessions, each in a python of its own
@pytest.mark.parametrize("slots", [2, 1])
def test_both_sides_run_at_once_within_their_shared_slots(
    slots: int, pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """run_sides starts both sides' `pytest -m race` together over one pool: with 2 slots
    their cases overlap in time (one after the other, as before, they could not); with 1
    the second waits for the first's slot, so they never do."""
    from tests.test_plugin import _plugin

    _plugin(pytester, monkeypatch)
    monkeypatch.setenv("PATH", "/nonexistent")  # no nvidia-smi: a CPU-only machine
    times = pytester.path / "times.txt"
    monkeypatch.setenv("TIMES_FILE", str(times))
    monkeypatch.setenv("SLOTS_WANTED", str(slots))
    pytester.makepyfile(test_stub=_TIMED_CASE)
    here = envs.Environment(Path(sys.executable), {"torch": "?", "transformers": "?"}, {}, None)
    args = ["--racegate-devices", "cpu", "test_stub.py"]
    sides = [("current", here), ("candidate", here)]
    current, candidate = upgrade.run_sides(sides, pytester.path, args, slots, "nothing")
    assert (current.name, candidate.name) == ("current", "candidate")
    assert current.records != candidate.records
    spans = sorted(tuple(map(float, line.split())) for line in times.read_text().splitlines())
    assert len(spans) == 2, (current.block, candidate.block)
    (_, first_end), (second_start, _) = spans
    assert (second_start < first_end) is (slots == 2), spans


@pytest.mark.process  # asks the current python whether it has pytest-xdist
@pytest.mark.parametrize(
    ("given", "cores", "each", "slots"),
    [
        (
            [],
            16,
            ["-n", "3", "--racegate-share-gpus"],
            6,
        ),  # one H200, 16 cores: 6 slots, 3 workers a side
        ([], 8, ["-n", "1", "--racegate-share-gpus"], 3),  # never more cases than slots
        ([], 2, [], 0),  # one slot: one side after the other, one case at a time
        (["-n", "3"], 16, [], 0),  # the user's -n: as today
        (
            ["--racegate-case-jobs", "2"],
            16,
            ["-n", "6", "--racegate-share-gpus"],
            0,
        ),  # runs outside the slots
        (["--racegate-case-jobs=auto"], 16, ["-n", "3", "--racegate-share-gpus"], 6),
    ],
    ids=["h200", "odd", "one-slot", "user-n", "case-jobs", "case-jobs-auto"],
)
def test_the_sides_share_the_hosts_slots_unless_the_user_chose(
    given: list[str], cores: int, each: list[str], slots: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    from racegate.harness.doors import sizing

    monkeypatch.setattr(sizing, "gpus_here", lambda: (1, 141 * 2**30))
    monkeypatch.setattr(sizing.os, "sched_getaffinity", lambda _pid: set(range(cores)))
    here = envs.Environment(Path(sys.executable), {"torch": "?", "transformers": "?"}, {}, None)
    assert upgrade._side_by_side(here, given) == (each, slots)


_STOPPED_BY_CTRL_C = """
import os, sys
from pathlib import Path
from racegate.harness.run import envs
from racegate.harness.doors import upgrade
here = envs.Environment(Path(sys.executable), {"torch": "?", "transformers": "?"}, {}, None)
sides = [("current", here), ("candidate", here)]
try:
    args = ["--racegate-devices", "cpu", "test_stub.py"]
    upgrade.run_sides(sides, Path.cwd(), args, 2, "nothing")
except KeyboardInterrupt:
    sys.exit(130)
"""


@pytest.mark.process  # two real pytest sessions under a real parent, interrupted
def test_ctrl_c_stops_both_sides(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """SIGINT to upgrade alone (not its process group): both sides' pytest stop, each in its
    Ctrl-C path, and upgrade ends 130 with their records' folders kept."""
    from tests.test_plugin import _plugin

    _plugin(pytester, monkeypatch)
    monkeypatch.setenv("PATH", "/nonexistent")
    pids = pytester.path / "pids.txt"
    pytester.makepyfile(
        test_stub=f"""
        import os, time
        import pytest

        @pytest.mark.race
        def test_case():
            with open({str(pids)!r}, "a") as out:
                out.write(f"{{os.getpid()}}\\n")
            time.sleep(120)
        """
    )
    parent = subprocess.Popen(
        [sys.executable, "-c", _STOPPED_BY_CTRL_C], cwd=pytester.path, stderr=subprocess.PIPE
    )
    try:
        deadline = time.monotonic() + 60
        while len(pids.read_text().split() if pids.exists() else []) < 2:
            assert time.monotonic() < deadline and parent.poll() is None
            time.sleep(0.2)
        parent.send_signal(signal.SIGINT)
        assert parent.wait(timeout=60) == 130
    finally:
        if parent.poll() is None:
            parent.kill()
    for pid in map(int, pids.read_text().split()):
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)
    assert parent.stderr is not None
    said = parent.stderr.read().decode()
    assert said.count("at the same time; left: nothing") == 2, said
    runs = list((pytester.path / ".racegate" / "runs").iterdir())
    assert len(runs) == 2 and all((run / "pytest.txt").is_file() for run in runs)


@pytest.mark.parametrize(
    ("key", "devices"), [("cpu", []), ("h100-80gb-hbm3x1", ["--devices", "0"])]
)
def test_each_ab_run_is_one_thread_of_the_production_strategy(key: str, devices: list) -> None:
    # Without a thread count `harness run` on a GPU makes a run at 1 and one at 2 threads, and
    # the A/B refuses a process with two records: on one H100 the upgrade's A/B stopped so.
    args = upgrade.ab_run_args(key, "warmup_locked")
    assert args[: len(devices)] == devices
    assert args[args.index("--threads-per-device") + 1] == "1"
    assert args[args.index("--strategy") + 1] == "warmup_locked"
    assert "--strategy" not in upgrade.ab_run_args(key, None)  # harness run's own default


@pytest.mark.process  # a real timed `harness run` (about 30 s on the 2-core box)
def test_an_ab_run_with_the_upgrades_options_makes_one_timed_record(tmp_path: Path) -> None:
    from racegate.harness.ab.run import Side, check_run_args, run_once

    args = check_run_args(upgrade.ab_run_args("cpu", "warmup_locked"))
    record = run_once(Side("reference", sys.executable), args, tmp_path / "run.jsonl", 600)
    assert record.outcome == "ok" and record.tokens_per_s and record.tokens_per_s > 0
    assert (record.scenario.strategy, record.scenario.threads_per_device) == ("warmup_locked", 1)


@pytest.mark.process  # a real pytest session that cannot collect
def test_a_side_whose_pytest_cannot_collect_is_undecided_naming_its_exit(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """pytest exits 2 on a collection error, as on a Ctrl-C: upgrade once took that exit for
    the user's Ctrl-C and ended 130 with no decision; it is the side's UNDECIDED now."""
    from tests.test_plugin import _plugin

    _plugin(pytester, monkeypatch)
    monkeypatch.setenv("PATH", "/nonexistent")
    pytester.makepyfile(test_stub="import no_such_module_here\n")
    here = envs.Environment(Path(sys.executable), {"torch": "?", "transformers": "?"}, {}, None)
    # Returned, not raised as a KeyboardInterrupt (the Ctrl-C path, exit 130):
    side = upgrade.run_side("candidate", here, pytester.path, ["test_stub.py"], "nothing")
    assert side.decision.word is Word.UNDECIDED
    assert "exited 2" in side.decision.reason, side.decision
