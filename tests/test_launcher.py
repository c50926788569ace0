"""Warm starts keep a fresh process's isolation: runs forked from one launcher
(racegate.harness.run.launcher) find nothing an earlier run left, whatever it left or however it
ended; where forking is unsafe the run starts fresh and its record says why.

Real subprocesses, real torch; the faults are real (tests/launcher_workloads.py).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from racegate.harness.doors.pipeline import run_scenario
from racegate.harness.run import launcher
from racegate.harness.run.launcher import LAUNCHERS
from racegate.harness.scenario.spec import make_scenario
from tests.fault_kit import left_behind

pytestmark = pytest.mark.process

REPO = Path(__file__).resolve().parents[1]
TAINT = "tests.launcher_workloads:make_workload"
THREAD_AT_IMPORT = "tests.launcher_thread_at_import:make_workload"
FAULT = "tests.fault_workloads:make_workload"


def scenario(preset: str = "taint", workload: str = TAINT):
    return make_scenario(
        preset=preset, strategy="eager", workload=workload, steps=2, warmup_steps=1,
        timeout_s=60, threads_per_device=1,
    )  # fmt: skip


def test_the_taint_workload_finds_what_an_earlier_run_left_in_its_process() -> None:
    """The check below can fail: two runs' replicas made in one process, the second finds the
    first's marks (this is what a launcher that ran runs itself, not forks, would give)."""
    code = (
        "import os, torch\n"
        "from tests.launcher_workloads import TaintWorkload\n"
        "w = TaintWorkload()\n"
        "w.make_replica(torch.device('cpu'), 'eager', seed=0)\n"
        "try:\n"
        "    w.make_replica(torch.device('cpu'), 'eager', seed=0)\n"
        "except RuntimeError as exc:\n"
        "    print(exc, flush=True); os._exit(0)\n"
        "os._exit(1)\n"  # the leaked thread is not a daemon: exit without waiting for it
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    for mark in ("a module global", "an environment variable", "a planted module",
                 "dynamo's config", "threads ['leaked-by-"):  # fmt: skip
        assert mark in proc.stdout, proc.stdout


def test_runs_forked_from_one_launcher_find_nothing_an_earlier_run_left() -> None:
    """Each taint run leaves a module global, a variable, a planted module, dynamo's config
    changed, a non-daemon thread and another working folder; the next run from the same
    launcher finds none of them."""
    first = run_scenario(scenario())
    second = run_scenario(scenario())
    for record in (first, second):
        assert record.launch == "fork", record.launch
        assert record.outcome == "ok", record.detail


def test_a_crashed_run_leaves_its_launcher_forking_clean_runs() -> None:
    crashed = run_scenario(scenario("abort"))
    assert (crashed.launch, crashed.outcome) == ("fork", "crash"), crashed.detail
    assert "SIGABRT" in (crashed.detail or ""), crashed.detail
    after = run_scenario(scenario())
    assert (after.launch, after.outcome) == ("fork", "ok"), after.detail


def test_a_workload_whose_import_starts_a_thread_runs_fresh_and_says_why() -> None:
    record = run_scenario(scenario(workload=THREAD_AT_IMPORT))
    assert record.outcome == "ok", record.detail
    assert record.launch is not None and record.launch.startswith("fresh: no launcher: "), record
    assert "started a thread (started-at-import)" in record.launch, record.launch


def test_the_launcher_variable_set_to_fresh_starts_every_run_fresh(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("RACEGATE_LAUNCHER", "fresh")
    record = run_scenario(scenario())
    assert (record.launch, record.outcome) == ("fresh: RACEGATE_LAUNCHER=fresh", "ok"), record
    assert os.environ["RACEGATE_LAUNCHER"] == "fresh"


def test_a_daemon_a_forked_run_forked_into_its_own_session_dies_with_the_run(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Without a PID namespace (a run on a GPU makes none) a process the worker forks, not
    execs, carries its launcher's environment (no run marker) and, in a session of its own,
    escapes the process group's kill: the worker is a subreaper, and the runner kills what it
    left once it re-parents (lifeline.kill_adopted). Without that the daemon sleeps on."""
    monkeypatch.setenv("RACEGATE_PID_NAMESPACE", "0")
    record = run_scenario(scenario("fork_setsid", workload=FAULT))
    assert (record.launch, record.outcome) == ("fork", "ok"), record.detail
    assert left_behind() == []


def test_one_launcher_serves_every_test_of_a_session_and_at_most_two_live(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """pytest names the test in progress in the environment (PYTEST_CURRENT_TEST): keyed by it,
    every case started a launcher of its own, each holding torch imported. Another environment
    stops the least recently used one beyond two."""
    assert run_scenario(scenario()).launch == "fork"
    before = set(LAUNCHERS.pids())
    monkeypatch.setenv("PYTEST_CURRENT_TEST", "tests/elsewhere.py::test_other (call)")
    assert run_scenario(scenario()).launch == "fork"
    assert set(LAUNCHERS.pids()) == before
    for value in ("a", "b", "c"):
        monkeypatch.setenv("LAUNCHER_TEST_ENVIRONMENT", value)
        assert run_scenario(scenario()).outcome == "ok"
        assert len(LAUNCHERS.pids()) <= launcher.MAX_LIVE


def test_a_launcher_outlives_the_thread_that_started_it(monkeypatch: pytest.MonkeyPatch) -> None:
    """A case's thread starts the launcher and ends; the kernel's death signal follows that
    thread, not the runner, so with one the launcher died with it and every later run of the
    session went fresh ("the launcher is gone": one H200, the main command)."""
    monkeypatch.setenv("LAUNCHER_TEST_ENVIRONMENT", "started-by-a-thread")  # a launcher of its own
    first: list = []
    starter = threading.Thread(target=lambda: first.append(run_scenario(scenario())))
    starter.start()
    starter.join()
    assert first[0].launch == "fork", first[0].launch
    before = set(LAUNCHERS.pids())
    time.sleep(1.0)  # a death signal is sent as the thread ends
    later = run_scenario(scenario())
    assert (later.launch, later.outcome) == ("fork", "ok"), later.launch
    assert set(LAUNCHERS.pids()) == before  # the same launcher, not a new one


def test_a_launcher_killed_from_outside_is_started_again(monkeypatch: pytest.MonkeyPatch) -> None:
    """A launcher that died (a real SIGKILL) is not left answering "gone" for the rest of the
    session: the next run of its environment starts another and is forked from it."""
    monkeypatch.setenv("LAUNCHER_TEST_ENVIRONMENT", "killed")
    before = set(LAUNCHERS.pids())
    assert run_scenario(scenario()).launch == "fork"
    (killed,) = set(LAUNCHERS.pids()) - before
    os.kill(killed, signal.SIGKILL)
    time.sleep(0.5)
    after = run_scenario(scenario())
    assert (after.launch, after.outcome) == ("fork", "ok"), after.launch
    assert killed not in LAUNCHERS.pids()


def test_the_launcher_learns_this_cpu_once_for_every_fork(tmp_path: Path) -> None:
    """inductor's instruction-set check (a C++ build and load per instruction set, 24 s of a
    33 s first CPU compile on 2 cores) is made in the launcher, so a forked run starts with it,
    and the launcher still forks (it left no thread, its caches are its own)."""
    code = (
        "from racegate.harness.run import launcher\n"
        "why = launcher._prepare('racegate.model.workload')\n"
        "from torch._inductor.cpu_vec_isa import valid_vec_isa_list\n"
        "print(repr(why), valid_vec_isa_list.cache_info().currsize)\n"
    )
    env = {**os.environ, "PYTORCH_NVML_BASED_CUDA_CHECK": "1",
           "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "inductor")}  # fmt: skip
    proc = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True, text=True,
        timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.split() == ["''", "1"], proc.stdout
