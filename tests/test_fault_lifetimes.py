"""No orphans: a run's processes die with the runner, however the runner ends.

The runner is a real `python` process running run_scenario; it is sent real signals while its
child is still importing torch.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from racegate.harness.run.lifeline import kill_with, processes_with

# Every test here injects real faults into real runs: the fault tier (tests/conftest.py).
pytestmark = pytest.mark.fault

ROOT = Path(__file__).resolve().parents[1]
RUNNER = """
import sys
from racegate.harness.doors.pipeline import run_scenario
from racegate.harness.scenario.spec import make_scenario
sc = make_scenario(preset="ok", strategy="eager", workload="tests.fault_workloads:make_workload",
                   steps=3000, warmup_steps=1, timeout_s=600)  # outlives every wait here
run_scenario(sc, work_dir=__import__("pathlib").Path(sys.argv[1]))
"""


def start_runner(work: Path) -> subprocess.Popen[bytes]:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.Popen([sys.executable, "-c", RUNNER, str(work)], cwd=ROOT, env=env)


def wait_for(predicate, seconds: float) -> bool:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        if predicate():
            return True
        time.sleep(0.05)
    return predicate()


def children_of(runner: subprocess.Popen[bytes]) -> list[int]:
    return processes_with("RACEGATE_RUNNER_PID", str(runner.pid))


def importing_torch(pid: int) -> bool:
    """libtorch is mapped (so the child is past its start-up checks) but the import goes on."""
    try:
        return "libtorch" in Path(f"/proc/{pid}/maps").read_text()
    except OSError:
        return False


@pytest.mark.parametrize("when", ["starting", "importing torch"])
@pytest.mark.parametrize("sig", ["SIGKILL", "SIGTERM", "SIGINT"])
def test_children_die_with_the_runner(sig: str, when: str, tmp_path: Path) -> None:
    """`starting`: the runner dies before the child armed its death signal (the child sees
    it was re-parented); `importing torch`: after (PR_SET_PDEATHSIG takes it down)."""
    runner = start_runner(tmp_path)
    try:
        assert wait_for(lambda: children_of(runner), 60), "the runner never started a child"
        if when == "importing torch":  # the worker, inside its PID namespace where one is made
            loading = lambda: any(importing_torch(pid) for pid in children_of(runner))  # noqa: E731
            assert wait_for(loading, 60), "the child never loaded torch"
        runner.send_signal(signal.Signals[sig])
        runner.wait(30)
        assert wait_for(lambda: not children_of(runner), 15), children_of(runner)
        if sig == "SIGINT":  # an exit path the runner survives: its run dir is gone too
            assert list(tmp_path.iterdir()) == []
    finally:  # never leave a test's processes behind
        kill_with("RACEGATE_RUNNER_PID", str(runner.pid))
        if runner.poll() is None:
            runner.kill()
