"""Drive replicas from threads under a start schedule (barrier, staggered, recompile).

Owns the per-thread step loop, its timing (device-synchronised), and the events that line
threads up. It never classifies: it reports what each thread did and the error it raised.
"""

from __future__ import annotations

import contextlib
import threading
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace

import torch

from racegate.harness.run import lifeline, schedstat
from racegate.harness.run.protocol import DEADLINE_MARK, Step
from racegate.harness.scenario.vocab import Schedule
from racegate.harness.scenario.workload_api import Replica

_MAX_ERROR_CHARS = 4000
# Set when the runner found the run stalled (racegate.harness.run.stall, via
# lifeline.GIVE_UP_SIGNAL): threads stop stepping and the join stops waiting, so the child reports
# before it is killed.
GIVE_UP = threading.Event()
# Every thread keeps stepping at least this long once all are steady (racegate.harness.judge
# .decide.interleaving needs looks at threads at work in their steps beside each other).
MIN_COMPANY_S = 1.0


@dataclass
class ThreadRun:
    index: int
    device: str
    replica: Replica
    steps: list[Step] = field(default_factory=list)
    error_text: str | None = None
    finished: bool = False
    eager_fallbacks: int = 0


@dataclass
class Plan:
    """What the threads do: a schedule, step counts, the shapes, and the deleted-cache hook."""

    schedule: Schedule
    warmup_steps: int
    steps: int
    shapes: Sequence[int]
    deadline: float  # time.monotonic() after which threads stop stepping
    fail_on_recompile: bool = False
    on_first_steady_step: Callable[[], None] | None = None  # run once by thread 0 (cache delete)
    switch_shape_after_hook: bool = False
    # Company across processes (`processes`): this process's threads all reached their quota
    # (called once), and whether every sibling process has too.
    on_quota: Callable[[], None] | None = None
    siblings_done: Callable[[], bool] | None = None
    # Told the stepping threads' native ids once they all started (the runner's stall watch
    # tells them by id: a thread they start inherits their kernel name).
    on_started: Callable[[list[int]], None] | None = None


def error_chain_text(exc: BaseException) -> str:
    """`Type: message` for the exception and each cause/context, then the traceback tail."""
    parts, seen = [], set()
    cur: BaseException | None = exc
    while cur is not None and id(cur) not in seen:
        seen.add(id(cur))
        parts.append(f"{type(cur).__name__}: {cur}")
        cur = cur.__cause__ or cur.__context__
    tb = "".join(traceback.format_exception(exc))
    return ("\n".join(parts) + "\n--- traceback ---\n" + tb[-_MAX_ERROR_CHARS:])[
        : 2 * _MAX_ERROR_CHARS
    ]


def sync_device(device: str) -> None:
    """Wait for the device's queued work, so a step's wall time is its real time."""
    if device.startswith("cuda"):
        torch.cuda.synchronize(torch.device(device))


def _with_mem(step: Step, device: str) -> Step:
    if not device.startswith("cuda"):
        return step
    peak = int(torch.cuda.max_memory_allocated(torch.device(device)))
    return replace(step, mem_peak=peak)


def planned_shapes(plan: Plan, n: int) -> list[list[int]]:
    """Each of `n` threads' new shapes, in the order it switches to them: under `recompile`
    thread i takes the workload's extra shapes i, i + n, i + 2n, ... (each its own compile; with
    fewer extra shapes than threads, extra shape i mod their number, as one switch); after the
    deleted cache's hook only the first of them; else none."""
    extra = list(plan.shapes[1:])
    if not extra:
        return [[] for _ in range(n)]
    own = (
        [extra[i::n] for i in range(n)]
        if len(extra) >= n
        else [[extra[i % len(extra)]] for i in range(n)]
    )
    if plan.schedule is Schedule.RECOMPILE:
        return own
    if plan.switch_shape_after_hook:
        return [o[:1] for o in own]
    return [[] for _ in range(n)]


class _Coordinator:
    """Events ordering thread starts; each thread sets its `released` when steady or dead."""

    def __init__(self, n: int, plan: Plan) -> None:
        self.plan = plan
        self.barrier = threading.Barrier(n)
        self.released = [threading.Event() for _ in range(n)]  # steady (or dead)
        self.switched = [threading.Event() for _ in range(n)]  # compiled the new shape (or dead)
        # Made a whole step after every thread had switched (or dead): `recompile` threads keep
        # each other company in steady steps once no compile is left (_may_stop).
        self.stepped_after_switch = [threading.Event() for _ in range(n)]
        self.hook_done = threading.Event()
        # The new shapes each thread compiles after its first steady steps, and under
        # `recompile` the turns they take, one compile at a time: thread 0's first, thread 1's
        # first, ..., thread 0's second, ... Each turn is a window in which the other threads
        # run compiled steps beside a compile, so a workload with more shapes than threads
        # gives a run more windows (issue 55: a control that fires every time).
        self.new_shapes = planned_shapes(plan, n)
        self.turns = [
            (i, r)
            for r in range(max((len(s) for s in self.new_shapes), default=0))
            for i in range(n)
            if r < len(self.new_shapes[i])
        ]
        self.turn_of = {turn: k for k, turn in enumerate(self.turns)}  # (thread, r) → its turn
        self.turn_done = [threading.Event() for _ in self.turns]  # that switch made (or dead)
        self.quota_done = [threading.Event() for _ in range(n)]  # did its steps (or dead)
        self._quota_lock = threading.Lock()
        self._quota_told = False
        self.all_steady_at: float | None = None  # when the last thread got steady (monotonic)
        self.all_switched_at: float | None = None  # when the last one compiled its new shape
        # Each stepping thread's CPU clock (time.pthread_getcpuclockid), set as it starts: a
        # step reads every thread's CPU time when its call returns (Step.cpu_at_return).
        self.cpu_clocks: list[int | None] = [None] * n

    def cpu_times(self) -> tuple[float, ...]:
        """Every stepping thread's CPU time now, in slot order; -1 where not readable."""
        out = []
        for clock in self.cpu_clocks:
            try:
                out.append(time.clock_gettime(clock) if clock is not None else -1.0)
            except OSError:  # the thread ended: its clock is gone
                out.append(-1.0)
        return tuple(out)

    def mark_steady(self) -> None:
        """Note when every thread is steady (or dead): the company phase starts then."""
        with self._quota_lock:
            if self.all_steady_at is None and self.all_set(self.released):
                self.all_steady_at = time.monotonic()

    def mark_switched(self) -> None:
        """Note when every thread has compiled its new shape (or died): no compile is left, and
        the company phase of a schedule that compiles after steady steps starts then."""
        with self._quota_lock:
            if self.all_switched_at is None and self.all_set(self.switched):
                self.all_switched_at = time.monotonic()

    def reached_quota(self, i: int) -> None:
        self.quota_done[i].set()
        with self._quota_lock:
            if self.all_set(self.quota_done) and not self._quota_told:
                self._quota_told = True
                if self.plan.on_quota is not None:
                    self.plan.on_quota()

    def all_set(self, events: list[threading.Event]) -> bool:
        return all(e.is_set() for e in events)

    def wait(self, event: threading.Event) -> bool:
        """Wait for `event` until the plan's deadline; False if the deadline passed first."""
        return event.wait(max(0.0, self.plan.deadline - time.monotonic()))


def _thread_main(run: ThreadRun, co: _Coordinator, i: int) -> None:
    """`i` is the thread's slot in this process (run.index is its id across processes)."""
    # For humans (py-spy, top); the stall watch finds this thread by its native id.
    lifeline.name_this_thread(f"{lifeline.THREAD_PREFIX}{run.index}")
    plan = co.plan
    seen_shapes: set[int] = set()
    base_shape = plan.shapes[0]
    if plan.schedule is Schedule.STAGGERED:
        # A later thread on a shape of its own compiles when it starts, while earlier threads
        # are in steady state; on the same shape it would only hit the device's compiled cache.
        base_shape = plan.shapes[i % len(plan.shapes)]
    # Under `recompile` thread i moves to its own new shapes where the workload has enough, so
    # each switch is a fresh compile (a shape another thread compiled first would be a cache hit).
    mine = co.new_shapes[i]
    made = 0  # of its switches
    quota = plan.warmup_steps + plan.steps
    co.cpu_clocks[i] = time.pthread_getcpuclockid(threading.get_ident())
    try:
        if plan.fail_on_recompile:
            # Also set per thread: from torch 2.12 dynamo config is per-thread (DESIGN §3).
            torch.compiler.set_stance("fail_on_recompile")
        co.barrier.wait(timeout=max(1.0, plan.deadline - time.monotonic()))
        staggered = plan.schedule is Schedule.STAGGERED
        if staggered and i > 0 and not co.wait(co.released[i - 1]):
            raise TimeoutError(
                f"{DEADLINE_MARK}: thread {i} never got its turn, thread {i - 1} never got steady"
            )
        done = 0
        while time.monotonic() < plan.deadline and not GIVE_UP.is_set():
            shape = _next_shape(co, i, base_shape, made)
            after_switch = co.all_set(co.switched)
            # Monotonic, not perf_counter: steps of threads in other processes are compared.
            t0, demand0, cpu0 = time.monotonic(), schedstat.demand_s(), time.thread_time()
            result = run.replica.step(shape)
            returned, cpu_now = time.monotonic(), co.cpu_times()
            sync_device(run.device)
            t1, demand1 = time.monotonic(), schedstat.demand_s()
            # What this thread itself ran (or was ready to) of the step: a step spent waiting
            # for a lock held by another thread demands nothing (recorded: decide.demand_shares).
            demand = demand1 - demand0 if demand0 is not None and demand1 is not None else None
            compiled = shape not in seen_shapes
            step = Step(
                shape, t0, t1, int(result.tokens), compiled, None, demand, cpu0, returned, cpu_now
            )
            run.steps.append(step if run.device == "cpu" else _with_mem(step, run.device))
            seen_shapes.add(shape)
            done += 1
            if done == plan.warmup_steps + 1:
                run.eager_fallbacks = run.replica.eager_fallbacks()
                co.released[i].set()
                co.mark_steady()
                if i == 0 and plan.on_first_steady_step is not None:
                    plan.on_first_steady_step()
                    co.hook_done.set()
            if made < len(mine) and shape == mine[made]:
                co.turn_done[co.turn_of[(i, made)]].set()
                made += 1
                if made == len(mine):
                    co.switched[i].set()
                    co.mark_switched()
            if after_switch:
                co.stepped_after_switch[i].set()
            if done == quota:
                co.reached_quota(i)
            if done >= quota and _may_stop(co, i):
                break
        run.eager_fallbacks = run.replica.eager_fallbacks()
        run.finished = done >= quota
        if not run.finished:
            why = "the run stalled" if GIVE_UP.is_set() else "deadline reached"
            run.error_text = f"TimeoutError: {DEADLINE_MARK}: {why} after {done} of {quota} steps"
    except BaseException as exc:
        run.error_text = error_chain_text(exc)
        with contextlib.suppress(Exception):
            run.eager_fallbacks = run.replica.eager_fallbacks()
    finally:
        co.cpu_clocks[i] = None  # its clock dies with it (a later thread may reuse the id)
        for k, (owner, _) in enumerate(co.turns):
            if owner == i:  # its turns left: the threads after it must not wait for them
                co.turn_done[k].set()
        co.released[i].set()
        co.switched[i].set()
        co.mark_switched()
        co.stepped_after_switch[i].set()
        co.reached_quota(i)


def _next_shape(co: _Coordinator, i: int, base_shape: int, made: int) -> int:
    """Thread i's shape for its next step, having made `made` of its switches: its first new
    shape once the deleted cache's hook ran; under `recompile` its next one when its turn comes
    (every thread steady and the turn before it taken); else the shape it is on."""
    plan, mine = co.plan, co.new_shapes[i]
    current = mine[made - 1] if made else base_shape
    if made == len(mine):
        return current
    if made == 0 and plan.switch_shape_after_hook and co.hook_done.is_set():
        return mine[0]
    if plan.schedule is Schedule.RECOMPILE and co.all_set(co.released):
        k = co.turn_of[(i, made)]
        if k == 0 or co.turn_done[k - 1].is_set():
            return mine[made]
    return current


def _may_stop(co: _Coordinator, i: int) -> bool:
    """A thread keeps stepping until no other thread (here or in a sibling process) still needs
    it as company: every thread's steps must overlap others' steps (the judge checks)."""
    plan = co.plan
    if not co.all_set(co.quota_done):
        return False
    # A steady phase long enough to see the threads interleave, however short their steps:
    # steps of a few ms that hold the GIL take turns at it, and a quota of them lasted 0.1 s
    # (issue 54), too short for the runner's looks to show them working together. Where threads
    # compile a new shape after their first steady steps (`recompile`, the deleted cache) it
    # counts from the last such compile: counted from the first steady step, a CPU compile of
    # seconds used it up, and the steps after the switches were too few to judge (a deleted-
    # cache run read not_concurrent on 2 steady steps a thread, under load).
    switching = len(plan.shapes) > 1 and (
        plan.schedule is Schedule.RECOMPILE or plan.switch_shape_after_hook
    )
    company_from = co.all_switched_at if switching else co.all_steady_at
    if switching and company_from is None:
        return False
    if company_from is not None and time.monotonic() - company_from < MIN_COMPANY_S:
        return False
    if plan.siblings_done is not None and not plan.siblings_done():
        return False
    if plan.schedule is Schedule.STAGGERED:
        return co.all_set(co.released)
    if plan.schedule is Schedule.RECOMPILE and len(plan.shapes) > 1:
        # Not only every switch made: a whole steady step of each thread after the last one.
        # Else a thread's quota could end with its own switch, and its steady steps all fall
        # beside the others' compiles (`warmup_locked` blocks them there, on its lock), leaving
        # the judge's co-activity too few looks at steady beside steady steps (a fresh-clone CI
        # run: 9 and 1, `not_concurrent`: not shown).
        return co.all_set(co.switched) and co.all_set(co.stepped_after_switch)
    return True


def run_threads(
    runs: list[ThreadRun], plan: Plan, join_grace_s: float = 30.0
) -> list[threading.Thread]:
    """Start one thread per run, wait for them; returns threads still alive (hung) at the end."""
    co = _Coordinator(len(runs), plan)
    threads = [
        threading.Thread(
            target=_thread_main,
            args=(r, co, i),
            name=f"{lifeline.THREAD_PREFIX}{r.index}",
            daemon=True,
        )
        for i, r in enumerate(runs)
    ]
    for t in threads:
        t.start()
    if plan.on_started is not None:
        plan.on_started([t.native_id or 0 for t in threads])  # set once start() returned
    # One deadline for the whole join: N hung threads cost the grace once, not N times.
    join_deadline = plan.deadline + join_grace_s
    for t in threads:
        # In slices: a stall (GIVE_UP, set by a signal handler on this thread) ends the wait.
        while t.is_alive() and not GIVE_UP.is_set() and time.monotonic() < join_deadline:
            t.join(min(0.5, max(0.0, join_deadline - time.monotonic())))
    return [t for t in threads if t.is_alive()]
