"""Every exit is a decision: a workload that exits (sys.exit, at import, in its factory, in
make_replica or in a step) is a failure to run with its own line, never exit 0; and a process
that has printed its verdict exits, whatever threads the workload left."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from racegate.harness.doors.pipeline import run_scenario
from racegate.harness.scenario.workload_api import WorkloadError, WorkloadSpec, load_workload
from tests.fault_kit import fault_scenario

REPO = Path(__file__).resolve().parent.parent
FAULT = "tests.fault_workloads:make_workload"


def test_a_workload_that_exits_at_import_is_a_workload_error() -> None:
    spec = WorkloadSpec("tests.exit_at_import_workload:make_workload", {"preset": "ok"})
    with pytest.raises(WorkloadError, match=r"importing 'tests.exit_at_import_workload' called "
                       r"sys.exit\(0\); a workload must not exit"):  # fmt: skip
        load_workload(spec)


def test_a_workload_whose_factory_exits_is_a_workload_error() -> None:
    with pytest.raises(WorkloadError, match=r"factory make_workload\(preset='exit_factory'\) "
                       r"called sys.exit\(0\)"):  # fmt: skip
        load_workload(WorkloadSpec(FAULT, {"preset": "exit_factory"}))


@pytest.mark.fault
@pytest.mark.parametrize(
    ("fault", "said"),
    [
        ("exit_factory", "factory make_workload(preset='exit_factory') called sys.exit(0)"),
        ("exit_replica", "make_replica() called sys.exit(0)"),
        ("exit_step", "SystemExit"),
    ],
)
def test_a_workload_that_exits_in_a_run_fails_it_with_its_own_line(fault: str, said: str) -> None:
    """In the worker: the run is a failure whose record says the workload exited (make_replica
    used to end the worker with status 0 and no result: 'exited 0 without a result')."""
    record = run_scenario(fault_scenario(fault))
    assert record.outcome != "ok"
    text = " ".join([record.detail or "", *(t.error or "" for t in record.threads)])
    assert said in text, text


def _racegate(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    base = {k: v for k, v in os.environ.items() if not k.startswith("RACEGATE_")}
    return subprocess.run(
        [sys.executable, "-m", *args], cwd=REPO, env=base | (env or {}), capture_output=True,
        text=True, timeout=120,
    )  # fmt: skip


RUN = ("racegate", "run", "--strategies", "eager", "--steps", "2", "--warmup-steps", "1")


@pytest.mark.process
def test_run_with_a_workload_that_exits_at_import_says_so_and_exits_2() -> None:
    """`racegate run` exited 0 with no racegate line."""
    proc = _racegate(*RUN, "--workload", "tests.exit_at_import_workload:make_workload")
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert len(lines) == 1 and "called sys.exit(0)" in lines[0], proc.stderr


@pytest.mark.process
def test_pytest_with_a_workload_that_exits_at_import_is_a_usage_error_not_internalerror(
    tmp_path: Path,
) -> None:
    """pytest's door (the plugin loads the workload in pytest_configure) gave INTERNALERROR,
    exit 3; now its usage error (4), naming the exit. The workload comes from the environment,
    so no option name is spelt here."""
    proc = _racegate(
        "pytest", "racegate/cases/test_race.py", "-m", "race", "-p", "no:cacheprovider",
        env={"RACEGATE_WORKLOAD": "tests.exit_at_import_workload:make_workload"},
    )  # fmt: skip
    out = proc.stdout + proc.stderr
    assert proc.returncode == 4, out[-2000:]
    assert "INTERNALERROR" not in out and "called sys.exit(0)" in out, out[-2000:]


@pytest.mark.process
def test_a_verdict_printed_is_an_exit_whatever_threads_the_workload_left(tmp_path: Path) -> None:
    """A workload module that starts a non-daemon thread at import: `racegate run` printed its
    verdict and then never exited (the interpreter waits for such threads)."""
    proc = _racegate(
        *RUN, "--workload", "tests.thread_at_import_workload:make_workload", "--preset", "ok",
        "--results", str(tmp_path / "x.jsonl"),
    )  # fmt: skip  # subprocess.run's timeout is what fails here without the fix
    assert proc.returncode == 7 and "UNDECIDED" in proc.stdout, proc.stderr[-2000:]
