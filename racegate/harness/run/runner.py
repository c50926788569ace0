"""Run a scenario in fresh child processes and collect the evidence of what happened.

Owns isolation (one new process per run, per device for `processes`, forked from its
environment's launcher or a fresh interpreter: racegate.harness.run.launcher; a private 0700
root for every cache and temp dir), timeouts with a stack dump, cache-state priming, and leaving
nothing behind (no process, no run dir). It decides nothing: racegate.harness.judge.decide turns the
`RunEvidence` into an outcome and a record.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from racegate.harness.run import (
    activity,
    cache_state,
    code_root,
    launcher,
    lifeline,
    pidns,
    private_root,
    stacks,
    stall,
)
from racegate.harness.run.child_spec import ChildSpec, Mode, StartGate
from racegate.harness.run.protocol import (
    CacheDeleted,
    CacheEvidence,
    ChildEvidence,
    ChildReport,
    ProgressEvent,
    ProtocolError,
    RunEvidence,
    ThreadActivity,
    WatchEvidence,
)
from racegate.harness.scenario import env_names, versions
from racegate.harness.scenario.spec import Scenario
from racegate.harness.scenario.vocab import injected_slowdown

TAIL_BYTES = 64 * 1024  # of a child's stderr kept as evidence; the rest stays on disk
STACKS_BYTES = 4 * 1024 * 1024  # faulthandler caps each dump (100 frames × 100 threads)


def child_env(scenario: Scenario, root: Path, run_id: str) -> tuple[dict[str, str], dict[str, str]]:
    """The child's environment, and the user's values it overrode (variable → value)."""
    private = cache_state.private_env(root) | private_root.bytecode_env()
    env = dict(os.environ) | private
    env["PYTHONPATH"] = code_root.pythonpath(current=env.get("PYTHONPATH"))
    env["PYTHONUNBUFFERED"] = "1"
    env[lifeline.RUN_MARKER] = run_id
    env[env_names.RUNNER_PID] = str(os.getpid())
    if scenario.uses_cuda:
        env.setdefault(pidns.SWITCH, pidns.GPU)  # no PID namespace: CUDA fails in one (pidns)
    else:
        # One compile worker: a subprocess pool costs more than it saves on a 2-core CI box.
        env.setdefault("TORCHINDUCTOR_COMPILE_THREADS", "1")
    return env, cache_state.overridden(private, private_root.user_environ())


def tail(path: Path, limit: int = TAIL_BYTES) -> str:
    """The last `limit` bytes of `path`, read by seeking (a child may write gigabytes)."""
    try:
        with path.open("rb") as fh:
            fh.seek(0, os.SEEK_END)
            fh.seek(max(0, fh.tell() - limit))
            return fh.read().decode(errors="replace")
    except FileNotFoundError:
        return ""


def oom_kill_count() -> int | None:
    """This cgroup's count of processes the kernel's OOM killer killed (cgroup v2), if readable."""
    with contextlib.suppress(OSError, ValueError, IndexError):
        rel = Path("/proc/self/cgroup").read_text().splitlines()[0].split(":", 2)[2]
        events = Path("/sys/fs/cgroup") / rel.lstrip("/") / "memory.events"
        for line in events.read_text().splitlines():
            key, value = line.split()
            if key == "oom_kill":
                return int(value)
    return None


# Process groups of children still running and the runs they belong to, so an interrupted
# parent can take them down with it.
LIVE_CHILDREN: set[int] = set()
LIVE_RUNS: set[str] = set()
STOPPING = threading.Event()  # set when the parent is shutting down: start no new child


def kill_live_children() -> None:
    STOPPING.set()
    for pgid in list(LIVE_CHILDREN):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pgid, signal.SIGKILL)
    LIVE_CHILDREN.clear()
    for run_id in list(LIVE_RUNS):
        lifeline.kill_run(run_id)


atexit.register(kill_live_children)


Child = subprocess.Popen[bytes] | launcher.Forked  # a run's child process, as the runner waits


def start_child(spec: ChildSpec, run_dir: Path, env: dict[str, str]) -> tuple[Child, str]:
    """Start a run's worker: forked from its environment's launcher, else a fresh interpreter;
    with how it started ("fork", or "fresh: why": the record's `launch`)."""
    cache_state.private_dir(run_dir)
    spec.write(run_dir)
    if STOPPING.is_set():
        raise RuntimeError("racegate is shutting down: no new run is started")
    module = spec.scenario.workload.partition(":")[0]
    forked, why = launcher.LAUNCHERS.start(run_dir, env, module)
    if forked is not None:
        LIVE_CHILDREN.add(forked.pid)
        return forked, launcher.FORK
    # Output goes straight to files; the runner only ever reads their tails. The stall
    # watch's signals are blocked until the worker has set its handlers.
    with (
        (run_dir / "stdout.txt").open("wb") as out,
        (run_dir / "stderr.txt").open("wb") as err,
        lifeline.run_signals_blocked(),
    ):
        proc = subprocess.Popen(
            [sys.executable, "-m", "racegate.harness.run.worker", str(run_dir)],
            env=env,
            cwd=code_root.child_cwd(),
            stdout=out,
            stderr=err,
            start_new_session=True,  # a timeout kills the whole process group
        )
    lifeline.LIVE_POPENS.add(proc.pid)
    LIVE_CHILDREN.add(proc.pid)
    return proc, f"{launcher.FRESH}: {why}"


def _read_report(run_dir: Path) -> tuple[ChildReport | None, str | None]:
    path = run_dir / "result.json"
    if not path.exists():
        return None, None
    try:
        return ChildReport.from_json(path.read_text()), None
    except (ValueError, TypeError, KeyError) as exc:  # JSONDecodeError and ProtocolError too
        return None, f"result.json unreadable: {exc}"


def _read_progress(run_dir: Path) -> tuple[ProgressEvent, ...]:
    path = run_dir / "progress.jsonl"
    if not path.exists():
        return ()
    events = []
    with path.open() as fh:
        for line in fh:
            # A torn last line is what a killed child leaves; the judge sees the rest.
            with contextlib.suppress(ValueError, TypeError, ProtocolError):
                events.append(ProgressEvent.from_line(line))
    return tuple(events)


STOP_GRACE_S = 10.0  # a stalled child's time to give up its threads and write its report


def wait_all(
    procs: list[Child],
    t0: float,
    timeout_s: float,
    watch: stall.StallWatch,
    workers: dict[int, int],
) -> float | None:
    """Wait until every child exits, the run stalls, or its timeout passes (children still
    alive then are the caller's to kill). Returns how long the run had stalled, if it did.
    `workers`: each child's (Popen) pid → its worker's pid (racegate.harness.run.pidns)."""
    deadline = t0 + timeout_s
    try:
        while live := [p for p in procs if p.poll() is None]:
            now = time.monotonic()
            if now >= deadline:
                return None
            stalled = watch.sample([workers[p.pid] for p in live], now)
            if stalled is not None:
                for p in live:  # give up your threads, write your report (worker.py)
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(workers[p.pid], lifeline.GIVE_UP_SIGNAL)
                end = min(deadline, now + STOP_GRACE_S)
                for p in live:
                    with contextlib.suppress(subprocess.TimeoutExpired):
                        p.wait(timeout=max(0.0, end - time.monotonic()))
                return stalled
            with contextlib.suppress(subprocess.TimeoutExpired):
                live[0].wait(timeout=min(0.25, max(0.0, deadline - now)))
    except BaseException:
        for p in procs:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(p.pid, signal.SIGKILL)
        raise
    return None


def finish_child(
    proc: Child,
    run_dir: Path,
    t0: float,
    ooms: int | None,
    stalled: bool,
    activity: tuple[ThreadActivity, ...] = (),
    activity_error: str = "",
    worker: tuple[int, str] | None = None,
    launch: str = "",
) -> ChildEvidence:
    """Kill the child if it is still alive (its stacks dumped first), reap its session, read
    what it left. `stalled`: the stall watch stopped the run (a kill then is no timeout).
    `worker`: its worker's pid and containment (racegate.harness.run.pidns); None: the child's
    own."""
    worker_pid, containment = worker or (proc.pid, "")
    killed = proc.poll() is None
    if killed:
        with contextlib.suppress(ProcessLookupError):  # faulthandler there dumps every stack
            os.kill(worker_pid, lifeline.DUMP_SIGNAL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=2.0)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    # Reap what the child left in its session (e.g. inductor compile workers).
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    LIVE_CHILDREN.discard(proc.pid)
    lifeline.LIVE_POPENS.discard(proc.pid)
    after = oom_kill_count()
    report, report_error = _read_report(run_dir)
    return ChildEvidence(
        returncode=proc.returncode,
        timed_out=killed and not stalled,
        oom_kills=None if ooms is None or after is None else after - ooms,
        report=report,
        report_error=report_error,
        progress=_read_progress(run_dir),
        stacks=stacks.dedupe(tail(run_dir / "stacks.txt", STACKS_BYTES)),
        stderr_tail=tail(run_dir / "stderr.txt"),
        wall_s=time.monotonic() - t0,
        activity=activity,
        activity_error=activity_error,
        containment=containment,
        left_in_namespace=tuple(pidns.left_in_namespace(run_dir)),
        launch=launch,
    )


def run_children(
    specs: list[ChildSpec], base: Path, env: dict[str, str], scenario: Scenario
) -> tuple[list[ChildEvidence], WatchEvidence]:
    """Start every child at once (one per device for `processes`), wait for all; what each
    left, and what the stall watch saw of them together."""
    cache_state.private_dir(base, exist_ok=True)
    t0 = time.monotonic()
    ooms = oom_kill_count()
    dirs = [base / f"child{i}" for i in range(len(specs))]
    # The children budget their deadline from this start, not their own (after importing torch,
    # which under load takes seconds): their result must land before the timeout here kills them.
    started = [start_child(s.started_at(t0), d, env) for s, d in zip(specs, dirs, strict=True)]
    procs = [proc for proc, _ in started]
    # Each worker runs in a PID namespace of its own, a grandchild of the runner: signals and
    # /proc looks go to it (its pid as it announced it), the kills to its process group.
    told = {
        p.pid: pidns.await_worker(p, d, t0 + scenario.timeout_s)
        for p, d in zip(procs, dirs, strict=True)
    }
    workers = {pid: worker for pid, (worker, _) in told.items()}
    run_id = env[lifeline.RUN_MARKER]
    forked = [p.pid for p in procs if isinstance(p, launcher.Forked)]
    watch = stall.StallWatch(
        stall_s=scenario.stall_s,
        children={workers[p.pid]: d for p, d in zip(procs, dirs, strict=True)},
        # A forked worker's /proc environ is its launcher's (no run marker): found by its tree.
        pids_of_run=stall.RunProcesses(
            lambda: sorted({*lifeline.processes_of_run(run_id), *stall.descendants(forked)})
        ),
        # Past the children's own deadline their final dumps and the timeout's take over.
        until=t0 + scenario.timeout_s * 0.85,
    )
    # Co-activity is judged only where threads could take turns: one thread's run is left
    # unsampled, so a throughput or A/B run (one thread) shares its host with nothing new.
    sampled = scenario.threads_per_device * len(scenario.devices) > 1
    seen = activity.ActivitySampler(
        {workers[p.pid]: d for p, d in zip(procs, dirs, strict=True)} if sampled else {}, env
    )
    with seen if sampled else contextlib.nullcontext():
        stalled_s = wait_all(procs, t0, scenario.timeout_s, watch, workers)
    stalled = stalled_s is not None
    children = [
        finish_child(
            p,
            d,
            t0,
            ooms,
            stalled,
            seen.traces(workers[p.pid]),
            seen.error or "",
            told[p.pid],
            launch,
        )
        for (p, launch), d in zip(started, dirs, strict=True)
    ]
    late = None
    hung = any(_hung(c) for c in children)
    if not stalled and hung:
        final = {workers[p.pid]: c.stacks for p, c in zip(procs, children, strict=True)}
        late = watch.stalled_through(final, time.monotonic())
    watched = WatchEvidence(
        stalled_s if stalled else late,
        "" if stalled or late is not None else watch.note(time.monotonic()),
        busy_at_end=hung and not stalled and late is None and watch.working is True,
        at_deadline=late is not None,
    )
    return children, watched


def _hung(child: ChildEvidence) -> bool:
    """The child met the timeout, or reported a thread that never finished its steps."""
    return child.timed_out or (
        child.report is not None and not all(t.finished for t in child.report.threads)
    )


def installed_versions() -> dict[str, str]:
    """Versions read by the parent, for runs whose child died before reporting its own."""
    # import_torch: torch.__version__ carries the build tag (+cu130) that the children report
    return {**versions.software(import_torch=True), "source": "parent (child did not report)"}


def child_specs(scenario: Scenario, base: Path) -> list[ChildSpec]:
    """One spec per child: one child for threads; one per thread of it under `processes`."""
    if not scenario.spec.one_process_per_worker:
        return [ChildSpec(scenario, Mode.RUN)]
    per_process = [d for d in scenario.devices for _ in range(scenario.threads_per_device)]
    # Processes start their steps together, as threads do at their barrier.
    gate = StartGate(str(base / "start_gate"), len(per_process))
    return [
        ChildSpec(scenario, Mode.PROCESS, process_devices=(d,), thread_offset=i, start_gate=gate)
        for i, d in enumerate(per_process)
    ]


def _cache_evidence(
    scenario: Scenario, root: Path, prime: ChildEvidence | None, before: int | None,
    children: list[ChildEvidence], prime_watch: WatchEvidence, *, copied: bool = False,
) -> CacheEvidence:  # fmt: skip
    counters: dict[str, int] = {}
    for child in children:
        for k, v in (child.report.cache_counters if child.report else {}).items():
            counters[k] = counters.get(k, 0) + v
    # Under `processes` each process deletes the shared cache at its own first steady step:
    # a later one may find little or nothing left, so the run's deletion is their sum.
    deleted = [d.bytes for c in children for _, d in c.events(CacheDeleted)]
    return CacheEvidence(
        state=str(scenario.cache_state),
        dir=str(root),
        prime=prime,
        bytes_before_run=before,
        counters=counters,
        deleted_bytes=sum(deleted) if deleted else None,
        prime_watch=prime_watch,
        prime_copied=copied and prime is not None,
    )


def _copy_regular(src: str, dst: str) -> None:
    """shutil.copytree's copy_function: regular files only. A socket or FIFO a priming run's
    helpers left in its TMPDIR (multiprocessing's listener, say) is no cache, and copying one
    would raise."""
    if stat.S_ISREG(os.lstat(src).st_mode):
        shutil.copy2(src, dst)


def copy_cache(primed: Path, root: Path) -> None:
    """A primed root's files into a run's own (existing, 0700) root. symlinks=True: a link is
    copied as a link, never followed out of the tree."""
    shutil.copytree(primed, root, symlinks=True, copy_function=_copy_regular, dirs_exist_ok=True)


@dataclass(frozen=True)
class Primed:
    """A compile cache one priming run filled, for the runs of its scenario to copy."""

    root: Path  # the primed root: copied into each run's own root, never run in
    child: ChildEvidence
    watch: WatchEvidence


def _prime(scenario: Scenario, base: Path, root: Path, run_id: str) -> Primed:
    """The priming run of a warm/deleted state, in `root`; its processes gone when it returns."""
    env, _ = child_env(scenario, root, run_id)
    primes, watch = run_children([ChildSpec(scenario, Mode.PRIME)], base / "prime", env, scenario)
    lifeline.kill_run(run_id)
    return Primed(root, primes[0], watch)


class SharedPrimes:
    """One priming run per scenario, shared by all its runs; the primed dirs go on close.

    A warm or deleted run used to prime its own cache first, which made each of them two
    runs' time. The cache one priming run leaves is copied into each run's private root
    instead: every run still starts from a cache of its own in its own 0700 root, and each
    run's record proves its state (a warm run hits and never misses). A copy is
    self-contained: on CPU torch 2.13 a copy hit every entry after the primed root was moved
    away, and opened no file under it (strace; tests/test_cache_states.py checks the hits).
    Thread-safe: runs of one scenario started together wait for its one priming run."""

    def __init__(self, work_dir: Path | None = None, *, keep: bool = False) -> None:
        self._work_dir, self._keep = work_dir, keep
        self._lock = threading.Lock()
        self._primes: dict[str, tuple[threading.Lock, list[Primed]]] = {}
        self._dirs: list[Path] = []

    def get(self, scenario: Scenario) -> Primed:
        key = json.dumps(scenario.to_json(), sort_keys=True)
        with self._lock:
            lock, made = self._primes.setdefault(key, (threading.Lock(), []))
        with lock:  # the first caller primes; the others wait for it
            if not made:
                base = Path(tempfile.mkdtemp(prefix="racegate-prime-", dir=self._work_dir))
                with self._lock:
                    self._dirs.append(base)
                run_id = uuid.uuid4().hex
                LIVE_RUNS.add(run_id)
                try:
                    made.append(
                        _prime(scenario, base, cache_state.private_dir(base / "root"), run_id)
                    )
                finally:
                    lifeline.kill_run(run_id)
                    LIVE_RUNS.discard(run_id)
            return made[0]

    @property
    def made(self) -> int:
        """Priming runs made so far."""
        with self._lock:
            return sum(len(made) for _, made in self._primes.values())

    def close(self) -> None:
        with self._lock:
            dirs, self._dirs = self._dirs, []
        for base in dirs if not self._keep else []:
            shutil.rmtree(base, ignore_errors=True)

    def __enter__(self) -> SharedPrimes:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def collect(
    scenario: Scenario,
    *,
    command: str = "",
    repeat_index: int = 0,
    work_dir: Path | None = None,
    keep: bool = False,
    timing_valid: bool = True,
    primes: SharedPrimes | None = None,
) -> RunEvidence:
    """Run one scenario in fresh processes (after priming the cache if its state asks).

    timing_valid: False when the caller runs other scenarios beside this one (`--jobs`,
    pytest-xdist); the record then counts for its outcome, not its tokens/s. primes: where a
    warm/deleted run copies its primed cache from (one priming run for all the scenario's
    runs); without it the run primes a cache of its own first."""
    started_at = datetime.now(UTC).isoformat(timespec="milliseconds")  # runs are ordered by it
    t0 = time.monotonic()
    lifeline.become_subreaper()
    run_id = uuid.uuid4().hex
    base = Path(tempfile.mkdtemp(prefix="racegate-run-", dir=work_dir))  # 0700, new
    LIVE_RUNS.add(run_id)
    left: list[int] | None = None  # what kill_run found still alive once the children ended
    try:
        root = cache_state.private_dir(base / "root")
        primed = None
        if scenario.cache_state.primed:
            if primes is not None:
                primed = primes.get(scenario)
                copy_cache(primed.root, root)
            else:
                primed = _prime(scenario, base, root, run_id)
        env, overridden = child_env(scenario, root, run_id)
        prime, before, prime_watch = None, None, WatchEvidence()
        if primed is not None:
            prime, prime_watch = primed.child, primed.watch
            before = cache_state.tree_size(root)
        children, watch = run_children(child_specs(scenario, base), base / "run", env, scenario)
        wall_s = time.monotonic() - t0
        # Read only when needed: importing torch here costs seconds.
        parent_versions = {} if any(c.report for c in children) else installed_versions()
        left = lifeline.kill_run(run_id)  # grandchildren in sessions of their own too
        left += lifeline.kill_adopted()  # and what forked workers left (no run marker)
        # And what each worker's PID namespace held when it ended (the kernel killed those).
        left = sorted({*left, *(pid for c in children for pid in c.left_in_namespace)})
        return RunEvidence(
            scenario=scenario.to_json(),
            children=tuple(children),
            cache=_cache_evidence(
                scenario, root, prime, before, children, prime_watch, copied=primes is not None
            ),
            overridden_env=overridden,
            timing_valid=timing_valid,
            command=command,
            repeat_index=repeat_index,
            started_at=started_at,
            wall_s=wall_s,
            parent_versions=parent_versions,
            processes_left=left,
            watch=watch,
            test_slowdown=injected_slowdown(env),
        )
    finally:
        if left is None:  # the run ended early (an error, an interrupt): its processes go too
            lifeline.kill_run(run_id)
        LIVE_RUNS.discard(run_id)
        if not keep:
            shutil.rmtree(base, ignore_errors=True)
