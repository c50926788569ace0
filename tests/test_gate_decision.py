"""One decision at every exit: the same records give the same word and exit code in pytest's
verdict block and exit status, `harness run`'s verdict and exit, and `report`'s gate.json,
Markdown and HTML headlines (racegate/harness/judge/gate.py)."""

from __future__ import annotations

import io
import json
import sys
from pathlib import Path

import pytest

from racegate.harness.doors import cli, options
from racegate.harness.judge.gate import EXIT_CODES, WORDS_DOC, Word, decide_gate
from racegate.harness.judge.verdict import decide
from racegate.harness.run.record import RunRecord
from tests.test_baselines import make_record, write
from tests.test_plugin import _plugin

pytest_plugins = ["pytester"]
ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # bootstrap.py, the entry point, is no package
import bootstrap  # noqa: E402

PROD = "warmup_locked"  # the default production strategy (race.toml fails warmup on some torch)


def _clean(strategy: str = PROD, n: int = 5, **kw: object) -> list[RunRecord]:
    return [make_record(strategy=strategy, tpd=2, **kw) for _ in range(n)]


def _control() -> list[RunRecord]:
    """per_device racing 8 of 8 runs in the production strategy's cell: 5 clean runs of it
    are then enough for SAFE (99% power)."""
    return [make_record(strategy="per_device", tpd=2, nested=1, tps=None) for _ in range(8)]


# The same record sets for every exit: (expected word, records).
CASES = {
    "SAFE": (Word.SAFE, [*_clean(), *_control()]),
    "UNSAFE": (
        Word.UNSAFE,
        [*_clean(n=4), make_record(strategy=PROD, tpd=2, nested=1), *_control()],
    ),
    # Clean, but the positive control never ran here: nothing shows a race would be seen.
    "UNDECIDED": (Word.UNDECIDED, _clean()),
}


def test_the_exit_codes_are_defined_once_and_apart_from_pytests() -> None:
    assert EXIT_CODES == {"SAFE": 0, "UNSAFE": 1, "usage": 2, "UNDECIDED": 7}
    assert EXIT_CODES[Word.UNDECIDED] not in {int(c) for c in pytest.ExitCode}
    assert EXIT_CODES["usage"] == cli.EXIT_USAGE


@pytest.mark.parametrize("name", CASES)
def test_harness_run_and_report_give_one_word_and_exit(
    name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    word, records = CASES[name]
    code = EXIT_CODES[word]
    monkeypatch.setenv("RACEGATE_PRODUCTION_STRATEGY", PROD)
    # `harness run`: its verdict block ends with the word, and cmd_run returns its code.
    opts = options.resolve({"devices": "cpu"}, gpus=0, for_cli=True)
    out = io.StringIO()
    decision = cli.print_verdict(records, opts, out)
    block = out.getvalue().splitlines()
    assert (decision.word, decision.exit_code) == (word, code)
    last = max(i for i, line in enumerate(block) if not line.startswith(" "))  # wrapped on
    tail = " ".join(" ".join(block[last:]).split())
    assert tail.startswith(f"{word}: ") and tail.endswith(f"(exit {code}; racegate explain {word})")
    # `report` of the same records: its exit, gate.json and both headlines.
    (tmp_path / "no-floors").mkdir()  # an empty floors folder: no floor judges these runs
    path = write(tmp_path / "records.jsonl", records)
    report = tmp_path / "report"
    rc = cli.main(["report", str(path), "--out-dir", str(report),
                   "--baselines", str(tmp_path / "no-floors")])  # fmt: skip
    gate = json.loads((report / "gate.json").read_text())
    assert rc == code == gate["exit_code"]
    assert gate["decision"] == word and gate["passed"] is (word is Word.SAFE)
    assert gate["reason"] and [r["decision"] for r in gate["rows"]] == [word]
    assert f"**{word}: " in (report / "matrix.md").read_text()
    html = (report / "matrix.html").read_text()
    assert f'<p class="headline {word.lower()}">{word}: ' in html and WORDS_DOC in html


def _pytest_session(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, records: list[RunRecord],
    *flags: str,
) -> pytest.RunResult:  # fmt: skip
    """A real pytest session with racegate's plugin: one race case that passes and writes no
    record, judging `records` merged with --records-from (printed)."""
    _plugin(pytester, monkeypatch)
    monkeypatch.setenv("RACEGATE_PRODUCTION_STRATEGY", PROD)
    pytester.makepyfile(
        test_stub="import pytest\n\n@pytest.mark.race\ndef test_case():\n    pass\n"
    )
    evidence = write(pytester.path / "evidence.jsonl", records)
    return pytester.runpytest_subprocess(
        "-p", "no:cacheprovider", "--racegate-devices", "cpu",
        "--racegate-records-from", str(evidence),
        "--racegate-results", str(pytester.path / "own.jsonl"), *flags,
    )  # fmt: skip


@pytest.mark.parametrize("name", CASES)
@pytest.mark.process
def test_pytest_exit_status_is_the_verdict_blocks_word(
    name: str, pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    word, records = CASES[name]
    result = _pytest_session(pytester, monkeypatch, records)
    out = result.stdout.str()
    assert f"merged {len(records)} records from" in out, out
    block = " ".join(out[out.index(" racegate verdict ") :].split())
    assert f" {word}: " in block and f"(exit {EXIT_CODES[word]}; racegate explain {word})" in block
    assert result.ret == EXIT_CODES[word], out  # the case itself passed
    # pytest's own last line says it too (issue 55: "behind a pytest line that reads all green")
    last = result.outlines[-1]
    assert "1 passed" in last, last
    assert (f"{word} verdict (" in last) is (word is not Word.SAFE), last


_OTHER_STRATEGY_FAILS = """
import pytest
from racegate.harness.judge.suite import OUTCOME_ERRORS
from racegate.harness.scenario.vocab import Outcome

@pytest.mark.race
@pytest.mark.parametrize(
    "race_case", [("nested_fx_off", "warm", ("cpu",), 2), ("warmup_locked", "warm", ("cpu",), 2)]
)
def test_race(race_case):
    if race_case[0] == "nested_fx_off":
        raise OUTCOME_ERRORS[Outcome.OTHER_ERROR](
            "other_error in 1 run(s): AssertionError: CURRENT_PATCHER is None in finally block"
        )
"""


@pytest.mark.parametrize("workers", [[], ["-n", "2"]], ids=["one-process", "xdist"])
@pytest.mark.process
def test_a_strategy_other_than_production_failing_is_unsafe_not_failed_in_pytests_counts(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, workers: list[str]
) -> None:
    """One answer: a SAFE session in which another strategy's case failed by a run outcome
    (one H100, the main command at 74dcc4e: `nested_fx_off` warm, an outcome its row did not
    name) ends in a line that says "1 unsafe", not "1 failed" above a SAFE that exits 0; the
    case is listed with its failure's first line, before the verdict."""
    _plugin(pytester, monkeypatch)
    monkeypatch.setenv("RACEGATE_PRODUCTION_STRATEGY", PROD)
    pytester.makepyfile(test_stub=_OTHER_STRATEGY_FAILS)
    evidence = write(pytester.path / "evidence.jsonl", CASES["SAFE"][1])
    result = pytester.runpytest_subprocess(
        "-p", "no:cacheprovider", "--racegate-devices", "cpu",
        "--racegate-records-from", str(evidence),
        "--racegate-results", str(pytester.path / "own.jsonl"), *workers,
    )  # fmt: skip
    out = result.stdout.str()
    assert result.ret == EXIT_CODES[Word.SAFE], out
    assert result.parseoutcomes() == {"unsafe": 1, "passed": 1}, out
    assert "failed" not in out.splitlines()[-1], out
    assert (
        "UNSAFE test_stub.py::test_race[race_case0]: "
        "racegate.harness.judge.suite.OtherErrorSeen: other_error in 1 run(s)"
    ) in " ".join(out.split()), out
    assert out.index("UNSAFE test_stub.py") < out.index(" racegate verdict "), out


@pytest.mark.process
def test_under_xdist_the_controller_exits_with_the_decision(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    result = _pytest_session(pytester, monkeypatch, CASES["UNDECIDED"][1], "-n", "2")
    assert result.ret == EXIT_CODES[Word.UNDECIDED], result.stdout.str()
    assert result.stdout.str().count(" racegate verdict ") == 1  # the controller's block only


@pytest.mark.process
def test_no_gate_keeps_pytests_own_status(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`bootstrap.py test` tests racegate: its pytest passes --no-racegate-gate, so an
    UNDECIDED verdict (a CPU torch that masks the race) leaves a green run green."""
    assert "--no-racegate-gate" in bootstrap.COMMANDS["test"][-1]
    assert "--no-racegate-gate" not in bootstrap.COMMANDS["race"][-1]
    result = _pytest_session(pytester, monkeypatch, CASES["UNDECIDED"][1], "--no-racegate-gate")
    assert result.ret == 0, result.stdout.str()
    assert "--no-racegate-gate: pytest's exit status is its own, not UNDECIDED's" in (
        result.stdout.str()
    )


def test_a_broken_case_is_never_safe() -> None:
    """A test that failed other than by a run outcome leaves nothing decided, even beside a
    SAFE verdict; an UNSAFE verdict stays UNSAFE."""
    safe = decide(CASES["SAFE"][1], production=PROD)
    assert decide_gate(safe).word is Word.SAFE
    assert decide_gate(safe, failed_cases=1).word is Word.UNDECIDED
    assert decide_gate(safe, throughput=False, bar="tokens/s below floor").word is Word.UNSAFE
    unsafe = decide(CASES["UNSAFE"][1], production=PROD)
    assert decide_gate(unsafe, failed_cases=2).word is Word.UNSAFE
    assert decide_gate(None).word is Word.UNDECIDED


def test_the_verdict_lists_each_failed_run_and_why() -> None:
    """Two invocations that differ say which runs differ: every failed run, by cell, repeat
    and start, with its outcome and reason."""
    records = CASES["UNSAFE"][1]
    v = decide(records, production=PROD)
    prod = v.production_verdict
    assert len(prod.failed_runs) == 1
    (run,) = prod.failed_runs
    assert run.startswith("cold 2×2 run 1") and ": nested_fx_error: " in run, run


@pytest.mark.parametrize(("code", "sample"), [(0, True), (7, True), (1, False)])
@pytest.mark.process
def test_an_ab_child_undecided_is_a_timing_sample(tmp_path: Path, code: int, sample: bool) -> None:
    """racegate.harness.ab's children are one-thread `harness run`s: nothing can race, so a clean
    one exits UNDECIDED (7), and its record is a sample all the same; UNSAFE (1) is none."""
    from racegate.harness.ab.run import Side, run_once

    record = write(tmp_path / "one.jsonl", [make_record(tpd=1)]).read_text()
    fake = tmp_path / "python"
    fake.write_text(
        '#!/bin/sh\nwhile [ $# -gt 0 ]; do [ "$1" = --out ] && out=$2; shift; done\n'
        f"cat > \"$out\" <<'JSONL'\n{record}JSONL\nexit {code}\n"
    )
    fake.chmod(0o700)
    side, out = Side("candidate", str(fake)), tmp_path / "r.jsonl"
    if sample:
        assert run_once(side, [], out, 30).tokens_per_s == 40_000.0
    else:
        with pytest.raises(ValueError, match=f"exited {code} with 1 record"):
            run_once(side, [], out, 30)


def test_a_front_door_that_decided_nothing_exits_undecided(tmp_path: Path) -> None:
    from racegate.harness.doors import race_exit

    assert EXIT_CODES[Word.UNDECIDED] == race_exit.EXIT_UNDECIDED
    decided = tmp_path / "decision.json"
    assert race_exit.gated(0, decided) == (  # no decision written
        race_exit.EXIT_UNDECIDED,
        f"UNDECIDED: no race case ran, so nothing is decided (exit {race_exit.EXIT_UNDECIDED})",
    )
    decided.write_text(json.dumps({"exit_code": 7}))
    assert race_exit.gated(0, decided)[0] == race_exit.EXIT_UNDECIDED  # the gate was off
    decided.write_text(json.dumps({"exit_code": 1}))  # UNSAFE, pytest's exit its own: 1
    assert race_exit.gated(0, decided)[0] == 1
    decided.write_text('{"exit_co')  # cut short: odd evidence, said as such
    code, why = race_exit.gated(0, decided)
    assert code == race_exit.EXIT_UNDECIDED and why is not None, why
    assert "is unreadable" in why and "no race case ran" not in why, why
    decided.write_text(json.dumps({"exit_code": 3}))  # no decision's exit
    code, why = race_exit.gated(0, decided)
    assert code == race_exit.EXIT_UNDECIDED and why is not None and "says exit 3" in why, why
    decided.write_text(json.dumps({"exit_code": 0}))
    assert race_exit.gated(0, decided) == (0, None)
    assert race_exit.gated(1, tmp_path / "none.json") == (1, None)  # pytest's own word stands
    assert race_exit.gated(0, tmp_path / "none.json", ["--version"]) == (0, None)  # prints only
    # The front doors hand pytest its own spelling (options.to_pytest), and read that.
    flag = race_exit.FLAG
    assert flag == options.PYTEST_FLAGS["--decision-file"]
    assert race_exit.given_path(["-x", f"{flag}=d.json"]) == Path("d.json")
    assert race_exit.given_path([flag, "e.json"]) == Path("e.json")
    assert race_exit.given_path([f"{flag}=d.json", flag, "e.json"]) == Path(
        "e.json"
    )  # the last, as pytest takes it
    assert race_exit.given_path(options.to_pytest(["--decision-file", "f.json"])) == Path("f.json")


@pytest.mark.process  # the two front doors, each a real process running a real pytest
@pytest.mark.parametrize(
    "front",
    [["-m", "racegate", "race"], [str(ROOT / "bootstrap.py"), "race"]],
    ids=["module", "script"],  # no "race" in an id (test_plugin)
)
def test_a_gating_command_that_ran_no_case_does_not_exit_0(front: list[str]) -> None:
    """`racegate race --collect-only` (and a selection that leaves no case, or the gate
    turned off) once exited 0 with no decision: pytest's exit passed on."""
    import os
    import subprocess

    env = {k: v for k, v in os.environ.items() if k != "RACEGATE_VENV"}  # the host's torch
    proc = subprocess.run(
        [sys.executable, *front, "--collect-only", "-q", "-p", "no:cacheprovider"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert proc.returncode == EXIT_CODES[Word.UNDECIDED], proc.stdout[-2000:] + proc.stderr
    assert "no race case ran, so nothing is decided" in proc.stderr


@pytest.mark.process  # the two front doors, each a real process running a real pytest
@pytest.mark.parametrize(
    "front",
    [["-m", "racegate", "race"], [str(ROOT / "bootstrap.py"), "race"]],
    ids=["module", "script"],
)
def test_an_older_decision_file_never_answers_for_a_run(front: list[str], tmp_path: Path) -> None:
    """A review found both front doors exiting 0 for `--collect-only` with decision files the
    user named that an earlier run had left saying SAFE: they read the first of two
    --decision-file options (pytest takes the last) and never removed an older file."""
    import os
    import subprocess

    old = [tmp_path / "a.json", tmp_path / "b.json"]
    for path in old:
        path.write_text(json.dumps({"exit_code": 0, "word": "SAFE"}))
    env = {k: v for k, v in os.environ.items() if k != "RACEGATE_VENV"}  # the host's torch
    proc = subprocess.run(
        [sys.executable, *front, "--collect-only", "-q", "-p", "no:cacheprovider",
         *(f"--decision-file={path}" for path in old)],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert proc.returncode == EXIT_CODES[Word.UNDECIDED], proc.stdout[-2000:] + proc.stderr
    assert not old[1].exists()  # the one pytest would write: removed first, as pytest does


@pytest.mark.process
def test_a_module_that_failed_to_collect_keeps_a_session_from_safe(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With --continue-on-collection-errors pytest exits 1 for a broken module, and the gate
    swaps its exit for the decision's: the broken module must count, or that could be SAFE."""
    pytester.makepyfile(test_broken="import no_such_module_here\n")
    result = _pytest_session(
        pytester, monkeypatch, CASES["SAFE"][1], "--continue-on-collection-errors"
    )
    assert result.ret == EXIT_CODES[Word.UNDECIDED], result.stdout.str()[-3000:]
    result.stdout.fnmatch_lines(["*fix the 1 test that failed other than by a run outcome*"])


@pytest.mark.process
def test_runs_under_the_test_slowdown_are_no_safe_anywhere(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The report called records whose production runs ran under the test slowdown (or whose
    memory grew) UNSAFE while pytest's verdict and `harness run` called the same records SAFE:
    one rule now (racegate.harness.judge.baselines.production_bars), the same word from each."""
    import dataclasses

    slowed = [
        dataclasses.replace(r, test_slowdown="2x") if r.scenario.strategy == PROD else r
        for r in CASES["SAFE"][1]
    ]
    result = _pytest_session(pytester, monkeypatch, slowed)
    assert result.ret == EXIT_CODES[Word.UNSAFE], result.stdout.str()[-3000:]
    opts = options.resolve({"devices": "cpu"}, gpus=0, for_cli=True)
    assert cli.print_verdict(slowed, opts, io.StringIO()).word is Word.UNSAFE
