"""The one decision point: all the evidence of a run → its outcome, the reasons, its RunRecord.

`record_run(evidence)` is pure (no subprocess, no clock, no torch): exit statuses, each thread's
report and steps, cache proof and deleted bytes go in; nothing else assigns or downgrades an
outcome. racegate.harness.doors.pipeline.run_scenario runs a scenario and decides it.
"""

from __future__ import annotations

import bisect
import re
import signal
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, replace

from racegate.harness.judge import metrics, outcomes
from racegate.harness.run.cache_state import proves_warm
from racegate.harness.run.protocol import (
    Built,
    CacheDeleted,
    CacheEvidence,
    ChildEvidence,
    RunEvidence,
    StartGateWait,
    Step,
    ThreadReport,
    WatchEvidence,
)
from racegate.harness.run.record import (
    UNREPORTED_DEVICE,
    CacheProof,
    Hardware,
    RunRecord,
    ThreadRecord,
    Versions,
)
from racegate.harness.scenario.spec import Scenario
from racegate.harness.scenario.vocab import Outcome

N_WINDOWS = 3  # tokens/s is the median of this many steady-state windows
# Each thread's steady steps must have overlapped other threads' steps (compiling or steady)
# for at least this share of its steady time, or the run proves nothing about the race.
CONCURRENCY_SHARE = 0.5


@dataclass(frozen=True)
class Finding:
    """One reason the run is not `ok`: the outcome it implies and what was seen."""

    outcome: Outcome
    reason: str


def _signal_name(signum: int) -> str:
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"


_EXCEPTION_LINE = re.compile(r"^[A-Za-z_][\w.]*(Error|Exception|Exit|Interrupt)\b.*")


def _last_error_line(stderr: str) -> str:
    """The last `Type: message` line of a traceback in the child's stderr ("" if none)."""
    for line in reversed(stderr.splitlines()):
        if _EXCEPTION_LINE.match(line.strip()):
            return line.strip()[:300]
    return ""


NO_WATCH = WatchEvidence()  # nothing seen: no stall


def exit_finding(
    child: ChildEvidence, timeout_s: float, what: str = "child",
    watch: WatchEvidence = NO_WATCH,
) -> Finding | None:  # fmt: skip
    """The process-level finding, or None for a child that exited 0 and reported.

    watch: what the stall watch found of the children run with this one (a stall, early or at
    their deadline)."""
    rc = child.returncode
    if watch.stalled_s is not None:
        when = (
            f"through to its deadline, {child.wall_s:.0f} s into its {timeout_s:g} s timeout"
            if watch.at_deadline
            else f"stopped {child.wall_s:.0f} s into its {timeout_s:g} s timeout"
        )
        return Finding(
            Outcome.HANG,
            f"{what} stalled: every stack unchanged, its processes idle, for "
            f"{watch.stalled_s:.0f} s; {when}",
        )
    if child.timed_out:
        return Finding(Outcome.HANG, f"{what} killed at the {timeout_s:g} s timeout")
    if rc is None:
        return Finding(Outcome.CRASH, f"{what} has no exit status")
    if rc == -signal.SIGKILL:
        if child.oom_kills:
            why = f"killed by the kernel's OOM killer (SIGKILL; cgroup oom_kill +{child.oom_kills})"
            return Finding(Outcome.OOM, f"{what} {why}")
        seen = "unreadable" if child.oom_kills is None else "unchanged"
        why = f"killed by SIGKILL (cgroup oom_kill count {seen}: not the OOM killer)"
        return Finding(Outcome.CRASH, f"{what} {why}")
    # A crashed child's own last words: the tail of its stderr, where the error is.
    tail = f"; stderr: {child.stderr_tail[-500:]}" if child.stderr_tail.strip() else ""
    if rc < 0:
        return Finding(Outcome.CRASH, f"{what} killed by {_signal_name(-rc)}{tail}")
    last = _last_error_line(child.stderr_tail)
    if rc > 0:
        found = outcomes.classify_error(last)
        outcome = Outcome.OOM if found is Outcome.OOM else Outcome.CRASH
        return Finding(outcome, f"{what} exit code {rc}" + (f": {last}" if last else "") + tail)
    if child.report is None:
        why = child.report_error or "no result.json"
        return Finding(Outcome.CRASH, f"{what} exited 0 without a result ({why})")
    return None


def thread_record(report: ThreadReport, compiled: bool, quota: int) -> ThreadRecord:
    """One thread's record. `quota`: its steps (warm-up + steady); a thread that says it
    finished with fewer did not do what was asked, and is never `ok`."""
    steps = report.steps
    error_text = report.error_text
    if not error_text and report.finished and len(steps) < quota:
        error_text = f"RuntimeError: reported finished after {len(steps)} of {quota} steps"
    outcome = outcomes.classify_thread(
        error_text=error_text,
        finished=report.finished,
        eager_fallbacks=report.eager_fallbacks,
        compiled=compiled,
    )
    return ThreadRecord(
        index=report.index,
        device=report.device,
        outcome=str(outcome),
        steps_done=len(steps),
        error=error_text.splitlines()[0] if error_text else None,
        error_text=error_text,
        eager_fallbacks=report.eager_fallbacks,
        compile_s=steps[0].seconds if steps else None,
        step_s=[s.seconds for s in steps],
        shapes=[s.shape for s in steps],
        span=(steps[0].start, steps[-1].end) if steps else None,
        step_demand_s=[s.demand_s for s in steps],
    )


def steady_steps(report: ThreadReport, warmup_steps: int) -> list[Step]:
    return [
        s
        for n, s in enumerate(report.steps)
        if metrics.is_steady(n, s.compiled_shape, warmup_steps)
    ]


def overlap_shares(
    reports: list[ThreadReport],
    warmup_steps: int,
    steps: int,
    hooks: Sequence[tuple[float, float]] = (),
    looks: Sequence[_Looks | None] = (),
    clocks: Sequence[_Readings] = (),
) -> list[float | None]:
    """Per thread: share of its steady time during which another thread was inside a step, or
    inside one of the run's `hooks` (the deleted state's cache deletion, which thread 0 runs
    between two of its steps while the others step on: their steps then have company, as the
    sampler's looks see it running; a deletion on a loaded host can outlast another thread's
    steady quota: a fresh-clone CI run read 24% for `tiny per_device deleted`).

    A thread's own steps count up to the quota it was asked for (warm-up + steps): past it, it
    only keeps the others company until they have theirs, and its last such step may run alone.

    Where the runner's looks read the threads' CPU times (`looks`, per thread), another
    thread's step counts as company only from the last look that found it not yet at work in
    it (parked on a lock or an event at its start: its CPU time under PROGRESS_S past the
    step's start), and from the last reading of its own clock at a step's return of its process
    (`clocks`) that found its CPU time not moved PARKED_CPU_S since the step began: a thread
    parked in its first step while this one does all of its steps kept it no company the race
    needs. The clocks need no sampler: a forked run's threads stepped before the runner's
    sampler had its first look on a loaded 2-core box, and a thread parked through the other's
    whole quota counted as company (`serial` 1 ms read ok). The thread's own steps count
    whole: a production strategy
    that serialises part of its step (a lock around its compiled forward) waits inside its own
    steps while the others work beside it.
    """
    seen = list(looks) or [None] * len(reports)
    read = list(clocks) or [[] for _ in reports]
    intervals = [
        [_at_work_span(s, lk, rd) for s in r.steps]
        for r, lk, rd in zip(reports, seen, read, strict=True)
    ]
    quota = warmup_steps + steps
    shares = []
    for i, report in enumerate(reports):
        mine = replace(report, steps=report.steps[:quota])
        own = [(s.start, s.end) for s in steady_steps(mine, warmup_steps)]
        others = [iv for j, ivs in enumerate(intervals) if j != i for iv in ivs]
        shares.append(metrics.overlap_share(own, [*others, *hooks]))
    return shares


def _at_work_span(
    step: Step, looks: _Looks | None, readings: _Readings = ()
) -> tuple[float, float]:
    """The step's span from the last look inside its call that found its thread parked in it
    (_parked: on a lock or an event at its start), or the last reading of its clock that found
    its CPU time not moved PARKED_CPU_S since the step began, else from its start."""
    if step.cpu0_s is None:
        return step.start, step.end
    start, end = step.start, _call_end(step)
    if looks is not None:
        times = looks[0]
        for k in range(bisect.bisect_right(times, step.start), len(times)):
            if times[k] >= end:
                break
            if _parked(looks, k, step):
                start = max(start, times[k])
    at = [t for t, _ in readings]
    for k in range(bisect.bisect_right(at, step.start), len(at)):
        t, cpu = readings[k]
        if t >= end:
            break
        if cpu - step.cpu0_s < PARKED_CPU_S:
            start = max(start, t)
    return min(start, step.end), step.end


# A thread whose CPU time moved less than this since its step began, read by its own clock, is
# parked in the step (on a lock or an event): a wait on a futex costs no CPU time, while a
# thread inside its step that waits its turn at the GIL wakes every switch interval to ask.
PARKED_CPU_S = 0.00005
_Readings = Sequence[tuple[float, float]]  # (when, the thread's CPU time then), in time order


def clock_readings(children: tuple[ChildEvidence, ...]) -> list[_Readings]:
    """Per thread (in the judge's order): its own clock as read at every step's return in its
    process (Step.cpu_at_return), in time order; [] where none was read."""
    out: list[_Readings] = []
    for child in children:
        mine = child.threads()
        slots = {r.index: k for k, r in enumerate(sorted(mine, key=lambda r: r.index))}
        for report in mine:
            k = slots[report.index]
            out.append(sorted(
                (_call_end(s), s.cpu_at_return[k])
                for r in mine for s in r.steps
                if len(s.cpu_at_return) == len(mine) and s.cpu_at_return[k] >= 0
            ))  # fmt: skip
    return out


def hook_spans(children: Sequence[ChildEvidence]) -> list[tuple[float, float]]:
    """When each child's cache deletion ran (its `cache_deleted` event: `start` to `at`)."""
    return [(d.start, at) for c in children for at, d in c.events(CacheDeleted) if d.start <= at]


def demand_shares(reports: list[ThreadReport], warmup_steps: int) -> list[float | None]:
    """Per thread: the CPU demand of its steady steps over their wall time (cores: 1.0 = it ran
    or was ready to run for the whole step). None: no steady step, or one without demand.

    Recorded, not judged: threads that take turns under a whole-step lock sum to at most 1 core
    between them, but so does a run that was concurrent only part of its steady time. The Llama
    example (`per_device`, 2 threads, 2-core CPU box, torch 2.13) summed 0.50 + 0.18 = 0.69,
    below a whole-step lock's 0.45 + 0.54 = 0.99 (the fault suite's `serial`, its step's sleep
    made 0.1 s of computing; as it sleeps, 0.01 + 0.01): thread 1 ran 324 steady steps
    at 0.92 beside thread 0's compile, then one steady step waited 60 s (4 s of demand) while
    that compile finished (torch's own compile lock, by the look of it), and that one step
    outweighs the rest. The built-in `tiny` drafter summed 1.5-1.8.
    """
    shares: list[float | None] = []
    for report in reports:
        steady = steady_steps(report, warmup_steps)
        wall = sum(s.seconds for s in steady)
        known = steady and wall > 0 and all(s.demand_s is not None for s in steady)
        shares.append(sum(s.demand_s or 0.0 for s in steady) / wall if known else None)
    return shares


# Of the runner's looks that found a thread running in its steady steps, the share in company
# (metrics.coactivity: not in a stretch alone as long as ALONE_TURN of a turn) must reach this
# for at least one thread. Threads stepping together read 1.00 on a 2-core CPU box, idle and
# beside two spinning processes (36 runs: results/cpu-coactivity), and 0.588-1.000
# on one H200 (`small` and the 8B, 74 clean runs, the best thread of each 0.625 or more:
# results/h200-coactivity); under a whole-step lock 0.00-0.06 (24 runs) and
# 0.00-0.20 (9). At least one thread, not each: a thread's GIL can starve another for a few
# steps (a convoy: the holder gives it up for each torch op and takes it back before the
# waiter wakes), and the holder then runs alone while the waiter, whenever it runs, has company
# (the fault kit's `ok` with 64² ops, idle: 1.00 and 0.31). Under a lock every thread runs alone.
COACTIVE_SHARE = 0.4
# A thread's co-activity must rest on at least this many looks that found it running. By count,
# not by the share of its steady time they cover: on a loaded 2-core box the sampler is starved
# of a core now and then, and the looks it missed are a random sample's gaps (a lock's turns
# do not follow the host's load).
COACTIVITY_LOOKS = 10
# A stretch alone at least this share of a turn long is a turn taken. Under a whole-step lock a
# thread's step lasts its own turn plus its wait for the others' (n threads: a turn is a median
# steady step / n); a GIL hand-over between threads stepping together lasts about its 5 ms
# switch interval, well under half a turn of the cases (2 threads' 0.1 s steps: 25 ms). The
# shortest of the threads' medians, not each thread's own: a thread whose steady steps are
# mostly recompiles or waits (`tiny` cold under a lock, beside two spinners on a 2-core box:
# 1.12 s and 0.03 s steps, median 0.62 s) would take its own 0.03-0.12 s turns for hand-overs
# and read 1.00 (it did, 3 of 6 runs; results/cpu-coactivity).
ALONE_TURN = 0.5


@dataclass(frozen=True)
class Coactivity:
    """One thread's co-activity (racegate.harness.judge.metrics.coactivity), or why there is
    none."""

    share: float | None
    why: str = ""  # when share is None: what was missing


def coactive_shares(children: tuple[ChildEvidence, ...], warmup_steps: int) -> list[Coactivity]:
    """Per thread (in the judge's order: children's threads, each child's in order): of the
    runner's looks that found it running in its steady steps while some other thread was in a
    steady step too, the share in company (metrics.coactivity: not in a stretch alone of at
    least ALONE_TURN of a turn; racegate.harness.run.activity takes the looks).

    Threads taking turns under a whole-step lock share their step spans, so overlap_shares
    passes them; they are never running at once (each works while the others wait on the lock).
    Steady steps on both sides count first, all of them (those kept as company past the quota
    too): a thread compiling on a GPU waits on inductor's worker processes, not running, and a
    thread's steady steps beside it would read as turns taken (one H200, `processes` cold: 0.00
    for the thread whose quota ran during its sibling's compile, 0.61 for the other). Only with
    too few looks there are the others' other steps taken: on a loaded CPU box a thread's steady
    steps can all fall beside another's compile (`make_fx` traces in the thread, running, where
    inductor's GPU compile waits on its workers).
    """
    reports: list[ThreadReport] = []
    traces: list[metrics.Looks | None] = []
    unsampled: list[str] = []
    for child in children:
        mine = child.threads()
        reports += mine
        seen = len(child.activity) == len(mine)
        traces += [(a.times, a.running) for a in child.activity] if seen else [None] * len(mine)
        unsampled += [child.activity_error or "no thread ids reported"] * len(mine)
    steady = [[(s.start, s.end) for s in steady_steps(r, warmup_steps)] for r in reports]
    spans = [[(s.start, s.end) for s in r.steps] for r in reports]
    medians = [statistics.median(e - s for s, e in own) for own in steady if own]
    alone_s = ALONE_TURN * min(medians, default=0.0) / max(1, len(reports))
    out: list[Coactivity] = []
    for i, (own, looks) in enumerate(zip(steady, traces, strict=True)):
        if not own:
            out.append(Coactivity(None, "no steady step"))
            continue
        if looks is None:
            out.append(Coactivity(None, f"it was not looked at ({unsampled[i]})"))
            continue
        others = [t for j, t in enumerate(traces) if j != i and t is not None]
        ran = 0
        for beside in (steady, spans):  # the others' steady steps, then any of their steps
            theirs = [iv for j, ivs in enumerate(beside) if j != i for iv in ivs]
            inside = metrics.intersect(own, theirs)
            share, ran = metrics.coactivity(looks, others, inside, alone_s)
            if ran >= COACTIVITY_LOOKS:
                out.append(Coactivity(share))
                break
        else:
            why = f"{ran} of the runner's looks in its steady time beside others' steps found it"
            more = "steps too short, or a host too loaded for the runner's looks?"
            out.append(Coactivity(None, f"{why} running (needs ≥ {COACTIVITY_LOOKS}: {more})"))
    return out


# Interleaving (issue 54): what "ran together" means for this race. The race needs two threads
# inside their steps at once, each at work there: one compiling (tracing) while another calls
# compiled code. On two cores or on one, under the GIL: short steps that hold the GIL take turns
# at it every few milliseconds, and the runner's looks then find one thread running at a time
# (co-activity 0.17-0.20 on one H100, 8 ms steps, step spans overlapping 95%), yet a thread
# preempted mid-step is inside its step's work while the other steps on. What a lock around the
# whole step (or a thread that starts after the other ended) never shows is a thread that has
# begun its step's own work (its CPU time moved since the step began) while another thread moves
# on in its own step call. Per steady step of each thread, within the workload's step call
# (Step.start to Step.call_end: the harness's wait for the device after it is outside any lock
# the workload holds):
# - at work: a look of the runner found its CPU time at least PROGRESS_S past the step's start
#   (a thread parked on a lock or an event at its step's start has not moved: a few µs);
# - interleaved: after the first such look and before the call returned, another thread's step
#   call returned, or two of the runner's looks inside one of its step calls read its CPU time
#   PROGRESS_S apart.
# The looks read a running thread's CPU time up to a scheduler tick late: they can only miss
# progress, never invent it. A lock's turns still read a few interleaved steps on a loaded host:
# a thread preempted between releasing the lock and its step call's return returns inside the
# other's turn (on a 2-core box beside other work, 1 ms steps under a whole-step lock: 0-12% of
# the steps seen at work; free 1 ms steps 50-70%, 10 ms steps 100%: results/
# concurrency-short-steps). So the rule is a share.
PROGRESS_S = 0.0002
# The run is concurrent when some thread had at least this share of its steady steps seen at
# work interleaved (one thread, not each, for the convoys coactive_shares describes: a starved
# thread is interleaved; the thread that starves it runs alone) ...
INTERLEAVED_SHARE = 0.4
# ... of at least this many steady steps seen at work.
MIN_AT_WORK = 5
# Steps at least this long (the median steady step of the run's threads): the co-activity rule's
# reading holds there, and it too shows threads together. It misreads turns under a whole-step
# lock as company only where the turns are shorter than its looks tell apart (1 ms steps: 0.96-
# 1.00, 10 ms: up to 0.48; results/concurrency-short-steps); at the built-in drafter's steps on a
# loaded 2-core box the interleaving rule alone missed threads that run together (17-28% of the
# steps seen at work, in the race cases of the fresh-clone CI that first ran it).
COACTIVE_TRUSTED_STEP_S = 0.025

# A thread's looks: their times, its CPU time at each, and whether it was running (or ready to
# run: state R) then.
_Looks = tuple[list[float], list[float], list[int]]


@dataclass(frozen=True)
class Interleaving:
    """One thread's steady steps the runner saw it at work in (`at_work`), and of those the
    steps during which another thread moved on (`interleaved`); None where not measured (no
    CPU times in the looks, or none read at its steps' starts)."""

    at_work: int | None
    interleaved: int | None

    @property
    def shown(self) -> bool:
        """Interleaving shown: INTERLEAVED_SHARE of at least MIN_AT_WORK steps seen at work."""
        return _share_shown(self.interleaved, self.at_work, INTERLEAVED_SHARE)


def _share_shown(some: int | None, of: int | None, share: float) -> bool:
    """`some` is at least `share` of `of`, itself at least MIN_AT_WORK steps (None: none)."""
    n, k = of or 0, some or 0
    return n >= MIN_AT_WORK and k >= share * n


NOT_MEASURED = Interleaving(None, None)


def _call_end(step: Step) -> float:
    """When the workload's step call returned (the step's end where not recorded)."""
    return step.call_end if step.call_end is not None else step.end


def cpu_looks(children: tuple[ChildEvidence, ...]) -> list[_Looks | None]:
    """Per thread (in the judge's order): the runner's looks at it that read its CPU time;
    None where the looks read none (a sampler from before, no schedstat)."""
    looks: list[_Looks | None] = []
    for child in children:
        mine = child.threads()
        traced = len(child.activity) == len(mine) and all(a.cpu for a in child.activity)
        for k in range(len(mine)):
            if not traced:
                looks.append(None)
                continue
            a = child.activity[k]
            seen = [x for x in zip(a.times, a.cpu, a.running, strict=False) if x[1] >= 0]
            looks.append(([t for t, _, _ in seen], [c for _, c, _ in seen], [r for *_, r in seen]))
    return looks


def _at_work(looks: _Looks, k: int, step: Step) -> bool:
    """Look k found the thread's CPU time PROGRESS_S past its step's start: at work in it. (Up
    to a tick stale for a running thread: a look can miss work, never invent it.)"""
    cpu0 = step.cpu0_s
    return cpu0 is not None and looks[1][k] - cpu0 >= PROGRESS_S


def _parked(looks: _Looks, k: int, step: Step) -> bool:
    """Look k found the thread parked in its step: neither running nor ready to run, and its
    CPU time not moved PROGRESS_S since the step began (on a lock or an event at its start)."""
    return not looks[2][k] and not _at_work(looks, k, step)


def interleaving(children: tuple[ChildEvidence, ...], warmup_steps: int) -> list[Interleaving]:
    """Per thread (in the judge's order): its interleaved steady steps (the rule above)."""
    reports = [r for child in children for r in child.threads()]
    looks = cpu_looks(children)
    out: list[Interleaving] = []
    for i, report in enumerate(reports):
        mine = looks[i]
        steady = steady_steps(report, warmup_steps)
        if mine is None or not steady or any(s.cpu0_s is None for s in steady):
            out.append(NOT_MEASURED)
            continue
        others = [(list(reports[j].steps), looks[j]) for j in range(len(reports)) if j != i]
        at_work = interleaved = 0
        for step in steady:
            first = _first_at_work(mine, step)
            if first is None:
                continue
            at_work += 1
            end = _call_end(step)
            interleaved += any(_moved_on(st, lk, first, end) for st, lk in others)
        out.append(Interleaving(at_work, interleaved))
    return out


def _first_at_work(looks: _Looks, step: Step) -> float | None:
    """The first look inside the step's call that found its thread at work (_at_work)."""
    times = looks[0]
    end = _call_end(step)
    for k in range(bisect.bisect_right(times, step.start), len(times)):
        if times[k] >= end:
            return None
        if _at_work(looks, k, step):
            return times[k]
    return None


def _moved_on(steps: list[Step], looks: _Looks | None, start: float, end: float) -> bool:
    """Another thread moved on in its own step calls within (start, end): a call of it returned
    there, or two looks inside one of its calls read its CPU time PROGRESS_S apart."""
    returns = [_call_end(s) for s in steps]
    k = bisect.bisect_right(returns, start)
    if k < len(returns) and returns[k] < end:
        return True
    if looks is None:
        return False
    times, cpu, _ = looks
    for step in steps[k:]:  # the calls that end after `start`, up to those that begin at `end`
        if step.start >= end:
            break
        lo = bisect.bisect_left(times, max(start, step.start))
        hi = bisect.bisect_right(times, min(end, _call_end(step)))
        if hi - lo >= 2 and cpu[hi - 1] - cpu[lo] >= PROGRESS_S:
            return True
    return False


# Met at work (issue 54, short steps): the looks above see a step of 1 ms seldom, and a step
# call's return falls in the short window between a look and the call's own end at a rate set
# by the step's length, not by whether the threads run together (one H100, free 1 ms steps:
# 19-35% interleaved, results/concurrency-short-steps). Threads of one process need no looks:
# each step reads every stepping thread's CPU time, exactly, as its call returns
# (Step.cpu_at_return). A thread's steady step is met when, as its call returned, another thread
# of its process was inside a step call of its own (any step: a compile beside steady steps is
# the race), and met at work when that thread's CPU time then was PROGRESS_S past its step's
# start. Under a lock around the whole step the other thread is inside its step only parked on
# the lock, at its start; a thread that starts after the other has done its steps is not inside
# a step while the other returns (the step-overlap rule fails it too).
MET_AT_WORK_SHARE = 0.4


@dataclass(frozen=True)
class Met:
    """One thread's steady steps at whose return another thread of its process was inside a
    step call (`met`), and of those the steps at whose return such a thread was at work in its
    step (`at_work`); None: not measured (no other stepping thread in its process, or a child
    that did not read the clocks)."""

    met: int | None
    at_work: int | None

    @property
    def shown(self) -> bool:
        """Met at work: MET_AT_WORK_SHARE of at least MIN_AT_WORK steps met."""
        return _share_shown(self.at_work, self.met, MET_AT_WORK_SHARE)


NOT_MET = Met(None, None)


def met_at_work(children: tuple[ChildEvidence, ...], warmup_steps: int) -> list[Met]:
    """Per thread (in the judge's order): its steady steps met, and met at work (above)."""
    out: list[Met] = []
    for child in children:
        mine = child.threads()
        slots = {r.index: k for k, r in enumerate(sorted(mine, key=lambda r: r.index))}
        others = {r.index: [x for x in mine if x.index != r.index] for r in mine}
        for report in mine:
            out.append(_met(report, [(slots[o.index], o) for o in others[report.index]], len(mine),
                            warmup_steps))  # fmt: skip
    return out


def _met(report: ThreadReport, others: list[tuple[int, ThreadReport]], n: int, warmup: int) -> Met:
    """One thread's Met against the other threads of its process (each with its clock's slot
    in cpu_at_return; n: the process's stepping threads)."""
    steady = [s for s in steady_steps(report, warmup) if len(s.cpu_at_return) == n]
    if not others or not steady or any(s.call_end is None for s in steady):
        return NOT_MET
    starts = [[s.start for s in o.steps] for _, o in others]
    met = at_work = 0
    for step in steady:
        returned = _call_end(step)
        inside = [
            (_inside(o.steps, begun, returned), step.cpu_at_return[slot])
            for (slot, o), begun in zip(others, starts, strict=True)
        ]
        seen = [(s, cpu) for s, cpu in inside if s is not None and cpu >= 0]
        if seen:
            met += 1
            at_work += any(s.cpu0_s is not None and cpu - s.cpu0_s >= PROGRESS_S for s, cpu in seen)
    return Met(met, at_work)


def _inside(steps: tuple[Step, ...], starts: list[float], t: float) -> Step | None:
    """The step whose call was under way at t (started at or before it, not yet returned);
    starts: the steps' starts."""
    k = bisect.bisect_right(starts, t) - 1
    return steps[k] if k >= 0 and t < _call_end(steps[k]) else None


def steady_step_s(reports: Sequence[ThreadReport], warmup_steps: int) -> float | None:
    """The median length of the threads' steady steps (None: no steady step)."""
    lengths = [s.end - s.start for r in reports for s in steady_steps(r, warmup_steps)]
    return statistics.median(lengths) if lengths else None


def _coactive_shown(
    coactive: Sequence[Coactivity], step_s: float | None, met: Sequence[Met]
) -> bool:
    """The co-activity rule shows the threads together, at steps long enough to trust it
    (COACTIVE_TRUSTED_STEP_S): every thread measured, one at least COACTIVE_SHARE in company;
    only where no thread had another of its process to meet (Met): threads of one process are
    judged by their clocks. A whole-step lock of 10 ms steps on a loaded 2-core box stretched
    its steps to 27 ms (the wait for the lock inside them) and read co-activity 0.46: the rule
    alone called it concurrent (results/concurrency-short-steps/cpu-loaded)."""
    return (
        not _met_measured(met)
        and step_s is not None
        and step_s >= COACTIVE_TRUSTED_STEP_S
        and bool(coactive)
        and all(m.share is not None for m in coactive)
        and any(m.share is not None and m.share >= COACTIVE_SHARE for m in coactive)
    )


def concurrency_findings(
    records: list[ThreadRecord],
    shares: list[float | None],
    coactive: list[Coactivity],
    asked: int,
    interleaved: Sequence[Interleaving] = (),
    step_s: float | None = None,
    met: Sequence[Met] = (),
) -> list[Finding]:
    """A clean thread whose steady steps mostly ran alone (CONCURRENCY_SHARE), or threads none
    of which was seen at work in its steps while another moved on in its own often enough
    (Interleaving.shown: they took turns), make the run `not_concurrent`. Where the
    looks read no CPU times (interleaving not measured), the co-activity rule decides instead:
    a thread whose work beside others' is not shown, or threads none of which ran in company
    (COACTIVE_SHARE)."""
    if asked <= 1 or any(rec.outcome != Outcome.OK for rec in records):
        # One thread races nobody; a thread that failed left the others alone, and its own
        # outcome already says what went wrong.
        return []
    measured = _measured(interleaved, len(records))
    met_shown = any(m.shown for m in met)
    found = []
    for rec, share, co in zip(records, shares, coactive, strict=True):
        seen = "no steady step" if share is None else f"{share:.0%} of its steady time"
        if share is None or share < CONCURRENCY_SHARE:
            found.append(
                Finding(
                    Outcome.NOT_CONCURRENT,
                    f"thread {rec.index}'s steady steps overlapped other threads' steps for "
                    f"{seen} (needs ≥ {CONCURRENCY_SHARE:.0%})",
                )
            )
        elif not measured and not met_shown and co.share is None:
            why = f"thread {rec.index}'s work beside other threads' is not shown: {co.why}"
            found.append(Finding(Outcome.NOT_CONCURRENT, why))
    if found or met_shown:
        return found
    if measured:
        if any(x.shown for x in interleaved) or _coactive_shown(coactive, step_s, met):
            return []
        pairs = zip(records, interleaved, strict=True)
        each = ", ".join(f"thread {r.index} {x.interleaved} of {x.at_work}" for r, x in pairs)
        if not any(x.at_work for x in interleaved):
            why = (
                "the runner's looks never found a thread at work in a steady step (its CPU time "
                f"{PROGRESS_S * 1e3:g} ms past the step's start): steps too short for its looks, "
                "a host too loaded, or threads parked at their steps' start?"
            )
        else:
            why = (
                f"no thread was seen at work in its steady steps while another moved on in its "
                f"own often enough: interleaved steps {each} of those seen at work (needs "
                f"{INTERLEAVED_SHARE:.0%} of ≥ {MIN_AT_WORK} for one thread at least)"
                f"{_met_said(records, met)}: the threads took turns (one lock around every step?)"
            )
        return [Finding(Outcome.NOT_CONCURRENT, why)]
    if _met_measured(met):  # threads of one process: their clocks decide, not co-activity
        why = f"no thread was at work inside its step often enough{_met_said(records, met)}"
        return [Finding(Outcome.NOT_CONCURRENT, f"{why}: the threads took turns")]
    met_shares = [met.share for met in coactive]
    if met_shares and all(m is not None and m < COACTIVE_SHARE for m in met_shares):
        pairs = zip(records, met_shares, strict=True)
        each = ", ".join(f"thread {rec.index} {m:.0%}" for rec, m in pairs)
        why = (
            f"no thread ran in company in its steady steps: of the looks that found a thread "
            f"running, the share not in a turn alone was {each} (needs ≥ {COACTIVE_SHARE:.0%} "
            "for one thread at least): the threads took turns (one lock around every step, or "
            "a thread holding the GIL?)"
        )
        found.append(Finding(Outcome.NOT_CONCURRENT, why))
    return found


def _met_measured(met: Sequence[Met]) -> bool:
    """Some thread had another of its process to meet (its clocks were read)."""
    return any(m.met is not None for m in met)


def _met_said(records: list[ThreadRecord], met: Sequence[Met]) -> str:
    """The met-at-work counts where measured, for a not_concurrent finding's reason."""
    pairs = [(r, m) for r, m in zip(records, met, strict=False) if m.met is not None]
    if not pairs:
        return ""
    each = ", ".join(f"thread {r.index} {m.at_work} of {m.met}" for r, m in pairs)
    return (
        f"; nor another thread of its process at work inside its step when one returned: {each} "
        f"(needs {MET_AT_WORK_SHARE:.0%} of ≥ {MIN_AT_WORK})"
    )


def _measured(interleaved: Sequence[Interleaving], threads: int) -> bool:
    """Interleaving was measured for every thread (else the co-activity rule decides)."""
    return len(interleaved) == threads > 0 and all(x.at_work is not None for x in interleaved)


def concurrent_threads(
    shares: list[float | None],
    coactive: list[Coactivity],
    asked: int,
    interleaved: Sequence[Interleaving] = (),
    step_s: float | None = None,
    met: Sequence[Met] = (),
) -> int:
    """How many threads ran together, by concurrency_findings' rule: a thread whose steady
    steps overlapped others' (CONCURRENCY_SHARE), when some thread interleaved
    (Interleaving.shown; without that measure: with its work beside them shown, when at least one
    thread ran in company, COACTIVE_SHARE); none when all took turns. So a run with no
    not_concurrent finding counts every thread that reported, and an `ok` run, whose threads all
    reported, counts every thread asked for (racegate.harness.run.record.record_rule_broken)."""
    if asked <= 1:
        return min(asked, len(shares))  # one thread races nobody: it ran "together" if it ran
    if any(m.shown for m in met):
        return sum(1 for share in shares if share is not None and share >= CONCURRENCY_SHARE)
    if _measured(interleaved, len(shares)):
        if not any(x.shown for x in interleaved) and not _coactive_shown(coactive, step_s, met):
            return 0
        return sum(1 for share in shares if share is not None and share >= CONCURRENCY_SHARE)
    if _met_measured(met):
        return 0
    if not any(met.share is not None and met.share >= COACTIVE_SHARE for met in coactive):
        return 0
    return sum(
        1
        for share, met in zip(shares, coactive, strict=True)
        if share is not None and share >= CONCURRENCY_SHARE and met.share is not None
    )


def cache_findings(cache: CacheEvidence, scenario: Scenario) -> tuple[CacheProof, list[Finding]]:
    """The record's cache proof, and why a warm or deleted state is not proven (if it isn't)."""
    state = scenario.cache_state
    proof = CacheProof(cache.state, cache.dir, cache.counters, cache.deleted_bytes)
    found: list[Finding] = []
    if cache.prime is not None:
        prime_exit = exit_finding(cache.prime, scenario.timeout_s, "priming run", cache.prime_watch)
        proof = replace(
            proof,
            prime_ok=prime_exit is None,
            prime_counters=cache.prime.report.cache_counters if cache.prime.report else {},
            bytes_before_run=cache.bytes_before_run,
            prime_copied=cache.prime_copied,
            prime_error=None if prime_exit is None else cache.prime.stderr_tail[-1000:],
        )
    if state.spec.proven_by_hits:
        proof = replace(proof, proven_warm=proves_warm(cache.counters))
    if not scenario.spec.compiled:
        return proof, []  # nothing compiles: there is no cache state to prove
    if state.primed and not proof.prime_ok:
        found.append(
            Finding(Outcome.OTHER_ERROR, f"cache state {str(state)!r} not reached: priming failed")
        )
    elif state.spec.proven_by_hits and not proof.proven_warm:
        why = f"cache state {str(state)!r} not proven: counters {cache.counters}"
        found.append(Finding(Outcome.OTHER_ERROR, why))
    elif state.spec.deleted_mid_run and not cache.deleted_bytes:
        why = f"cache state {str(state)!r} not reached: nothing was deleted mid-run"
        found.append(Finding(Outcome.OTHER_ERROR, why))
    return proof, found


def _unreported(
    child: ChildEvidence, reported: int, exit_found: Finding | None
) -> list[ThreadRecord]:
    """Placeholders for the threads a child that died before reporting never reported."""
    if exit_found is None or child.report is not None:
        return []
    built = child.threads_built() or 1
    return [
        ThreadRecord(index=k, device="?", outcome=str(exit_found.outcome))
        for k in range(reported, built)
    ]


def _throughput(
    scenario: Scenario, children: tuple[ChildEvidence, ...]
) -> tuple[list[list[tuple[float, int]]], float, dict[str, list[int]], list[str]]:
    """Per-thread steady (seconds, tokens), analytic FLOP/s, per-device memory, flops problems.

    A thread's `mem_peak` is its process's allocator peak on that device, so the threads of
    one child share one series (its first thread's on the device is taken). Children are
    separate allocators on the same device: their series add up, step by step, to the
    device's (`processes` puts two on one GPU, and taking one child's series alone halved it).
    A sum of peaks bounds the device's peak from above, which a memory gate wants.
    """
    steady_by_thread, problems = [], []
    per_child: list[dict[str, list[int]]] = []
    flops_rate = 0.0
    for child in children:
        per_shape = child.report.flops_per_step if child.report else {}
        if child.report and child.report.flops_error:
            problems.append(f"flops_per_step raised: {child.report.flops_error}")
        mine: dict[str, list[int]] = {}
        for report in child.threads():
            steady = steady_steps(report, scenario.warmup_steps)
            steady_by_thread.append([(s.seconds, s.tokens) for s in steady])
            secs = sum(s.seconds for s in steady)
            if secs > 0 and all(per_shape.get(str(s.shape)) for s in steady):
                flops_rate += sum(per_shape[str(s.shape)] or 0.0 for s in steady) / secs
            if report.device not in mine:
                memory = [(s.shape, s.mem_peak) for s in steady]
                mine[report.device] = metrics.base_shape_memory(memory)
        per_child.append(mine)
    mem_by_device: dict[str, list[int]] = {}
    for device in dict.fromkeys(d for mine in per_child for d in mine):
        series = [mine[device] for mine in per_child if device in mine]
        # Step by step over the steps every child has (a child's series may be shorter).
        mem_by_device[device] = [sum(peaks) for peaks in zip(*series, strict=False)]
    return steady_by_thread, flops_rate, mem_by_device, problems


def _children(
    ev: RunEvidence, scenario: Scenario
) -> tuple[list[Finding], list[ThreadReport], list[ThreadRecord], list[ThreadRecord]]:
    """(each child's exit finding, the thread reports, one record per report in order, a
    placeholder record for each thread a child built but never reported)."""
    compiled = scenario.spec.compiled  # a fallback only exists if compiled
    findings: list[Finding] = []
    reported: list[ThreadRecord] = []
    placeholders: list[ThreadRecord] = []
    reports: list[ThreadReport] = []
    for child in ev.children:
        exit_found = exit_finding(child, scenario.timeout_s, watch=ev.watch)
        findings += [exit_found] if exit_found else []
        mine = list(child.threads())
        reports += mine
        quota = scenario.warmup_steps + scenario.steps
        reported += [thread_record(r, compiled, quota) for r in mine]
        placeholders += _unreported(child, len(mine), exit_found)
    return findings, reports, reported, placeholders


def _memory_growths(scenario: Scenario, mem_by_device: dict[str, list[int]]) -> list[float]:
    # Peak memory is per device: with several threads on one device it moves with how their
    # steps interleave, so flatness is judged only where one thread owns its device.
    if scenario.threads_per_device != 1:
        return []
    growths = [metrics.memory_growth(s, 0) for s in mem_by_device.values()]
    return [g for g in growths if g is not None]


def _what_happened(t: ThreadRecord) -> str:
    """A failed thread's own part of the reason: its error, its fallbacks, or its missing steps."""
    if t.error:
        return t.error
    if t.outcome == Outcome.SILENT_FALLBACK:
        n = t.eager_fallbacks
        return f"its compiled kernel fell back to eager {n} time{'s' * (n != 1)}"
    return "did not finish its steps"


def _notes(
    findings: list[Finding], reported: list[ThreadRecord], ev: RunEvidence, outcome: Outcome,
    too_slow: bool,
) -> list[str]:  # fmt: skip
    """Every outcome comes with its reason: the run's findings, then each failed thread's."""
    failed = [t for t in reported if t.outcome != Outcome.OK]
    notes = [f.reason for f in findings] + [
        f"thread {t.index} {t.outcome}: {_what_happened(t)}" for t in failed[:4]
    ]
    if len(failed) > 4:
        notes.append(f"and {len(failed) - 4} more thread(s) not ok")
    if outcome in (Outcome.HANG, Outcome.TIMEOUT):
        # A hang the stall watch did not call: what it saw, so a missed stall can be told.
        notes += [ev.watch.note] if ev.watch.note else []
        if too_slow:
            notes.append("busy at the deadline: too slow for its timeout, no deadlock shown")
    if ev.processes_left:
        notes.append(f"killed {len(ev.processes_left)} process(es) the run left behind")
    alone = sum(1 for c in ev.children for _, d in c.events(StartGateWait) if not d.met)
    if alone:  # the concurrency check judges what followed; this says why it may have failed
        notes.append(f"{alone} process(es) started without their siblings (start gate timed out)")
    return notes


def record_run(ev: RunEvidence) -> RunRecord:
    """The run's record: every thread classified, every finding folded into one outcome."""
    scenario = Scenario.from_json(ev.scenario)
    findings, reports, reported, placeholders = _children(ev, scenario)
    threads = reported + placeholders
    asked = scenario.threads_per_device * len(scenario.devices)
    if not threads:
        findings.append(Finding(Outcome.CRASH, "no thread reported"))
    elif len(reports) != asked and not findings:
        few = "only " if len(reports) < asked else ""
        why = f"{few}{len(reports)} of {asked} threads reported"
        findings.append(Finding(Outcome.OTHER_ERROR, why))
    hooks = hook_spans(ev.children)
    looks = cpu_looks(ev.children)
    clocks = clock_readings(ev.children)
    shares = overlap_shares(reports, scenario.warmup_steps, scenario.steps, hooks, looks, clocks)
    for rec, share in zip(reported, shares, strict=True):
        rec.overlap_share = share
    coactive = coactive_shares(ev.children, scenario.warmup_steps)
    interleaved = interleaving(ev.children, scenario.warmup_steps)
    met = met_at_work(ev.children, scenario.warmup_steps)
    step_s = steady_step_s(reports, scenario.warmup_steps)
    findings += concurrency_findings(reported, shares, coactive, asked, interleaved, step_s, met)
    demands = demand_shares(reports, scenario.warmup_steps)
    each = zip(reported, demands, coactive, interleaved, met, strict=True)
    for rec, demand, co, il, m in each:
        rec.demand_share, rec.coactive_share = demand, co.share
        rec.steps_at_work, rec.steps_interleaved = il.at_work, il.interleaved
        rec.steps_met, rec.steps_met_at_work = m.met, m.at_work
    cache, cache_found = cache_findings(ev.cache, scenario)
    findings += cache_found
    steady, flops_rate, mem_by_device, flops_problems = _throughput(scenario, ev.children)
    findings += [Finding(Outcome.OTHER_ERROR, p) for p in flops_problems]
    for rec, rows in zip(reported, steady, strict=True):
        rec.tokens_per_s = metrics.rate(rows)
    window_rates = metrics.aggregate_windows(steady, N_WINDOWS)
    tps, spread = metrics.median_and_spread(window_rates)

    thread_outcomes = [Outcome(t.outcome) for t in threads]
    seen = [*thread_outcomes, *(f.outcome for f in findings)]
    outcome = outcomes.worst(seen or [Outcome.CRASH])
    # Too slow, not failed, only when nothing but hangs failed: a thread that hit the race
    # beside one still compiling at the deadline is the race.
    only_hangs = outcome is Outcome.HANG and all(o in (Outcome.OK, Outcome.HANG) for o in seen)
    too_slow = only_hangs and ev.watch.busy_at_end
    if too_slow:  # overload, not a hang: only a stall (or a deadline nobody saw at work) is one
        outcome = Outcome.TIMEOUT
        for t in threads:
            t.outcome = str(Outcome.TIMEOUT) if t.outcome == Outcome.HANG else t.outcome
        thread_outcomes = [Outcome(t.outcome) for t in threads]
    concurrent = concurrent_threads(shares, coactive, asked, interleaved, step_s, met)
    growths = _memory_growths(scenario, mem_by_device)
    first = next((c.report for c in ev.children if c.report), None)
    built = (d.hardware for c in ev.children for _, d in c.events(Built))
    said = (first.hardware if first else next(built, None)) or {"device_name": UNREPORTED_DEVICE}
    hw = Hardware.from_json(said, "the child's hardware")
    notes = _notes(findings, reported, ev, outcome, too_slow)
    stacks = "\n".join(c.stacks for c in ev.children if c.stacks.strip())
    return RunRecord(
        scenario=scenario,
        outcome=str(outcome),
        outcome_counts=outcomes.count(thread_outcomes),
        threads=threads,
        threads_asked=asked,
        threads_concurrent=concurrent,
        versions=Versions.from_json(first.versions if first else ev.parent_versions),
        hardware=hw,
        tokens_per_s=tps,
        tokens_per_s_spread=spread,
        tokens_per_s_windows=window_rates,
        compile_s=(first.warmup_s if first else None)
        if scenario.spec.warmed_up
        else max((t.compile_s for t in threads if t.compile_s is not None), default=None),
        peak_mem_bytes={d: max(s) for d, s in mem_by_device.items() if s},
        mem_growth=max(growths) if growths else None,
        mem_series=mem_by_device,
        flops_per_s=flops_rate or None,
        mfu=metrics.mfu(flops_rate or None, hw.device_name, len(scenario.devices)),
        cache=cache,
        detail="; ".join(notes) or None,
        stacks=stacks or None,
        stalled_s=ev.watch.stalled_s,
        busy_at_deadline=True if too_slow else None,
        wall_s=ev.wall_s,
        started_at=ev.started_at,
        repeat_index=ev.repeat_index,
        command=ev.command,
        timing_valid=ev.timing_valid,
        overridden_env=ev.overridden_env,
        test_slowdown=ev.test_slowdown,
        containment=ev.containment,
        launch=ev.launch,
    )
