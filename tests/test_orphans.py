"""No orphans, by the kernel: a SIGKILLed runner takes every process of its run along, its
workload's grandchildren and new sessions included (racegate.harness.run.pidns); where no PID
namespace can be made, the record says so.

The runner is a real `python` process running run_scenario on tests/orphan_workload.py, whose
thread 0 starts `sleep 300` under a marker argv[0]; the test finds it in /proc/*/cmdline.
"""

from __future__ import annotations

import dataclasses
import os
import signal
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from racegate.harness.doors.pipeline import run_scenario
from racegate.harness.run import pidns
from racegate.harness.scenario.spec import make_scenario
from tests.fault_kit import fault_scenario
from tests.orphan_workload import HOW, MARKER
from tests.test_fault_lifetimes import wait_for

# Every test here injects real faults into real runs: the fault tier (tests/conftest.py).
pytestmark = pytest.mark.fault

ROOT = Path(__file__).resolve().parents[1]
RUNNER = """
import sys
from racegate.harness.doors.pipeline import run_scenario
from racegate.harness.scenario.spec import make_scenario
sc = make_scenario(preset=sys.argv[1], strategy="eager", steps=3000, warmup_steps=1,
                   workload="tests.orphan_workload:make_workload", timeout_s=600,
                   threads_per_device=1)
run_scenario(sc)
"""


def namespace_made() -> str:
    """What a fresh process gets from pidns.enter() here: CONTAINED, or "none: why"."""
    probe = "from racegate.harness.run import pidns; print(pidns.enter())"
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    out = subprocess.run(
        [sys.executable, "-c", probe], cwd=ROOT, env=env, capture_output=True, text=True
    )
    return out.stdout.strip() or f"none: the probe printed nothing (exit {out.returncode})"


def with_marker(marker: str) -> list[int]:
    """Live pids whose argv[0] is `marker` (zombies have an empty cmdline)."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                argv0 = Path(f"/proc/{entry}/cmdline").read_bytes().split(b"\0")[0]
            except OSError:
                continue
            if argv0 == marker.encode():
                found.append(int(entry))
    return found


def kill_runner_mid_run(how: str, env: dict[str, str]) -> tuple[str, list[int]]:
    """Start a runner whose workload starts a marked sleeper `how`, SIGKILL the runner once the
    sleeper runs; the marker and the sleepers alive 5 s later (killed by this test after)."""
    marker = f"racegate-orphan-{uuid.uuid4().hex}"
    env = dict(env, PYTHONPATH=str(ROOT), **{MARKER: marker})
    runner = subprocess.Popen([sys.executable, "-c", RUNNER, how], cwd=ROOT, env=env)
    try:
        assert wait_for(lambda: with_marker(marker), 120), "the sleeper never started"
        runner.kill()
        runner.wait(30)
        wait_for(lambda: not with_marker(marker), 5)
        return marker, with_marker(marker)
    finally:
        for pid in with_marker(marker):  # never leave a test's processes behind
            os.kill(pid, signal.SIGKILL)
        if runner.poll() is None:
            runner.kill()
            runner.wait()


@pytest.mark.parametrize("how", HOW)
def test_nothing_outlives_a_sigkilled_runner(how: str) -> None:
    """A forked child, a new session, a daemon (double fork): all gone within 5 s."""
    made = namespace_made()
    if made != pidns.CONTAINED:
        pytest.skip(f"no PID namespace can be made here ({made})")
    env = {k: v for k, v in os.environ.items() if k != pidns.SWITCH}
    marker, left = kill_runner_mid_run(how, env)
    assert left == [], f"{len(left)} process(es) {marker} outlived the runner"


def test_without_a_namespace_the_sleeper_outlives_the_runner() -> None:
    """What the namespace prevents, shown: switched off, a new session escapes every death
    signal and outlives a SIGKILLed runner (so the test above can fail)."""
    _, left = kill_runner_mid_run("setsid", dict(os.environ, **{pidns.SWITCH: "0"}))
    assert len(left) == 1, left


def test_the_record_says_how_the_run_was_contained(monkeypatch: pytest.MonkeyPatch) -> None:
    """`containment` is the namespace where one is made; without one the run still runs, and
    the record says why."""
    made = namespace_made()
    monkeypatch.delenv(pidns.SWITCH, raising=False)
    record = run_scenario(fault_scenario("ok"))
    assert record.outcome == "ok", record.detail
    assert record.containment == made
    monkeypatch.setenv(pidns.SWITCH, "0")
    record = run_scenario(fault_scenario("ok"))
    assert record.outcome == "ok", record.detail
    assert record.containment == f"none: {pidns.SWITCH}=0"


def test_a_contained_worker_is_no_namespace_init() -> None:
    """The worker is pid 2 of its namespace, not its init: a workload's SIGKILL to itself
    still kills it (an init ignores it), and the runner reads its exit as a crash."""
    if namespace_made() != pidns.CONTAINED:
        pytest.skip("no PID namespace can be made here")
    record = run_scenario(fault_scenario("self_sigkill"))
    assert record.outcome == "crash", record.detail
    assert record.containment == pidns.CONTAINED
    assert "SIGKILL" in (record.detail or ""), record.detail


def test_a_scenario_of_the_orphan_workload_runs() -> None:
    """The test tool itself: a short run whose sleeper dies with it (the kernel kills it with
    the namespace, or the runner finds it by its environment) and is counted in the record."""
    marker = f"racegate-orphan-{uuid.uuid4().hex}"
    os.environ[MARKER] = marker
    try:
        sc = make_scenario(preset="setsid", strategy="eager",
                           workload="tests.orphan_workload:make_workload", steps=3,
                           warmup_steps=1, timeout_s=90, threads_per_device=1)  # fmt: skip
        record = run_scenario(sc)
        assert record.outcome == "ok", record.detail
        assert with_marker(marker) == []
        assert "killed 1 process(es) the run left behind" in (record.detail or ""), record.detail
    finally:
        del os.environ[MARKER]
        for pid in with_marker(marker):
            os.kill(pid, signal.SIGKILL)


def test_a_run_on_a_gpu_makes_no_namespace(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """CUDA fails to start inside the namespace (error 304 on one H200), so the runner asks a
    GPU run's worker for none, and the record says why; a CPU run is not asked."""
    from racegate.harness.run import cache_state, runner

    monkeypatch.delenv(pidns.SWITCH, raising=False)
    root = cache_state.private_dir(tmp_path / "root")
    cpu = fault_scenario("ok")
    gpu = dataclasses.replace(cpu, devices=("cuda:0",))
    assert gpu.uses_cuda and not cpu.uses_cuda
    assert runner.child_env(gpu, root, "r")[0][pidns.SWITCH] == pidns.GPU
    assert pidns.SWITCH not in runner.child_env(cpu, root, "r")[0]
    monkeypatch.setenv(pidns.SWITCH, pidns.GPU)  # what a GPU run's worker reads, on this CPU
    record = run_scenario(cpu)
    assert record.outcome == "ok", record.detail
    assert record.containment == pidns.ON_GPU
