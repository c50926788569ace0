"""The smaller items of issue 56, each fail closed: a step of no tokens, the run variables'
values, RACEGATE_VENV, a huge version, a refused upgrade's venv, the pip child of a killed
upgrade or bootstrap.py, gate.json's rows saying their decision."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from racegate.harness.doors.pipeline import run_scenario
from racegate.harness.report.write import write_reports
from racegate.harness.run import envs
from racegate.harness.run.lifeline import processes_with
from racegate.harness.run.record import read_jsonl
from racegate.harness.scenario import settings
from racegate.harness.scenario.workload_api import StepResult
from tests.fault_kit import fault_scenario
from tests.test_baselines import make_record, write

REPO = Path(__file__).resolve().parent.parent
FAULT = "tests.fault_workloads:make_workload"


@pytest.mark.parametrize("tokens", [0, -3, 1.5, True, None])
def test_a_step_of_no_tokens_is_refused_where_it_is_made(tokens: object) -> None:
    with pytest.raises(ValueError, match=r"a step reports the tokens it processed, an int ≥ 1"):
        StepResult(tokens=tokens)  # type: ignore[arg-type]
    assert StepResult(tokens=1).tokens == 1


@pytest.mark.fault
def test_a_run_with_a_step_of_no_tokens_reads_the_same_everywhere(tmp_path: Path) -> None:
    """StepResult(tokens=0): `run` said SAFE while the report and pytest refused the records.
    Now the step fails (other_error, naming why) and its record reads back as every reader
    reads it."""
    record = run_scenario(fault_scenario("zero_tokens"))
    assert record.outcome == "other_error", record.detail
    assert "StepResult(tokens=0)" in (record.threads[0].error or ""), record.threads[0]
    path = write(tmp_path / "r.jsonl", [record])
    assert read_jsonl(path)[0].outcome == "other_error"  # the report's and pytest's reader


@pytest.mark.parametrize(
    ("name", "value", "said"),
    [
        ("RACEGATE_PID_NAMESPACE", "gpu", "allowed: '': unset"),
        ("RACEGATE_PID_NAMESPACE", "yes", "'0': no PID namespace"),
        ("RACEGATE_LAUNCHER", "spawn", "'fork': forked from a launcher"),
        ("RACEGATE_TEST_SLOWDOWN", "abc", "is not a number ≥ 0"),
        ("RACEGATE_TEST_SLOWDOWN", "-1", "is not a number ≥ 0"),
        ("RACEGATE_TEST_SLOWDOWN", "nan", "is not a number ≥ 0"),
    ],
    ids=[
        "pidns-gpu",
        "pidns-yes",
        "launcher-spawn",
        "slowdown-abc",
        "slowdown-negative",
        "slowdown-nan",
    ],
)
def test_a_run_variable_of_a_bad_value_is_one_line(name: str, value: str, said: str) -> None:
    with pytest.raises(ValueError) as caught:
        settings.check_environment({name: value})
    text = str(caught.value)
    assert "\n" not in text and f"{name}={value!r} (from the environment)" in text and said in text
    settings.check_environment({"RACEGATE_PID_NAMESPACE": "0", "RACEGATE_TEST_SLOWDOWN": "0.05"})


@pytest.mark.process
def test_run_refuses_pid_namespace_gpu_before_any_run(tmp_path: Path) -> None:
    """RACEGATE_PID_NAMESPACE=gpu on a CPU box wrote a false `containment` reason."""
    env = {**os.environ, "RACEGATE_PID_NAMESPACE": "gpu"}
    proc = subprocess.run(
        [sys.executable, "-m", "racegate", "run", "--workload", FAULT, "--preset", "ok",
         "--strategies", "eager", "--results", str(tmp_path / "r.jsonl")],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1, proc.stderr[-2000:]
    assert "RACEGATE_PID_NAMESPACE='gpu'" in lines[0]
    assert not (tmp_path / "r.jsonl").exists() or not read_jsonl(tmp_path / "r.jsonl")


@pytest.mark.process
@pytest.mark.parametrize("value", ["-1", "a" * 300])
def test_bootstrap_refuses_a_venv_value_that_names_no_folder(value: str, tmp_path: Path) -> None:
    """RACEGATE_VENV=-1 made a 26 MB venv named -1 in the checkout; 300 characters were a
    traceback. Now one line each, exit 2, nothing made."""
    env = {**os.environ, "RACEGATE_VENV": value}
    before = set(os.listdir(REPO))
    proc = subprocess.run(
        [sys.executable, str(REPO / "bootstrap.py"), "test"], cwd=REPO, env=env,
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1 and "RACEGATE_VENV=" in lines[0], proc.stderr
    assert len(lines[0]) < 300
    assert set(os.listdir(REPO)) == before


def test_a_huge_version_is_a_short_error_line() -> None:
    with pytest.raises(ValueError) as caught:
        envs.parse_changes(["transformers==" + "9" * 100_000])
    assert len(str(caught.value)) < 400 and "100,014 characters" in str(caught.value)


@pytest.mark.process
def test_a_refused_install_leaves_no_half_made_venv(tmp_path: Path) -> None:
    """Each refused `upgrade` requirement that reached pip left a half-made venv."""
    where = tmp_path / "envs"
    with pytest.raises(envs.EnvError, match="cannot install"):
        envs.candidate(
            {"transformers": "0.0.0.999"}, base=envs.current(), where=where,
            find_links=[tmp_path], progress=lambda _: None,
        )  # fmt: skip
    assert list(where.iterdir()) == []


_PARENT = """
import sys
from {module} import _run
_run([sys.executable, "-c", "import time; time.sleep(120)"], env={{**__import__("os").environ,
     "RACEGATE_TEST_MARK": sys.argv[1]}})
"""


@pytest.mark.fault
@pytest.mark.parametrize(
    "module", ["racegate.harness.run.envs", "bootstrap"], ids=["upgrade", "bootstrap"]
)  # ids without "race": -k race selects race cases only (test_keyword_selection_...)
def test_a_killed_upgrade_leaves_no_pip_running(module: str) -> None:
    """SIGKILL of `upgrade` left its pip child running (PPID 1), and so did a killed
    bootstrap.py (its pip install, its pytest): every child of the making of an environment,
    and of the bootstrapper, dies with it (PR_SET_PDEATHSIG, racegate.harness.run.lifeline)."""
    mark = f"pip-{os.getpid()}-{time.monotonic_ns()}"
    code = _PARENT.format(module=module)
    parent = subprocess.Popen([sys.executable, "-c", code, mark], cwd=REPO)
    deadline = time.monotonic() + 60
    while not processes_with("RACEGATE_TEST_MARK", mark):
        assert time.monotonic() < deadline and parent.poll() is None
        time.sleep(0.1)
    parent.send_signal(signal.SIGKILL)
    parent.wait()
    deadline = time.monotonic() + 10
    while processes_with("RACEGATE_TEST_MARK", mark):
        assert time.monotonic() < deadline, "the child outlived its killed parent"
        time.sleep(0.1)


def test_gate_json_rows_say_their_decision_one_way(tmp_path: Path) -> None:
    """An UNDECIDED row read `"status": "fail"`, `"passed": false` beside `"decision":
    "UNDECIDED"`; now its status is `undecided` too."""
    runs = [
        make_record(strategy="warmup_locked"),
        make_record(strategy="per_device", nested=1, tps=None),
    ]
    path = write(tmp_path / "r.jsonl", runs)
    write_reports([path], tmp_path / "out", baselines_dir=tmp_path / "none", title="t",
                  production_strategy="warmup_locked")  # fmt: skip
    (row,) = json.loads((tmp_path / "out" / "gate.json").read_text())["rows"]
    assert (row["decision"], row["status"], row["passed"]) == ("UNDECIDED", "undecided", False)
