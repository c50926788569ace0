"""Each gating command's exit code for SAFE, UNSAFE and UNDECIDED, made from real records and
checked against the table docs/vocabulary.md prints; the same records under a workload's own
roles give one word at every exit, because each record carries the roles it ran under.

The records are two cells' race selections on one H200 (torch 2.11, transformers 5.17), as
racegate wrote them before records named their roles. `safe`: warmup_locked clean 21 of 21,
per_device failing 12 of 12: SAFE under the built-in roles; UNDECIDED for a workload whose
positive control is `singleton` (its 3 of 4 asks for more clean runs than 21). `hangs`: an
earlier cell where warmup_locked hung 5 of 22 runs: UNSAFE, whichever the control.
"""

from __future__ import annotations

import dataclasses
import hashlib
import io
import json
import lzma
import re
import sys
from pathlib import Path

import pytest

from racegate.harness.doors import cli, options
from racegate.harness.judge.gate import EXIT_CODES, Word
from racegate.harness.judge.inputs import roles_of
from racegate.harness.run.record import RunRecord, read_jsonl
from tests.test_baselines import write
from tests.test_plugin import _plugin

pytest_plugins = ["pytester"]
ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # bootstrap.py, the entry point, is no package
import bootstrap  # noqa: E402

DATA = ROOT / "tests/data"
RUNS = {
    "safe": DATA / "one_h200_cell_safe.jsonl.xz",
    "hangs": DATA / "one_h200_cell_warmup_locked_hangs.jsonl.xz",
}
TABLE_DOC = ROOT / "docs/vocabulary.md"
# decision -> (records, the roles they are given: None, none, as written: the built-in's)
CASES: dict[Word, tuple[str, tuple[str, str] | None]] = {
    Word.SAFE: ("safe", None),
    Word.UNSAFE: ("hangs", None),
    Word.UNDECIDED: ("safe", ("warmup_locked", "singleton")),
}
OWN_ROLES = {  # a workload whose control is singleton: (records, roles, word)
    "undecided": ("safe", ("warmup_locked", "singleton"), Word.UNDECIDED),
    "unsafe": ("hangs", ("warmup_locked", "singleton"), Word.UNSAFE),
}
COMMANDS = (
    "pytest -m race",
    "python3 bootstrap.py race",
    "python -m racegate run",
    "python -m racegate report",
)
STRATEGIES = ["per_device", "singleton", "warmup", "warmup_locked", "processes", "nested_fx_off"]


def cell_runs(name: str, roles: tuple[str, str] | None) -> list[RunRecord]:
    """One cell's records, each naming `roles` (None: as racegate wrote them, naming none)."""
    text = lzma.decompress(RUNS[name].read_bytes()).decode()
    records = [RunRecord.from_json(json.loads(line)) for line in text.splitlines()]
    assert all(r.scenario.production is None for r in records)  # old records: readable
    if roles is None:
        return records
    named = {"production": roles[0], "control": roles[1]}
    return [
        dataclasses.replace(r, scenario=dataclasses.replace(r.scenario, **named)) for r in records
    ]


def documented_table() -> dict[str, dict[str, int]]:
    """command -> word -> exit, from the exit-code table in docs/vocabulary.md."""
    text = TABLE_DOC.read_text()
    head = "| command | SAFE | UNSAFE | UNDECIDED |"
    assert head in text, f"{TABLE_DOC} has no exit-code table ({head})"
    table = {}
    for line in text[text.index(head) :].splitlines()[2:]:
        if not line.startswith("|"):
            break
        command, *codes = [c.strip() for c in line.strip("|").split("|")]
        table[command.strip("`")] = {
            str(w): int(re.match(r"\d+", c).group()) for w, c in zip(Word, codes, strict=False)
        }
    return table


def _workload(pytester: pytest.Pytester, roles: tuple[str, str] | None) -> None:
    """A workload with the cell's strategies and these roles (None: no roles(), the built-in's)."""
    own = (
        ""
        if roles is None
        else "    def roles(self):\n"
        "        from racegate.harness.scenario.workload_api import WorkloadRoles\n"
        f"        return WorkloadRoles(production={roles[0]!r}, control={roles[1]!r})\n"
    )
    pytester.makepyfile(
        cell_workload=(
            "class Cell:\n"
            "    name = 'cell'\n"
            f"    def strategies(self): return {STRATEGIES!r}\n"
            "    def shapes(self): return [1, 2]\n"
            "    def make_replica(self, device, strategy, *, seed): raise NotImplementedError\n"
            "    def flops_per_step(self, shape): return None\n"
            f"{own}\n"
            "def make_workload(preset='tiny'):\n"
            "    return Cell()\n"
        )
    )


def _pytest_args(pytester: pytest.Pytester, evidence: Path, name: str) -> list[str]:
    return [
        "-p", "no:cacheprovider", "--racegate-devices", "cpu",
        "--racegate-records-from", str(evidence),
        "--racegate-results", str(pytester.path / f"{name}.jsonl"),
    ]  # fmt: skip


def _fake_venv(tmp: Path, cwd: Path) -> Path:
    """A venv bootstrap.py takes for its own and up to date, whose python is this one run in
    `cwd` (the pytester folder, where the stub race case and conftest are): bootstrap.py's own
    code (its command, its exit) runs as it does, without an install."""
    venv = tmp / "venv"
    (venv / "bin").mkdir(parents=True)
    (venv / bootstrap.MADE_MARKER).write_text("test\n")
    wanted = hashlib.sha256(bootstrap.REQUIREMENTS.read_bytes()).hexdigest()
    (venv / bootstrap.STAMP).write_text(wanted + "\n")
    python = venv / "bin" / "python"
    python.write_text(f'#!/bin/sh\ncd "{cwd}" && exec "{sys.executable}" "$@"\n')
    python.chmod(0o700)
    return venv


def exits(
    name: str,
    roles: tuple[str, str] | None,
    pytester: pytest.Pytester,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    capfd: pytest.CaptureFixture[str],
) -> dict[str, tuple[int, str]]:
    """command -> (exit code, the decision word it printed), for a cell's records under `roles`
    (and a workload with those roles)."""
    records = cell_runs(name, roles)
    _plugin(pytester, monkeypatch)
    _workload(pytester, roles)
    monkeypatch.setenv("RACEGATE_WORKLOAD", "cell_workload:make_workload")
    for name in ("RACEGATE_PRODUCTION_STRATEGY", "RACEGATE_CONTROL_STRATEGY"):
        monkeypatch.delenv(name, raising=False)  # the workload's roles() decide
    pytester.makepyfile(
        test_stub="import pytest\n\n@pytest.mark.race\ndef test_case():\n    pass\n"
    )
    evidence = write(pytester.path / "evidence.jsonl", records)
    assert len(read_jsonl(evidence)) == len(records)
    out: dict[str, tuple[int, str]] = {}

    def said(text: str) -> str:
        found = re.findall(r"^(SAFE|UNSAFE|UNDECIDED): ", text, re.MULTILINE)
        return found[-1] if found else "?"

    # pytest -m race: a real session, its one race case passing, judging the merged records.
    stub = "test_stub.py"  # named: the plugin adds its own race suite only where no path is
    result = pytester.runpytest_subprocess(
        "-m", "race", *_pytest_args(pytester, evidence, "p"), stub
    )
    out["pytest -m race"] = (result.ret, said(result.stdout.str()))
    # bootstrap.py race: its own main, which runs that pytest in "its" venv and exits with it.
    monkeypatch.setenv("RACEGATE_VENV", str(_fake_venv(tmp_path, pytester.path)))
    capfd.readouterr()
    rc = bootstrap.main(["race", *_pytest_args(pytester, evidence, "r"), stub])
    out["python3 bootstrap.py race"] = (rc, said(capfd.readouterr().out))
    # harness run: its verdict over these records (cmd_run returns this decision's code).
    opts = options.resolve({"devices": "cpu"}, gpus=0, for_cli=True)
    buf = io.StringIO()
    decision = cli.print_verdict(records, opts, buf)
    out["python -m racegate run"] = (decision.exit_code, said(buf.getvalue()))
    # harness report: the CLI over the same records' file.
    (tmp_path / "no-floors").mkdir()
    report = tmp_path / "report"
    argv = ["report", str(evidence), "--out-dir", str(report)]
    rc = cli.main([*argv, "--baselines", str(tmp_path / "no-floors")])
    out["python -m racegate report"] = (
        rc,
        json.loads((report / "gate.json").read_text())["decision"],
    )
    return out


@pytest.mark.process
@pytest.mark.parametrize("word", list(CASES), ids=str)
def test_every_command_exits_as_the_table_says_from_real_records(
    word: Word,
    pytester: pytest.Pytester,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    capfd: pytest.CaptureFixture[str],
) -> None:
    table = documented_table()
    assert sorted(table) == sorted(COMMANDS), table
    found = exits(*CASES[word], pytester, monkeypatch, tmp_path, capfd)
    for command in COMMANDS:
        code, printed = found[command]
        assert code == table[command][word] == EXIT_CODES[word], (command, found)
        assert printed == str(word), (command, found)
    assert found["pytest -m race"][1] == found["python -m racegate report"][1] == str(word), found


@pytest.mark.process
@pytest.mark.parametrize("case", OWN_ROLES)
def test_a_workloads_own_roles_give_one_word_at_pytests_gate_and_the_report(
    case: str,
    pytester: pytest.Pytester,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    capfd: pytest.CaptureFixture[str],
) -> None:
    """The records of a workload whose positive control is `singleton`, not the built-in
    per_device: pytest's gate and `harness report` give the same word and exit. The `safe`
    runs under the built-in roles are SAFE, so a report that judged by the built-in roles
    instead of the records' said SAFE (0) where pytest said UNDECIDED (7)."""
    name, roles, word = OWN_ROLES[case]
    found = exits(name, roles, pytester, monkeypatch, tmp_path, capfd)
    code = EXIT_CODES[word]
    assert found["pytest -m race"] == found["python -m racegate report"] == (code, str(word)), found
    assert roles_of(cell_runs(name, roles)) == roles
