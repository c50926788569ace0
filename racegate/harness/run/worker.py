"""The isolated child process: build replicas, warm up if asked, drive threads, write a report.

Run as `python -m racegate.harness.run.worker RUN_DIR` by racegate.harness.run.runner, with its spec
in RUN_DIR/scenario.json (racegate.harness.run.child_spec). Thread reports are appended to
RUN_DIR/progress.jsonl as they land and the whole run goes to RUN_DIR/result.json
(racegate.harness.run.protocol), so a crash later in the run loses nothing already known.
"""

from __future__ import annotations

# First, before torch is imported (seconds, during which a dying runner must take us along).
import os
import signal
import sys
from pathlib import Path

from racegate.harness.run import lifeline, pidns
from racegate.harness.scenario import env_names


def prologue(run_dir: Path) -> None:
    """A worker's first acts, fresh or forked (racegate.harness.run.launcher): die with the
    runner, arm the runner's signals only once handled, enter a PID namespace of its own."""
    runner = os.environ.get(env_names.RUNNER_PID)
    lifeline.die_with_parent(int(runner) if runner and runner.isdigit() else None)
    # The runner's stall watch signals (racegate.harness.run.stall) must never kill a child
    # that has not armed their handlers yet: ignored until then.
    signal.signal(lifeline.DUMP_SIGNAL, signal.SIG_IGN)
    signal.signal(lifeline.GIVE_UP_SIGNAL, signal.SIG_IGN)
    lifeline.unblock_run_signals()  # the runner started us with them blocked
    # Every process this run starts lives in a PID namespace of its own, killed with us
    # (pidns): from here on this is the worker inside it, or (where none could be made) the
    # same process.
    pidns.announce(run_dir, pidns.enter(run_dir))


if __name__ == "__main__":  # not when a test or the launcher imports this module
    prologue(Path(sys.argv[1]))

import faulthandler  # noqa: E402
import time  # noqa: E402
import traceback  # noqa: E402
from dataclasses import dataclass  # noqa: E402
from typing import IO  # noqa: E402

import torch  # noqa: E402

from racegate.harness.run import cache_state, threads  # noqa: E402
from racegate.harness.run.child_spec import ChildSpec, ChildSpecError, Mode, StartGate  # noqa: E402
from racegate.harness.run.files import write_whole  # noqa: E402
from racegate.harness.run.protocol import (  # noqa: E402
    Built,
    CacheDeleted,
    ChildReport,
    EventData,
    ProgressEvent,
    StartGateWait,
    Stepping,
    ThreadReport,
)
from racegate.harness.scenario.spec import Scenario  # noqa: E402
from racegate.harness.scenario.versions import hardware, software  # noqa: E402
from racegate.harness.scenario.vocab import Strategy  # noqa: E402
from racegate.harness.scenario.workload_api import (  # noqa: E402
    Workload,
    WorkloadSpec,
    check_replica,
    load_workload,
    no_exit,
)


def _mark(gate: StartGate, what: str, me: int) -> None:
    folder = Path(gate.dir)
    folder.mkdir(mode=0o700, exist_ok=True)
    (folder / f"{what}-{me}").touch()


def _count(gate: StartGate, what: str) -> int:
    return sum(1 for _ in Path(gate.dir).glob(f"{what}-*"))


def wait_for_siblings(gate: StartGate, me: int, until: float) -> bool:
    """The `processes` strategy's start barrier: announce this process ready, wait for all.

    On files, not multiprocessing.Barrier: the processes are independent `python -m
    racegate.harness.run.worker` children of the runner, with no multiprocessing parent to share
    one. The same folder holds `done-<i>` marks, so each process keeps stepping until all are done.
    True when every sibling arrived before `until` (time.monotonic()).
    """
    _mark(gate, "ready", me)
    while True:
        if _count(gate, "ready") >= gate.parties:
            return True
        if time.monotonic() >= until or threads.GIVE_UP.is_set():
            return False
        time.sleep(0.005)


def runner_start(t0: float | None, timeout_s: float) -> float:
    """When the runner started this child (its spec's runner_t0, time.monotonic(); Linux's
    clock is system-wide), so the time spent importing torch counts against the run's budget;
    this process's own start when the spec has none or a value from another clock."""
    now = time.monotonic()
    return t0 if t0 is not None and 0 <= now - t0 < timeout_s else now


def thread_report(run: threads.ThreadRun) -> ThreadReport:
    return ThreadReport(
        index=run.index,
        device=run.device,
        finished=run.finished,
        error_text=run.error_text,
        eager_fallbacks=run.eager_fallbacks,
        steps=tuple(run.steps),
    )


@dataclass
class Child:
    """This process's run: its folder, scenario, spec, and the stacks file faulthandler writes."""

    run_dir: Path
    spec: ChildSpec
    scenario: Scenario
    stacks: IO[str]
    started: float  # the runner's start (monotonic)

    @property
    def deadline(self) -> float:
        return self.started + self.scenario.timeout_s * 0.9

    def emit(self, data: EventData) -> None:
        with (self.run_dir / "progress.jsonl").open("a") as fh:
            fh.write(ProgressEvent(time.monotonic(), data).to_line())
            fh.flush()
            os.fsync(fh.fileno())

    def final_dump(self) -> None:
        """Every thread's stack, once: the watchdog and requested dumps are disarmed first so no
        two dumps ever write the file at once."""
        faulthandler.cancel_dump_traceback_later()
        faulthandler.unregister(lifeline.DUMP_SIGNAL)
        signal.signal(lifeline.DUMP_SIGNAL, signal.SIG_IGN)  # a late request must not kill us
        faulthandler.dump_traceback(file=self.stacks, all_threads=True)
        self.stacks.flush()


def arm_stack_dumps(run_dir: Path, started: float, timeout_s: float) -> IO[str]:
    # The stall watch's "give up" (racegate.harness.run.stall): stop waiting for hung threads,
    # report.
    signal.signal(lifeline.GIVE_UP_SIGNAL, lambda *_: threads.GIVE_UP.set())
    stacks = (run_dir / "stacks.txt").open("w")
    faulthandler.enable(file=stacks, all_threads=True)  # a segfault leaves every stack too
    # On DUMP_SIGNAL (the stall watch, the runner's hang timeout) write every thread's stack.
    faulthandler.register(lifeline.DUMP_SIGNAL, file=stacks, all_threads=True)
    # And from faulthandler's own watchdog thread just before the runner's deadline: it needs
    # no signal delivery and no GIL, so it works even if torch deadlocks holding the GIL.
    faulthandler.dump_traceback_later(
        max(0.1, started + timeout_s * 0.97 - time.monotonic()), exit=False, file=stacks
    )
    return stacks


def build_runs(child: Child, workload: Workload) -> list[threads.ThreadRun]:
    sc, spec = child.scenario, child.spec
    strategy = str(sc.strategy)
    if sc.spec.one_process_per_worker and strategy not in workload.strategies():
        # `processes` is harness-level: a workload that does not list it runs per_device in each.
        strategy = str(Strategy.PER_DEVICE)
    # A prime builds one replica per device: compiled artifacts are keyed by device.
    per_device = 1 if spec.mode in (Mode.PRIME, Mode.PROCESS) else sc.threads_per_device
    runs: list[threads.ThreadRun] = []
    for device in spec.devices:
        for _ in range(per_device):
            index = spec.thread_offset + len(runs)
            kwargs = {}
            if sc.target_devices:  # the incident's topology: the target on other GPUs
                target = sc.target_devices[sc.devices.index(device) % len(sc.target_devices)]
                kwargs["target_device"] = torch.device(target)
            with no_exit(sc.workload, "make_replica()"):  # exiting is a failure, one line
                replica = workload.make_replica(
                    torch.device(device), str(strategy), seed=sc.seed + index, **kwargs
                )
            check_replica(replica, sc.workload)
            runs.append(threads.ThreadRun(index, device, replica))
    return runs


def warm_up(runs: list[threads.ThreadRun], shapes: list[int]) -> float:
    """The `warmup` strategy: every replica steps every shape once, in this one thread."""
    t0 = time.perf_counter()
    for run in runs:
        for shape in shapes:
            run.replica.step(shape)
        threads.sync_device(run.device)
    torch.compiler.set_stance("fail_on_recompile")
    return time.perf_counter() - t0


def prime(child: Child, runs: list[threads.ThreadRun], shapes: list[int]) -> float:
    """Fill the private cache: every replica steps every shape once (a warm/deleted state)."""
    seconds = warm_up(runs, shapes)
    torch.compiler.set_stance("default")
    for run in runs:
        run.finished = True
    return seconds


def drive(child: Child, runs: list[threads.ThreadRun], shapes: list[int]) -> float | None:
    """A measured run: warm up if the strategy does, then the threads under the schedule."""
    sc, spec = child.scenario, child.spec
    warmup_s = None
    if sc.spec.warmed_up:
        warmup_s = warm_up(runs, shapes)  # reported in ChildReport.warmup_s

    def delete_cache() -> None:
        root = Path(os.environ["TORCHINDUCTOR_CACHE_DIR"]).parent
        start = time.monotonic()  # the event's `at` is its end: the judge counts the span
        child.emit(CacheDeleted(bytes=cache_state.delete_cache(root), start=start))

    is_deleted = sc.cache_state.spec.deleted_mid_run
    gate = spec.start_gate
    plan = threads.Plan(
        schedule=sc.schedule,
        warmup_steps=sc.warmup_steps,
        steps=sc.steps,
        shapes=shapes,
        deadline=child.deadline,
        fail_on_recompile=sc.spec.warmed_up,
        on_first_steady_step=delete_cache if is_deleted else None,
        switch_shape_after_hook=is_deleted,
        on_quota=(lambda: _mark(gate, "done", spec.thread_offset)) if gate else None,
        siblings_done=(lambda: _count(gate, "done") >= gate.parties) if gate else None,
        # The runner reads /proc/<pid>/task/<tid>: ids as it sees them, not the namespace's.
        on_started=lambda tids: child.emit(Stepping(tuple(pidns.outer_tids(tids)))),
    )
    if gate:
        # Half the time left at most: a sibling that died before the gate must not turn this
        # process's run into a hang (the concurrency check still sees a late start).
        limit = time.monotonic() + (child.deadline - time.monotonic()) / 2
        met = wait_for_siblings(gate, spec.thread_offset, limit)
        child.emit(StartGateWait(met))
    grace = min(30.0, sc.timeout_s * 0.05)  # deadline (0.9) + grace stays inside the timeout
    if threads.run_threads(runs, plan, join_grace_s=grace):
        child.final_dump()
    for run in runs:
        child.emit(thread_report(run))
    return warmup_s


def flops(workload: Workload, shapes: list[int]) -> tuple[dict[str, float | None], str | None]:
    """The workload's analytic FLOPs per shape; a raising workload still gets its report out."""
    try:
        return {str(s): workload.flops_per_step(s) for s in shapes}, None
    except Exception as exc:
        return {}, "".join(traceback.format_exception_only(exc)).strip()


def main(run_dir: Path) -> int:
    try:
        spec = ChildSpec.read(run_dir)
    except ChildSpecError as exc:  # one line: the runner files it with the child's stderr
        print(f"racegate worker: {exc}", file=sys.stderr)
        return 2
    scenario = spec.scenario
    started = runner_start(spec.runner_t0, scenario.timeout_s)
    stacks = arm_stack_dumps(run_dir, started, scenario.timeout_s)
    child = Child(run_dir, spec, scenario, stacks, started)
    if scenario.switch_interval_s:
        sys.setswitchinterval(scenario.switch_interval_s)
    workload = load_workload(
        WorkloadSpec(scenario.workload, dict(scenario.extra, preset=scenario.preset))
    )
    with no_exit(scenario.workload, "shapes()"):
        shapes = list(workload.shapes())
    runs = build_runs(child, workload)
    # The hardware goes out now too: a run that hangs later writes no report to carry it.
    machine = hardware(spec.devices)
    child.emit(Built(len(runs), machine))
    # Read now, not after the threads: a run whose threads hung has only the join's grace left
    # to write its report before the runner kills it, and the reading walks package metadata.
    installed = software()
    if spec.mode is Mode.PRIME:
        warmup_s: float | None = prime(child, runs, shapes)
    else:
        warmup_s = drive(child, runs, shapes)
    per_shape, flops_error = flops(workload, shapes)
    report = ChildReport(
        threads=tuple(thread_report(r) for r in runs),
        versions=installed,
        hardware=machine,
        cache_counters=cache_state.cache_counters(),
        warmup_s=warmup_s,
        flops_per_step=per_shape,
        flops_error=flops_error,
    )
    faulthandler.cancel_dump_traceback_later()
    write_whole(run_dir / "result.json", report.to_json())
    stacks.flush()
    # Hung threads cannot be joined; leave without running interpreter teardown on them.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def forked_main(run_dir: Path) -> int:
    """A worker forked by racegate.harness.run.launcher, its environment and files set."""
    prologue(run_dir)
    return main(run_dir)


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1])))
