"""The stall watch: its reading of faulthandler dumps (racegate.harness.run.stacks) and of threads'
CPU."""

from __future__ import annotations

import faulthandler
import os
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import pytest

from racegate.harness.run import lifeline, stacks, stall, threads
from racegate.harness.run.lifeline import DUMP_SIGNAL
from racegate.harness.run.protocol import Built, ProgressEvent, Stepping
from racegate.harness.scenario.vocab import Schedule


def test_an_empty_or_headerless_dump_has_no_stack_to_compare() -> None:
    # A dump that did not land (the child ignored the dump signal, or it was still being written):
    # on the H200 cell the watch's first reader of it raised and failed every case it met.
    assert stacks.ours("") == ""
    assert stacks.ours("Fatal Python error: Segmentation fault\n") == ""


def test_only_our_own_threads_count_and_the_signalled_thread_is_no_change() -> None:
    ours = '  File "/r/harness/run/threads.py", line 149 in _thread_main\n'
    poller = '  File "/t/torch/_inductor/compile_worker/timer.py", line {} in check\n'
    head = " (most recent call first):\n"
    first = f"Thread 0xa{head}{poller.format(43)}Current thread 0xb{head}{ours}"
    later = f"Current thread 0xa{head}{poller.format(41)}Thread 0xb{head}{ours}"
    assert stacks.ours(first) == stacks.ours(later) != ""
    moved = later.replace("line 149", "line 150")
    assert stacks.ours(moved) != stacks.ours(first)


def test_a_real_dump_keeps_exactly_the_thread_waiting_in_harness_run(tmp_path: Path) -> None:
    """faulthandler's own text: a thread parked in racegate/harness/run/threads.py is ours, this
    test's main thread (in tests/) is not."""
    co = threads._Coordinator(1, threads.Plan(Schedule.BARRIER, 0, 1, [1], time.monotonic() + 60))
    parked = threading.Event()
    waiter = threading.Thread(target=co.wait, args=(parked,), daemon=True)
    waiter.start()
    time.sleep(0.2)
    path = tmp_path / "dump.txt"
    with path.open("w") as fh:
        faulthandler.dump_traceback(file=fh, all_threads=True)
    parked.set()
    waiter.join()
    mine = stacks.ours(path.read_text())
    assert len(stacks.blocks(mine)[1]) == 1, mine
    assert f"harness{os.sep}run{os.sep}threads.py" in mine and "test_stall.py" not in mine


def test_stepping_threads_are_found_by_id_and_their_cpu_read() -> None:
    stop = threading.Event()

    def spin() -> None:
        while not stop.is_set():
            pass

    t = threading.Thread(target=spin, daemon=True)
    t.start()
    time.sleep(0.5)
    try:
        cpu, found = stall.stepping_demand_seconds({os.getpid(): [t.native_id or 0]})
    finally:
        stop.set()
        t.join()
    assert found == 1
    assert cpu > 0.05  # it spun for half a second (CPU clock ticks are 10 ms)
    # Once the thread has ended (join() returns a moment before the kernel lets it go).
    deadline = time.monotonic() + 5.0
    while stall.stepping_demand_seconds({os.getpid(): [t.native_id or 0]})[1] and (
        time.monotonic() < deadline
    ):
        time.sleep(0.01)
    assert stall.stepping_demand_seconds({os.getpid(): [t.native_id or 0]}) == (0.0, 0)


def test_a_thread_a_stepping_thread_starts_is_not_counted() -> None:
    """It inherits the kernel name (racegate-N): a spinning helper under a waiting stepping
    thread must not make the run look busy (by name, this counted 2 threads and the spin)."""
    stop = threading.Event()

    def helper() -> None:
        while not stop.is_set():
            pass

    def stepper() -> None:
        lifeline.name_this_thread(f"{lifeline.THREAD_PREFIX}7")
        threading.Thread(target=helper, daemon=True).start()
        stop.wait()

    t = threading.Thread(target=stepper, daemon=True)
    t.start()
    time.sleep(0.5)
    try:
        names = [
            Path(f"/proc/self/task/{tid}/comm").read_text().strip()
            for tid in os.listdir("/proc/self/task")
        ]
        cpu, found = stall.stepping_demand_seconds({os.getpid(): [t.native_id or 0]})
    finally:
        stop.set()
        t.join()
    assert names.count(f"{lifeline.THREAD_PREFIX}7") == 2  # the helper carries the name too
    assert found == 1 and cpu < stall.OURS_IDLE_CORES * 0.5 + 0.02, (found, cpu)


class _IdReplica:
    """Records the native id of the thread that steps it."""

    def __init__(self) -> None:
        self.tid = 0

    def step(self, shape: int) -> object:
        self.tid = threading.get_native_id()
        return type("Result", (), {"tokens": 1})()

    def eager_fallbacks(self) -> int:
        return 0


def test_the_child_reports_its_stepping_threads_ids(tmp_path: Path) -> None:
    """run_threads tells the ids (the worker writes them as a `stepping` event, which the
    watch reads back from the child's progress.jsonl)."""
    runs = [threads.ThreadRun(i, "cpu", _IdReplica()) for i in range(2)]
    told: list[list[int]] = []
    plan = threads.Plan(Schedule.BARRIER, 0, 1, [1], time.monotonic() + 60, on_started=told.append)
    assert threads.run_threads(runs, plan) == []
    assert told == [[r.replica.tid for r in runs]] and 0 not in told[0]
    assert stall.reported_tids(tmp_path) is None  # nothing reported yet
    event = ProgressEvent(time.monotonic(), Stepping(tuple(told[0])))
    (tmp_path / "progress.jsonl").write_text(
        ProgressEvent(0.0, Built(2, {})).to_line() + event.to_line() + '{"kind": "thr'
    )
    assert stall.reported_tids(tmp_path) == told[0]


def test_dumps_fold_to_each_threads_last_stack() -> None:
    head = " (most recent call first):\n"
    first = (
        f'Thread 0xa{head}  File "x.py", line 1 in f\nThread 0xb{head}  File "y.py", line 2 in g\n'
    )
    later = f'Fatal Python error: Aborted\n\nCurrent thread 0xa{head}  File "x.py", line 9 in f\n'
    folded = stacks.dedupe(first + later)
    assert folded.splitlines()[0] == "Fatal Python error: Aborted"
    assert "line 9 in f" in folded and "line 1 in f" not in folded  # 0xa's later stack wins
    assert "line 2 in g" in folded  # 0xb appeared once: kept


def _child(code: str, *args: str, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    """A python child that says "ready" once set up, then runs `code`'s loop on its stdin."""
    proc = subprocess.Popen(
        [sys.executable, "-c", code, *args], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
        text=True, env=env,
    )  # fmt: skip
    assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
    return proc


def _end(*procs: subprocess.Popen[str]) -> None:
    for p in procs:
        p.kill()
        p.wait()


IGNORES_DUMP_SIGNAL = (
    f"import signal, sys; signal.signal({int(DUMP_SIGNAL)}, signal.SIG_IGN); print('ready', "
    "flush=True); sys.stdin.read()"
)
DUMPS_ON_DUMP_SIGNAL = (
    "import faulthandler, sys; f = open(sys.argv[1], 'w'); faulthandler.register("
    f"{int(DUMP_SIGNAL)}, file=f, all_threads=True); print('ready', flush=True); sys.stdin.read()"
)


@pytest.mark.process
def test_dumps_are_requested_together_and_waited_for_once(tmp_path: Path) -> None:
    """Two children whose dump never comes cost one wait, not one each; those that dump are
    read, and one that is gone has none."""
    files = [tmp_path / f"stacks{i}.txt" for i in range(4)]
    for f in files:
        f.touch()
    silent = [_child(IGNORES_DUMP_SIGNAL) for _ in range(2)]
    dumping = [_child(DUMPS_ON_DUMP_SIGNAL, str(f)) for f in files[2:]]
    gone = _child(IGNORES_DUMP_SIGNAL)
    _end(gone)
    try:
        t0 = time.monotonic()
        quiet = stall.request_dumps({p.pid: f for p, f in zip(silent, files, strict=False)})
        waited = time.monotonic() - t0
        spoke = stall.request_dumps({p.pid: f for p, f in zip(dumping, files[2:], strict=True)})
        none = stall.request_dumps({gone.pid: files[0]})
    finally:
        _end(*silent, *dumping)
    assert quiet == {p.pid: "" for p in silent}
    # One at a time this waited DUMP_WAIT_S for each child (2 s here).
    assert waited < 1.6 * stall.DUMP_WAIT_S, waited
    assert set(spoke) == {p.pid for p in dumping}
    assert all("most recent call first" in text for text in spoke.values()), spoke
    assert none == {gone.pid: ""}


SPAWNS_ON_REQUEST = """
import subprocess, sys
print("ready", flush=True)
kid = None
for line in sys.stdin:
    if line.strip() == "spawn":
        kid = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    else:
        kid.kill()
        kid.wait()
    print(kid.pid, flush=True)
"""


@pytest.mark.process
def test_the_runs_processes_are_scanned_for_only_when_they_change() -> None:
    """The environ scan of every process runs once, then again only when a process of the run
    started (a compile worker, say) or ended; the set is what a scan would find."""
    mark = uuid.uuid4().hex
    env = dict(os.environ, RACEGATE_TEST_MARK=mark)
    proc = _child(SPAWNS_ON_REQUEST, env=env)
    assert proc.stdin is not None and proc.stdout is not None
    pids = stall.RunProcesses(lambda: lifeline.processes_with("RACEGATE_TEST_MARK", mark))
    try:
        assert pids([proc.pid]) == [proc.pid] and pids.scans == 1
        assert pids([proc.pid]) == [proc.pid] and pids.scans == 1  # nothing changed: no scan
        proc.stdin.write("spawn\n")
        proc.stdin.flush()
        kid = int(proc.stdout.readline())
        # Right after exec the kernel shows an empty environ for a moment (CI saw it): the scan
        # would miss the kid once, and the next look rescan. Wait until a scan can see it.
        deadline = time.monotonic() + 10
        while kid not in lifeline.processes_with("RACEGATE_TEST_MARK", mark):
            assert time.monotonic() < deadline, "the kid never showed its environment"
            time.sleep(0.05)
        assert sorted(pids([proc.pid])) == sorted([proc.pid, kid]) and pids.scans == 2
        assert pids([proc.pid]) and pids.scans == 2
        proc.stdin.write("kill\n")
        proc.stdin.flush()
        proc.stdout.readline()
        assert pids([proc.pid]) == [proc.pid] and pids.scans == 3
    finally:
        _end(proc)


NS_LAST_PID = Path("/proc/sys/kernel/ns_last_pid")


def _spawn_with_pid(pid: int) -> subprocess.Popen[bytes] | None:
    """A process given `pid`, which has just been freed: the kernel hands out ns_last_pid + 1
    next, so writing pid - 1 there makes the next fork get it (another fork can win: retry)."""
    for _ in range(20):
        try:
            NS_LAST_PID.write_text(str(pid - 1))
        except OSError as exc:  # root without CAP_SYS_ADMIN: the file is writable, the write not
            pytest.skip(f"pid reuse needs ns_last_pid: {exc}")
        proc = subprocess.Popen(["sleep", "60"])
        if proc.pid == pid:
            return proc
        proc.kill()
        proc.wait()
    return None


@pytest.mark.skipif(
    not os.access(NS_LAST_PID, os.W_OK), reason="pid reuse needs a writable ns_last_pid (root)"
)
@pytest.mark.process
def test_a_pid_the_kernel_gave_to_another_process_is_no_process_of_the_run() -> None:
    """A run's process ends, and the kernel gives its pid to an unrelated process: that one is
    not the run's (its CPU would make a deadlocked run look at work). Before, the set was kept
    while each pid was alive, and the stranger was counted."""
    mark = uuid.uuid4().hex
    run_proc = subprocess.Popen(["sleep", "60"], env=dict(os.environ, RACEGATE_TEST_MARK=mark))
    pids = stall.RunProcesses(lambda: lifeline.processes_with("RACEGATE_TEST_MARK", mark))
    deadline = time.monotonic() + 10
    while run_proc.pid not in lifeline.processes_with("RACEGATE_TEST_MARK", mark):
        assert time.monotonic() < deadline, "the run's process never showed its environment"
        time.sleep(0.05)
    stranger = None
    try:
        assert pids([run_proc.pid]) == [run_proc.pid] and pids.scans == 1
        run_proc.kill()
        run_proc.wait()
        # Start times count clock ticks (10 ms): a pid reused within one tick would look the
        # same. The kernel reuses a pid only after handing out all the others, never that fast.
        time.sleep(0.05)
        stranger = _spawn_with_pid(run_proc.pid)
        if stranger is None:
            pytest.skip(f"pid {run_proc.pid} went to other forks 20 times")
        assert pids([]) == [] and pids.scans == 2
    finally:
        _end(run_proc, *([stranger] if stranger else []))


def test_stepping_stacks_leave_out_the_main_thread_joining_them() -> None:
    """The worker's main thread joins the stepping threads in racegate/harness/run/threads.py too;
    its stack changes at the deadline (its final dump), so it must not be taken for one of them."""
    threads_py = f"{os.sep}harness{os.sep}run{os.sep}threads.py"
    dump = (
        "Thread 0x01 (most recent call first):\n"
        '  File "/w/tests/fault_workloads.py", line 198 in _deadlock\n'
        f'  File "/w{threads_py}", line 148 in _thread_main\n'
        '  File "/usr/lib/python3/threading.py", line 1002 in _bootstrap\n'
        "Current thread 0x02 (most recent call first):\n"
        f'  File "/w{threads_py}", line 235 in run_threads\n'
        '  File "/w/harness/run/worker.py", line 211 in drive\n'
    )
    found = stacks.stepping(dump)
    assert len(found) == 1 and "_deadlock" in next(iter(found)), found


SPIN = (
    "import os, sys; os.sched_setaffinity(0, {int(sys.argv[1])}); print('ready', flush=True)\n"
    "while True: pass"
)


@pytest.mark.process
def test_a_starved_busy_process_is_busy_not_idle() -> None:
    """Two spinning processes on one core each get about half of it: by CPU time alone (0.5
    core, below RUN_IDLE_CORES) a starved compile would look idle beside a thread waiting for
    it, and be called a stall (CI, a compiled CPU run on a loaded 2-core box). Its demand, CPU
    time plus run-queue time, is a whole core."""
    core = min(os.sched_getaffinity(0))
    procs = [_child(SPIN, str(core)) for _ in range(2)]
    try:
        pid = procs[0].pid
        stat = Path(f"/proc/{pid}/stat")
        t0, cpu0, demand0 = (
            time.monotonic(),
            stall._ticks(stat, (11, 12)),
            stall.demand_seconds([pid]),
        )
        time.sleep(2.0)
        cpu1, demand1 = stall._ticks(stat, (11, 12)), stall.demand_seconds([pid])
        elapsed = time.monotonic() - t0
        cpu = (cpu1 - cpu0) / stall._TICK / elapsed
        demand = (demand1 - demand0) / elapsed
    finally:
        _end(*procs)
    assert cpu < stall.RUN_IDLE_CORES, cpu  # half a core or less: "idle" by CPU time
    assert demand > 0.9 > stall.RUN_IDLE_CORES, (cpu, demand)


@pytest.mark.process
@pytest.mark.parametrize("launch", ["fork", "fresh"])
def test_a_dump_or_give_up_signal_at_a_childs_first_instant_does_not_kill_it(
    tmp_path: Path, launch: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The watch may signal a child before its interpreter has run a line (a tiny timeout, a
    slow start): a real-time signal's default action would kill it (exit -37). The runner
    starts it with both blocked (a forked one inherits them blocked from its launcher); the
    worker unblocks them once ignored or armed."""
    monkeypatch.setenv("RACEGATE_LAUNCHER", launch)
    from racegate.harness.run import cache_state, runner
    from tests.fault_kit import fault_scenario

    scenario = fault_scenario("ok")
    root = cache_state.private_dir(tmp_path / "root")
    env, _ = runner.child_env(scenario, root, uuid.uuid4().hex)
    (spec,) = runner.child_specs(scenario, tmp_path)
    proc, how = runner.start_child(spec, tmp_path / "run", env)
    assert how.startswith(launch), how
    try:
        proc.send_signal(lifeline.DUMP_SIGNAL)  # at once: the child is still starting
        proc.send_signal(lifeline.GIVE_UP_SIGNAL)
        assert proc.wait(timeout=120) == 0, (tmp_path / "run" / "stderr.txt").read_text()[-2000:]
    finally:
        proc.kill()
    assert (tmp_path / "run" / "result.json").is_file()
