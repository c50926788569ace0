"""record_run(): the one decision point, tested as a pure function on hand-made evidence."""

from __future__ import annotations

import signal
from dataclasses import replace

import pytest

from racegate.harness.judge.decide import (
    COACTIVE_SHARE,
    COACTIVE_TRUSTED_STEP_S,
    CONCURRENCY_SHARE,
    INTERLEAVED_SHARE,
    MET_AT_WORK_SHARE,
    MIN_AT_WORK,
    Coactivity,
    Interleaving,
    Met,
    concurrency_findings,
    concurrent_threads,
    record_run,
)
from racegate.harness.judge.metrics import coactivity, merge, overlap_share
from racegate.harness.run.protocol import (
    Built,
    CacheDeleted,
    CacheEvidence,
    ChildEvidence,
    ChildReport,
    ProgressEvent,
    RunEvidence,
    StartGateWait,
    Step,
    ThreadActivity,
    ThreadReport,
    WatchEvidence,
)
from racegate.harness.run.record import RunRecord, ThreadRecord, Versions
from racegate.harness.scenario.spec import make_scenario
from racegate.harness.scenario.vocab import Outcome

FAULT = "tests.fault_workloads:make_workload"


def steps(*spans: tuple[float, float], busy: float | None = 1.0) -> tuple[Step, ...]:
    """A compiling first step (shape 0) then steady steps, at the given (start, end) times, each
    demanding `busy` of its time in CPU (None: no schedstat)."""
    return tuple(
        Step(0, a, b, 10, n == 0, None, None if busy is None else busy * (b - a))
        for n, (a, b) in enumerate(spans)
    )


def thread(
    i: int, spans: list[tuple[float, float]], error: str | None = None, busy: float | None = 1.0
) -> ThreadReport:
    return ThreadReport(i, "cpu", error is None, error, 0, steps(*spans, busy=busy))


TOGETHER = [[(0, 1), (1, 2), (2, 3)], [(0, 1.1), (1.1, 2.1), (2.1, 3.1)]]
APART = [[(0, 1), (1, 2), (2, 3)], [(3, 4), (4, 5), (5, 6)]]


def trace(
    work: list[tuple[float, float, float]], until: float, every: float = 0.005, tid: int = 1
) -> ThreadActivity:
    """The runner's looks at one thread every `every` s from 0 to `until`: inside each
    (start, end, share) of `work` it is found running at that share of the looks, spread
    evenly (the first of each 10 looks' `10 · share`), and never outside."""
    times = [k * every for k in range(int(until / every) + 1)]
    running = [
        int(any(a <= t < b and k % 10 < round(10 * c) for a, b, c in work))
        for k, t in enumerate(times)
    ]
    return ThreadActivity(tid, tuple(times), tuple(running))


AUTO = "from the steps"  # child(): each thread ran at its steps' `busy` share (1: unknown)


def looked_at(threads: list[ThreadReport]) -> tuple[ThreadActivity, ...]:
    until = max(s.end for t in threads for s in t.steps) + 0.01
    return tuple(
        trace([(s.start, s.end, (s.demand_s or s.seconds) / s.seconds) for s in t.steps], until)
        for t in threads
    )


def child(
    threads: list[ThreadReport] | None,
    *,
    rc: int | None = 0,
    timed_out: bool = False,
    oom_kills: int | None = 0,
    stderr: str = "",
    flops_error: str | None = None,
    progress: tuple[ProgressEvent, ...] = (),
    activity: tuple[ThreadActivity, ...] | str = AUTO,
) -> ChildEvidence:
    report = None
    if threads is not None:
        said = {"torch": "x", "transformers": "y"}
        report = ChildReport(
            tuple(threads), said, {"device_name": "cpu"}, {}, None, {}, flops_error
        )
    if activity == AUTO:
        activity = looked_at(threads) if threads else ()
    return ChildEvidence(
        rc, timed_out, oom_kills, report, None, progress, "", stderr, 1.0, activity
    )


PARENT_VERSIONS = {"torch": "p", "transformers": "q"}


def evidence(*children: ChildEvidence, threads: int = 2, cache: str = "cold", **kw) -> RunEvidence:
    sc = make_scenario(
        preset="ok", strategy=kw.pop("strategy", "eager"), workload=FAULT, steps=2,
        warmup_steps=1, threads_per_device=threads, cache_state=cache, timeout_s=30,
    )  # fmt: skip
    cache_ev = CacheEvidence(cache, "/x", kw.pop("prime", None), None, kw.pop("counters", {}),
                             kw.pop("deleted", None),
                             kw.pop("prime_watch", WatchEvidence()))  # fmt: skip
    return RunEvidence(
        sc.to_json(), tuple(children), cache_ev, {}, True, "", 0, "", 1.0, PARENT_VERSIONS, [],
        kw.pop("watch", WatchEvidence()),
    )  # fmt: skip


def ok_threads(spans=TOGETHER) -> list[ThreadReport]:
    return [thread(i, s) for i, s in enumerate(spans)]


def test_clean_concurrent_run_is_ok() -> None:
    rec = record_run(evidence(child(ok_threads())))
    assert rec.outcome == "ok", rec.detail
    assert rec.threads_concurrent == 2
    assert all(t.overlap_share and t.overlap_share > 0.9 for t in rec.threads)


def test_exit_after_every_thread_reported_is_a_crash() -> None:
    """A non-zero exit after every thread reported used to reach only `detail`, the run `ok`."""
    for rc, words in ((7, "exit code 7"), (-signal.SIGSEGV, "SIGSEGV")):
        rec = record_run(evidence(child(ok_threads(), rc=rc)))
        assert rec.outcome == "crash" and words in (rec.detail or ""), rec.detail


def test_clean_exit_without_a_result_is_a_crash() -> None:
    built = ProgressEvent(0.0, Built(2, {"device_name": "cpu"}))
    rec = record_run(evidence(child(None, progress=(built,))))
    assert rec.outcome == "crash" and "without a result" in (rec.detail or "")
    assert len(rec.threads) == 2 and rec.hardware.device_name == "cpu"
    assert rec.versions == Versions(torch="p", transformers="q")  # the parent's reading


def test_serial_steps_are_not_concurrent() -> None:
    rec = record_run(evidence(child(ok_threads(APART))))
    assert rec.outcome == "not_concurrent"
    assert "thread 0's steady steps overlapped other threads' steps for 0%" in rec.detail
    assert rec.threads_concurrent == 0


# Under one lock around every step: each step waits half its time for the other thread's work
# and works the other half, so the step spans overlap (TOGETHER) but the work never meets.
TURNS = [[(k, k + 0.5, 1.0) for k in range(3)], [(k + 0.5, k + 1.0, 1.0) for k in range(3)]]


def test_threads_that_take_turns_are_not_concurrent() -> None:
    """A workload whose steps all hold one lock was `ok`, its steps overlapping
    by their times. The runner's looks never find its threads running at once."""
    looks = tuple(trace(w, 3.2, tid=k) for k, w in enumerate(TURNS))
    rec = record_run(evidence(child(ok_threads(), activity=looks)))
    assert rec.outcome == "not_concurrent", rec.detail
    # Each 0.5 s turn is a stretch alone of at least half a turn (1 s steps, 2 threads: 0.25 s).
    assert "the share not in a turn alone was thread 0 0%, thread 1 0%" in rec.detail
    assert f"(needs ≥ {COACTIVE_SHARE:.0%} for one thread at least)" in rec.detail
    assert "the threads took turns" in rec.detail
    assert [t.coactive_share for t in rec.threads] == [0.0, 0.0]
    assert all(t.overlap_share and t.overlap_share > 0.9 for t in rec.threads)  # spans overlap
    assert rec.threads_concurrent == 0
    together = tuple(trace([(0, 3.1, 1.0)], 3.2, tid=k) for k in range(2))
    rec = record_run(evidence(child(ok_threads(), activity=together)))
    assert rec.outcome == "ok" and rec.threads[0].coactive_share == pytest.approx(1.0)
    # Thread 1 found running at 6 of each 10 looks (waiting for the GIL the rest): thread 0's
    # stretches alone last 4 looks (15 ms), hand-overs, not turns. At one instant (any stretch
    # alone a turn) 0.6 of thread 0's looks had company.
    partial = (trace([(0, 3.1, 1.0)], 3.2, tid=0), trace([(0, 3.1, 0.6)], 3.2, tid=1))
    rec = record_run(evidence(child(ok_threads(), activity=partial)))
    assert rec.outcome == "ok", rec.detail
    assert [t.coactive_share for t in rec.threads] == [1.0, 1.0]
    mine, theirs = ((t.times, t.running) for t in partial)
    assert coactivity(mine, [theirs], [(0, 3.1)], alone_s=0)[0] == pytest.approx(0.6)


def test_turns_beside_a_thread_of_long_steps_are_still_turns() -> None:
    """`tiny` cold under one lock, on a loaded 2-core box: thread 0's steady steps were mostly
    recompiles (2 s; median 1.2 s), its turns between them 0.2 s. Judged by its own median (a
    turn 0.3 s) those turns read as hand-overs and the run passed 3 times in 6; a turn is
    judged by the shortest median (thread 1's 0.4 s steps)."""
    spans = [
        [(0, 1), (1, 3), (3, 3.4), (3.4, 3.8), (3.8, 5.8)],
        [(0, 3.2), (3.2, 3.6), (3.6, 4.0)],
    ]
    ran = [  # the lock's holder runs, the other waits
        [(0, 3.0, 1.0), (3.2, 3.4, 1.0), (3.6, 3.8, 1.0), (4.0, 5.8, 1.0)],
        [(3.0, 3.2, 1.0), (3.4, 3.6, 1.0), (3.8, 4.0, 1.0)],
    ]
    looks = tuple(trace(w, 5.9, tid=k) for k, w in enumerate(ran))
    rec = record_run(evidence(child(ok_threads(spans), activity=looks)))
    assert rec.outcome == "not_concurrent", rec.detail
    assert [t.coactive_share for t in rec.threads] == [0.0, 0.0]


def test_one_thread_in_company_is_enough() -> None:
    """A GIL convoy: thread 1 holds the GIL for 2.4 s and runs alone while thread 0 waits; when
    thread 0 runs, thread 1 does too. Under a lock neither has company; here one has."""
    hog = trace([(0, 3.1, 1.0)], 3.2, tid=1)
    starved = trace([(0, 0.3, 1.0), (2.7, 3.1, 1.0)], 3.2, tid=0)
    rec = record_run(evidence(child(ok_threads(), activity=(starved, hog))))
    assert rec.outcome == "ok", rec.detail
    assert rec.threads[0].coactive_share == 1.0
    # In company 0.3 s of the 1.9 s both were steady (1.1-3.0 s): alone, below the bar.
    assert rec.threads[1].coactive_share == pytest.approx(0.16, abs=0.01)


def test_steady_steps_beside_a_compile_are_not_judged_as_turns() -> None:
    """One H200, `processes` cold: thread 0's quota of steady steps ran while thread 1 compiled
    (waiting on inductor's workers, not running), then thread 0 kept it company. Only the time
    both were steady counts: 0.00 became its company steps' co-activity."""
    spans = [
        [(0, 1), (1, 1.5), (1.5, 2), (2, 2.5), (2.5, 3), (3, 3.5)],
        [(0, 2), (2, 2.5), (2.5, 3)],
    ]
    busy = [[(0, 1, 1.0), (1, 3.5, 1.0)], [(0, 2, 0.0), (2, 3, 1.0)]]
    looks = tuple(trace(w, 3.6, tid=k) for k, w in enumerate(busy))
    rec = record_run(evidence(child(ok_threads(spans), activity=looks)))
    assert rec.outcome == "ok", rec.detail
    assert [t.coactive_share for t in rec.threads] == [pytest.approx(1.0), pytest.approx(1.0)]


def test_co_activity_not_shown_fails_closed() -> None:
    """No looks (a child that never named its threads), a runner that looked too seldom, or
    threads never found running: not shown to have worked together, never `ok`."""
    cases = {
        (): "it was not looked at",
        tuple(trace([(0, 3.1, 1.0)], 3.2, every=0.3, tid=k) for k in range(2)): "6 of the "
        "runner's looks in its steady time beside others' steps found it running (needs ≥ 10: "
        "steps too short",
        tuple(trace([], 3.2, tid=k) for k in range(2)): "0 of the runner's looks",
    }
    for looks, words in cases.items():
        rec = record_run(evidence(child(ok_threads(), activity=looks)))
        assert rec.outcome == "not_concurrent" and words in rec.detail, rec.detail
        assert "thread 1's work beside other threads' is not shown" in rec.detail


def test_a_starved_sampler_still_tells_turns_from_work_done_together() -> None:
    """Looks 0.07 s apart (a sampler starved of a core), each 0.5 s turn's hand-over inside the
    gap: each look is an instant, so turns still read as turns and threads that both worked 1."""
    turns = tuple(trace(w, 3.2, every=0.07, tid=k) for k, w in enumerate(TURNS))
    rec = record_run(evidence(child(ok_threads(), activity=turns)))
    assert rec.outcome == "not_concurrent", rec.detail
    assert all(t.coactive_share is not None and t.coactive_share < 0.15 for t in rec.threads)
    both = tuple(trace([(0, 3.1, 1.0)], 3.2, every=0.07, tid=k) for k in range(2))
    rec = record_run(evidence(child(ok_threads(), activity=both)))
    assert rec.outcome == "ok", rec.detail


def test_coactivity_counts_the_looks_that_found_both_running() -> None:
    mine = ((0.0, 1.0, 2.0, 3.0), (1, 1, 0, 1))
    other = ((0.0001, 1.0001, 2.0001, 3.0001), (0, 1, 1, 1))
    assert coactivity(mine, [other], [(0, 4)], alone_s=0) == (pytest.approx(2 / 3), 3)
    assert coactivity(mine, [other], [(0, 1)], alone_s=0) == (0.0, 1)  # only its 1st is inside
    assert coactivity(mine, [], [(0, 4)], alone_s=0) == (0.0, 3)  # nobody else: always alone
    never_ran = (mine[0], (0, 0, 0, 0))
    assert coactivity(never_ran, [other], [(0, 4)], alone_s=0) == (None, 0)
    # A look at the other thread 5 ms away is another look: not evidence for this one.
    late = ((0.005, 1.005, 2.005, 3.005), (1, 1, 1, 1))
    assert coactivity(mine, [late], [(0, 4)], alone_s=0) == (0.0, 3)
    # Alone for 3 s from its first look to its last: one turn, unless a turn is longer.
    assert coactivity(mine, [], [(0, 4)], alone_s=3.0) == (0.0, 3)
    assert coactivity(mine, [], [(0, 4)], alone_s=3.01) == (1.0, 3)
    # A look with company ends a stretch alone: the first look alone, then 2 s with company.
    assert coactivity(mine, [other], [(0, 4)], alone_s=0.5) == (1.0, 3)


def test_each_steps_cpu_demand_and_each_threads_share_are_recorded() -> None:
    """Recorded for reading (GPU cells): a thread's steady share is its steps' demand over their
    time; a thread with a step without demand (no schedstat) has no share."""
    threads = [thread(0, TOGETHER[0], busy=0.5), thread(1, TOGETHER[1], busy=None)]
    rec = record_run(evidence(child(threads)))
    assert rec.outcome == "ok", rec.detail  # recorded, not judged (decide.demand_shares)
    assert rec.threads[0].step_demand_s == pytest.approx([0.5, 0.5, 0.5])
    assert rec.threads[0].demand_share == pytest.approx(0.5)
    assert rec.threads[1].step_demand_s == [None, None, None]
    assert rec.threads[1].demand_share is None


def test_a_single_thread_is_exempt_from_concurrency() -> None:
    rec = record_run(evidence(child([thread(0, APART[0])]), threads=1))
    assert rec.outcome == "ok" and rec.threads_concurrent == 1


def test_share_below_the_bar_names_the_thread_and_the_share() -> None:
    # Thread 1's two steady steps: one overlaps thread 0's steps, one runs alone (50% - ε).
    spans = [[(0, 1), (1, 2), (2, 2.9)], [(0, 1), (1, 2), (2.9, 4)]]
    rec = record_run(evidence(child(ok_threads(spans))))
    assert rec.outcome == "not_concurrent", rec.detail
    assert "thread 1's" in rec.detail and f"needs ≥ {CONCURRENCY_SHARE:.0%}" in rec.detail


@pytest.mark.parametrize(
    ("oom_kills", "outcome", "words"),
    [(1, "oom", "OOM killer"), (0, "crash", "SIGKILL"), (None, "crash", "unreadable")],
)
def test_sigkill_is_oom_only_with_the_oom_killers_count(oom_kills, outcome, words) -> None:
    rec = record_run(evidence(child(None, rc=-signal.SIGKILL, oom_kills=oom_kills)))
    assert rec.outcome == outcome and words in rec.detail, rec.detail


def test_memory_errors_are_oom() -> None:
    rec = record_run(
        evidence(child([thread(0, TOGETHER[0], "MemoryError"), thread(1, TOGETHER[1])]))
    )
    assert rec.outcome == "oom"
    tail = "Traceback (most recent call last):\n  File x\nMemoryError\nsome later warning\n"
    rec = record_run(evidence(child(None, rc=1, stderr=tail)))
    assert rec.outcome == "oom" and "MemoryError" in rec.detail


def test_a_timeout_is_a_hang_whatever_the_threads_say() -> None:
    rec = record_run(evidence(child(ok_threads(), rc=-signal.SIGKILL, timed_out=True)))
    assert rec.outcome == "hang" and "timeout" in rec.detail


def test_the_runs_stall_is_each_childs_hang_and_a_missed_stall_says_what_the_watch_saw() -> None:
    """The stall watch looks at all of a run's children together: its call (or its note)
    is the run's, told once, and every child it stopped is a hang for it."""
    stopped = child([thread(0, TOGETHER[0], "TimeoutError: racegate deadline: the run stalled")])
    ev = evidence(stopped, stopped, watch=WatchEvidence(stalled_s=12.4))
    rec = record_run(ev)
    assert rec.outcome == "hang", rec.detail
    assert (
        rec.detail.count("child stalled: every stack unchanged, its processes idle, for 12 s;") == 2
    )
    assert "killed at the" not in rec.detail
    note = "stall watch: last CPU 0.90 cores, 3 dump(s) taken"
    timed = child(ok_threads(), rc=-signal.SIGKILL, timed_out=True)
    rec = record_run(evidence(timed, timed, watch=WatchEvidence(note=note)))
    assert rec.outcome == "hang" and rec.detail.count(note) == 1, rec.detail
    assert "stalled" not in rec.detail and rec.stalled_s is None
    # Without the watch's call, a child that exited 0 with its report is not a hang.
    assert record_run(evidence(child(ok_threads()))).outcome == "ok"


def test_a_stalled_priming_run_leaves_the_cache_state_unreached() -> None:
    prime = child([thread(0, TOGETHER[0])], rc=0)
    ok = evidence(
        child(ok_threads()), cache="warm", prime=prime, counters={"fxgraph_hit": 1},
        strategy="per_device",
    )  # fmt: skip
    stalled = replace(ok, cache=replace(ok.cache, prime_watch=WatchEvidence(stalled_s=9.0)))
    assert record_run(ok).cache.prime_ok is True
    rec = record_run(stalled)
    assert rec.cache.prime_ok is False and "priming failed" in rec.detail, rec.detail


def test_flops_failure_is_not_ok() -> None:
    rec = record_run(evidence(child(ok_threads(), flops_error="ValueError: no")))
    assert rec.outcome == "other_error" and "flops_per_step raised" in rec.detail


def test_missing_threads_are_not_ok() -> None:
    rec = record_run(evidence(child(ok_threads()[:1])))
    assert rec.outcome == "other_error" and "only 1 of 2 threads reported" in rec.detail


def test_no_thread_at_all_is_a_crash() -> None:
    assert record_run(evidence(child([]))).outcome == "crash"


def test_unproven_cache_states_are_never_ok() -> None:
    good_prime = child([thread(0, [(0, 1)])])
    run = child(ok_threads())
    kw = dict(strategy="per_device")
    warm = record_run(evidence(run, cache="warm", prime=good_prime, counters={}, **kw))
    assert warm.outcome == "other_error" and "not proven" in warm.detail
    hits = {"inductor.fxgraph_cache_hit": 2}
    warm = record_run(evidence(run, cache="warm", prime=good_prime, counters=hits, **kw))
    assert warm.outcome == "ok", warm.detail
    bad_prime = replace(good_prime, returncode=-signal.SIGSEGV)
    warm = record_run(evidence(run, cache="warm", prime=bad_prime, counters=hits, **kw))
    assert warm.outcome == "other_error" and "priming failed" in warm.detail
    deleted = record_run(evidence(run, cache="deleted", prime=good_prime, deleted=0, **kw))
    assert deleted.outcome == "other_error" and "nothing was deleted" in deleted.detail
    deleted = record_run(evidence(run, cache="deleted", prime=good_prime, deleted=10, **kw))
    assert deleted.outcome == "ok"
    # Nothing compiles under an uncompiled strategy, so there is nothing to prove.
    eager = record_run(evidence(run, cache="warm", prime=good_prime, counters={}))
    assert eager.outcome == "ok"


def test_the_cache_deletion_keeps_the_other_threads_company() -> None:
    """The deleted state: thread 0 deletes the cache between two of its steps while thread 1
    steps on. On a loaded 2-core box the deletion outlasted thread 1's steady quota (a
    fresh-clone CI run: 24% overlap, `not_concurrent`); thread 0 is busy deleting then (the
    sampler sees it running), so its span is company. An event without its start (a child of
    before) leaves the span unknown, and the run fails closed as before."""
    t0 = [(0, 1), (1, 1.2), (3.0, 3.2)]  # the deletion runs 1.2-3.0, between steps 2 and 3
    t1 = [(0, 1), (1.1, 1.8), (1.8, 2.4), (2.4, 3.3)]  # quota met at 2.4, then company
    until = 3.4
    looks = (
        trace([(a, b, 1.0) for a, b in [*t0, (1.2, 3.0)]], until),
        trace([(a, b, 1.0) for a, b in t1], until, tid=2),
    )
    good_prime = child([thread(0, [(0, 1)])])
    # A deletion whose start is not before its end (another clock) spans nothing.
    for start, outcome in ((1.2, "ok"), (3.5, "not_concurrent")):
        deleted = ProgressEvent(3.0, CacheDeleted(bytes=10, start=start))
        run = child([thread(0, t0), thread(1, t1)], progress=(deleted,), activity=looks)
        rec = record_run(evidence(run, cache="deleted", prime=good_prime, deleted=10,
                              strategy="per_device"))  # fmt: skip
        assert rec.outcome == outcome, rec.detail
    assert "thread 1's steady steps overlapped other threads' steps for 8%" in (rec.detail or "")


def test_processes_are_judged_across_children() -> None:
    a, b = child([thread(0, TOGETHER[0])]), child([thread(1, TOGETHER[1])])
    rec = record_run(evidence(a, b, strategy="processes"))
    assert rec.outcome == "ok" and rec.threads_concurrent == 2
    a, b = child([thread(0, APART[0])]), child([thread(1, APART[1])])
    assert record_run(evidence(a, b, strategy="processes")).outcome == "not_concurrent"


def _on_gpu(i: int, spans: list[tuple[float, float]], peaks: list[int]) -> ThreadReport:
    """A thread on cuda:0 whose steps (the first compiling) left its process's peaks `peaks`."""
    marked = tuple(replace(s, mem_peak=m) for s, m in zip(steps(*spans), peaks, strict=True))
    return ThreadReport(i, "cuda:0", True, None, 0, marked)


def test_peak_memory_adds_up_over_processes_on_one_device() -> None:
    """Each child measures its own allocator: two processes on one GPU hold the sum of their
    peaks, while two threads of one process share one peak (the record once kept one child's)."""
    gb = 2**30
    a = child([_on_gpu(0, TOGETHER[0], [9 * gb, 2 * gb, 2 * gb])])
    b = child([_on_gpu(1, TOGETHER[1], [9 * gb, 3 * gb, 3 * gb])])
    rec = record_run(evidence(a, b, strategy="processes"))
    assert rec.outcome == "ok"
    assert rec.peak_mem_bytes == {"cuda:0": 5 * gb} and rec.mem_series == {"cuda:0": [5 * gb] * 2}
    one = child([_on_gpu(0, TOGETHER[0], [9 * gb, 4 * gb, 4 * gb]),
                 _on_gpu(1, TOGETHER[1], [9 * gb, 4 * gb, 4 * gb])])  # fmt: skip
    assert record_run(evidence(one)).peak_mem_bytes == {"cuda:0": 4 * gb}


def test_a_start_gate_that_timed_out_is_named_in_the_detail() -> None:
    """The `start_gate` event's only reader: a process that gave up waiting for its siblings
    says so beside the not_concurrent it likely caused."""
    late = (ProgressEvent(0.0, StartGateWait(met=False)),)
    a = child([thread(0, APART[0])], progress=late)
    b = child([thread(1, APART[1])], progress=(ProgressEvent(0.0, StartGateWait(met=True)),))
    rec = record_run(evidence(a, b, strategy="processes"))
    assert rec.outcome == "not_concurrent"
    assert "1 process(es) started without their siblings" in (rec.detail or "")
    a = child([thread(0, TOGETHER[0])], progress=(ProgressEvent(0.0, StartGateWait(met=True)),))
    assert "siblings" not in (record_run(evidence(a, b, strategy="processes")).detail or "")


def test_overlap_share() -> None:
    assert merge([(2, 3), (0, 1), (1, 2)]) == [(0, 3)]
    assert overlap_share([(0, 10)], [(5, 15), (6, 7)]) == 0.5
    assert overlap_share([(0, 1), (2, 3)], [(0.5, 2.5)]) == 0.5
    assert overlap_share([(0, 1)], [(1, 2)]) == 0.0  # touching is not overlapping
    assert overlap_share([], [(0, 1)]) is None
    with pytest.raises(ValueError, match="ends before"):
        merge([(2, 1)])


def test_steps_kept_as_company_past_the_quota_are_not_judged() -> None:
    """A thread that has its steps keeps the others company; its last such step may run alone
    (seen on CPU: a 0.5 s step after the other thread stopped) and proves nothing either way."""
    spans = [[(0, 1), (1, 2), (2, 3)], [(0, 1), (1, 2), (2, 3), (3, 9)]]
    rec = record_run(evidence(child(ok_threads(spans))))
    assert rec.outcome == "ok", rec.detail


def test_every_outcome_but_ok_has_a_reason() -> None:
    hung = ThreadReport(1, "cpu", False, None, 0, steps((0, 1)))
    rec = record_run(evidence(child([thread(0, TOGETHER[0]), hung])))
    assert rec.outcome == "hang"
    assert "thread 1 hang: did not finish its steps" in rec.detail
    rec = record_run(
        evidence(child([thread(0, TOGETHER[0], "ValueError: x"), thread(1, TOGETHER[1])]))
    )
    assert rec.outcome == "other_error" and "thread 0 other_error: ValueError: x" in rec.detail


def test_busy_at_the_deadline_only_when_nothing_but_hangs_failed() -> None:
    """A run the watch found at work at its end is too slow only if every failure was a hang:
    a thread that hit the tracing race beside one still compiling is the race (review)."""
    busy = WatchEvidence(note="stall watch: last CPU 1.20 cores", busy_at_end=True)
    late = "TimeoutError: racegate deadline: deadline reached after 0 of 9 steps"
    hung = [thread(0, TOGETHER[0], late), thread(1, TOGETHER[1], late)]
    rec = record_run(evidence(child(hung), watch=busy))
    # Overload, not a hang: `timeout`, each thread's too (neither clean nor failed).
    assert rec.outcome == "timeout" and rec.busy_at_deadline is True, rec.detail
    assert [t.outcome for t in rec.threads] == ["timeout", "timeout"], rec.threads
    assert rec.outcome_counts["timeout"] == 2 and rec.outcome_counts["hang"] == 0
    assert "busy at the deadline" in (rec.detail or "")
    nested = "RuntimeError: Detected that you are using FX to symbolically trace a dynamo-optimized"
    raced = [thread(0, TOGETHER[0], nested), thread(1, TOGETHER[1], late)]
    rec = record_run(evidence(child(raced), watch=busy))
    assert rec.outcome == "hang" and rec.busy_at_deadline is None, rec.detail
    assert "busy at the deadline" not in (rec.detail or "")
    # The watch saw no work (off, or its last look found the run idle): a hang, fail closed.
    blind = record_run(evidence(child(hung)))
    assert blind.outcome == "hang" and blind.busy_at_deadline is None, blind.detail


def test_a_silent_fallback_says_how_often_it_fell_back() -> None:
    """Its detail read "did not finish its steps" for a thread that finished every step."""
    fell = ThreadReport(1, "cpu", True, None, 3, steps(*TOGETHER[1]))
    rec = record_run(evidence(child([thread(0, TOGETHER[0]), fell]), strategy="per_device"))
    assert rec.outcome == "silent_fallback", rec.detail
    assert "thread 1 silent_fallback: its compiled kernel fell back to eager 3 times" in (
        rec.detail or ""
    )
    assert "did not finish its steps" not in (rec.detail or "")


def test_a_crash_before_any_thread_reported_says_nothing_of_co_activity() -> None:
    """A child that died before its threads reported gave the judge no looks to judge: its
    detail read "the share not in a turn alone was  (needs ≥ 40%", with no value."""
    built = ProgressEvent(0.0, Built(2, {"device_name": "cpu"}))
    rec = record_run(evidence(child(None, rc=-signal.SIGSEGV, progress=(built,))))
    assert rec.outcome == "crash" and "SIGSEGV" in (rec.detail or ""), rec.detail
    assert "not in a turn alone" not in (rec.detail or ""), rec.detail


# Threads on one GIL (issue 54): a model of what the runner sees, to test the interleaving rule
# as a pure function; tests/test_activity.py's process cases show it on real threads.
TURN_S = 0.005  # the GIL's switch interval: a thread holding it gives it up after this long
LOOK_S = 0.002  # the runner's looks (racegate.harness.run.activity.SAMPLE_EVERY_S)
TICK_S = 0.004  # the scheduler's tick (CONFIG_HZ=250)


def on_one_gil(
    kind: str, step_s: float, until: float = 1.2, look_s: float = LOOK_S
) -> list[ThreadReport | ThreadActivity]:
    """Two threads whose steps each need `step_s` of CPU, on one GIL: `free` takes turns at it
    every TURN_S (a step cut by a turn goes on at the thread's next turn), `locked` runs whole
    steps in turn under a lock (the waiting thread parked in its step), `serial` has thread 1
    start once thread 0 is done. Returns both threads' reports, then their looks (every
    `look_s`): at each look a thread's CPU time as the kernel shows it (up to date while it
    waits, as of its last turn's start or its last scheduler tick while it runs). Each step
    records both threads' CPU times as its call returns, exactly (their own clocks)."""
    dt = 0.0001
    cpu = [0.0, 0.0]
    shown = [0.0, 0.0]
    steps: list[list[Step]] = [[], []]
    left = [step_s, step_s]
    start = [0.0, 0.0]
    cpu0 = [0.0, 0.0]
    looks: list[list[tuple[float, int, float]]] = [[], []]
    running = 0
    t = 0.0
    serial_from = until / 2
    next_look = next_tick = 0.0
    turn_end = TURN_S
    while t < until:
        if kind == "free" and t >= turn_end:
            shown[running] = cpu[running]  # switched out: its count is brought up to date
            running, turn_end = 1 - running, t + TURN_S
            shown[running] = cpu[running]
        if kind == "serial":
            running = 0 if t < serial_from else 1
            if t >= serial_from and not steps[1] and start[1] < serial_from:
                start[1] = cpu0[1] = t
                cpu0[1] = cpu[1]
        if t >= next_tick:  # the scheduler's tick brings the running thread's count up to date
            shown[running] = cpu[running]
            next_tick += TICK_S
        i = running
        cpu[i] += dt
        left[i] -= dt
        if left[i] <= 1e-12:
            end = t + dt
            step = Step(0, start[i], end, 1, not steps[i], None, None, cpu0[i], end, tuple(cpu))
            steps[i].append(step)
            left[i] = step_s
            start[i], cpu0[i] = end, cpu[i]
            if kind == "locked":  # the lock passes to the other thread, parked since its start
                shown[i] = cpu[i]
                running = 1 - i
                shown[running] = cpu[running]
        if t >= next_look:
            for k in (0, 1):
                looks[k].append((t, int(k == running), cpu[k] if k != running else shown[k]))
            next_look += look_s
        t += dt
    reports = [ThreadReport(k, "cpu", True, None, 0, tuple(steps[k])) for k in (0, 1)]
    acts = [ThreadActivity(k + 1, *(tuple(x) for x in zip(*looks[k], strict=True))) for k in (0, 1)]
    return [*reports, *acts]


def judged_on_one_gil(reports: list, looks: tuple[ThreadActivity, ...]) -> RunRecord:
    """The record of a run of on_one_gil's threads (their reports, the runner's looks)."""
    quota = min(len(r.steps) for r in reports) - 1
    sc = make_scenario(preset="ok", strategy="eager", workload=FAULT, steps=max(1, quota),
                       warmup_steps=1, threads_per_device=2, timeout_s=30)  # fmt: skip
    report = ChildReport(tuple(reports), {"torch": "x", "transformers": "y"},
                         {"device_name": "cpu"}, {}, None, {}, None)  # fmt: skip
    cache = CacheEvidence("cold", "/x", None, None, {}, None, WatchEvidence())
    ch = ChildEvidence(0, False, 0, report, None, (), "", "", 1.0, looks)
    ev = RunEvidence(sc.to_json(), (ch,), cache, {}, True, "", 0, "", 1.0, PARENT_VERSIONS,
                     [], WatchEvidence())  # fmt: skip
    return record_run(ev)


@pytest.mark.parametrize("step_s", [0.001, 0.01], ids=["1ms", "10ms"])
@pytest.mark.parametrize(("kind", "outcome"), [
    ("free", "ok"), ("locked", "not_concurrent"), ("serial", "not_concurrent"),
])  # fmt: skip
def test_threads_taking_turns_at_the_gil_ran_together_a_lock_or_a_late_start_did_not(
    kind: str, outcome: str, step_s: float
) -> None:
    """Issue 54: short steps that hold the GIL take turns at it, so the runner's looks find one
    thread running at a time (co-activity 0.17-0.20 on one H100), and such runs read
    not_concurrent although each thread was inside its step's work while the other stepped on.
    Interleaving counts that; a lock around the whole step, or a thread that starts once the
    other is done, still never shows it."""
    *reports, a0, a1 = on_one_gil(kind, step_s)
    rec = judged_on_one_gil(reports, (a0, a1))
    assert rec.outcome == outcome, rec.detail
    at_work = [t.steps_at_work for t in rec.threads]
    interleaved = [t.steps_interleaved for t in rec.threads]
    assert all(n is not None for n in at_work), rec.threads
    if kind == "free":
        assert any(k >= INTERLEAVED_SHARE * n for k, n in zip(interleaved, at_work, strict=True)), (
            interleaved
        )
        assert rec.threads_concurrent == 2
    else:
        assert max(interleaved) == 0, (at_work, interleaved)
        assert rec.threads_concurrent == 0 and rec.detail, rec.detail


@pytest.mark.parametrize(("kind", "outcome"), [
    ("free", "ok"), ("locked", "not_concurrent"), ("serial", "not_concurrent"),
])  # fmt: skip
def test_steps_too_short_for_the_runners_looks_are_judged_by_the_threads_own_clocks(
    kind: str, outcome: str
) -> None:
    """Issue 54's gap: at 1 ms steps a look lands inside a step seldom, and another thread's
    return falls between that look and the step's end more seldom still, so the looks showed
    free threads together in 19-35% of the steps they saw at work on one H100 and 25-28% on the
    loaded CI box (the rule asks 40%): the fresh-clone CI failed test_activity's free 1 ms case.
    Each step now reads every thread's CPU time as its call returns: another thread found at
    work inside its own step then (its CPU time moved since that step began) ran together with
    it; under a whole-step lock the other is inside its step only parked at its start. Here
    the runner's looks gave nothing (none came in time), and the clocks alone decide: free
    steps ran together, a lock or a late start still fails (without the clocks free steps read
    not_concurrent, the test below)."""
    *reports, _, _ = on_one_gil(kind, 0.001)
    rec = judged_on_one_gil(reports, ())
    assert rec.outcome == outcome, rec.detail
    assert all(t.steps_at_work is None for t in rec.threads)  # the looks measured nothing
    met = [(t.steps_met_at_work or 0, t.steps_met or 0) for t in rec.threads]
    if kind == "serial":  # thread 1 started once thread 0 was done: neither met the other
        assert all(n == 0 for _, n in met), met
    else:
        assert all(n >= MIN_AT_WORK for _, n in met), met
    if kind == "locked":
        assert all(k == 0 for k, _ in met), met
    elif kind == "free":
        assert all(k >= MET_AT_WORK_SHARE * n for k, n in met), met
        assert rec.threads_concurrent == 2
    if kind != "free":
        assert rec.threads_concurrent == 0 and rec.detail, rec.detail


def test_the_co_activity_rule_alone_read_short_gil_turns_as_not_concurrent() -> None:
    """Before issue 54 the runner's looks read no CPU times and co-activity decided: 1 ms steps
    taking turns at the GIL every 5 ms read not_concurrent (on one H100 the trainer's 8 ms steps
    read 17-20%). Without the CPU times (in the looks and at each step's return: a child from
    before) the judge still falls back to that rule, which reads the free case so; with the
    looks' it is concurrent (the test above)."""
    *made, a0, a1 = on_one_gil("free", 0.001)
    reports = [replace(r, steps=tuple(replace(s, cpu_at_return=()) for s in r.steps)) for r in made]
    blind = tuple(replace(a, cpu=()) for a in (a0, a1))
    for looks, outcome in ((blind, "not_concurrent"), ((a0, a1), "ok")):
        rec = judged_on_one_gil(reports, looks)
        assert rec.outcome == outcome, rec.detail


def test_long_steps_shown_together_by_co_activity_are_concurrent_short_ones_are_not() -> None:
    """The interleaving rule alone read the built-in drafter's CPU runs (tens of ms a step, on
    a loaded 2-core box) not_concurrent: 17-28% of the steps seen at work interleaved, under its
    40%, and the race cases failed as not judged in the fresh-clone CI. Where steps are long
    enough for the runner's looks to tell turns apart, co-activity shows them together too; at
    1 ms and 10 ms it misreads a whole-step lock, so there only interleaving counts."""
    threads = [ThreadRecord(i, "cpu", "ok") for i in range(2)]
    overlap = [0.95, 0.95]
    company = [Coactivity(0.62), Coactivity(0.55)]
    took_turns = [Interleaving(77, 15), Interleaving(83, 13)]  # the CI run's counts
    long, short = 2 * COACTIVE_TRUSTED_STEP_S, 0.010
    assert concurrency_findings(threads, overlap, company, 2, took_turns, long) == []
    assert concurrent_threads(overlap, company, 2, took_turns, long) == 2
    (finding,) = concurrency_findings(threads, overlap, company, 2, took_turns, short)
    assert finding.outcome is Outcome.NOT_CONCURRENT
    assert concurrent_threads(overlap, company, 2, took_turns, short) == 0
    # Long steps still need co-activity: threads that took turns by both rules are not together.
    alone = [Coactivity(0.2), Coactivity(0.3)]
    (finding,) = concurrency_findings(threads, overlap, alone, 2, took_turns, long)
    assert finding.outcome is Outcome.NOT_CONCURRENT
    # And interleaving shown is enough at any step length.
    together = [Interleaving(40, 30), Interleaving(40, 25)]
    assert concurrency_findings(threads, overlap, alone, 2, together, 0.001) == []


def test_threads_of_one_process_are_judged_by_their_clocks_not_by_co_activity() -> None:
    """Co-activity misread a whole-step lock as company on a loaded 2-core box: 10 ms steps
    stretched to 27 ms by the wait for the lock, co-activity 0.46 and 0.31, and the lock was
    called concurrent (results/concurrency-short-steps/cpu-loaded, one run of 3). Where the
    threads' clocks were read (Met measured: threads of one process), they decide; co-activity
    stays the rule for threads of different processes."""
    threads = [ThreadRecord(i, "cpu", "ok") for i in range(2)]
    overlap = [0.52, 0.51]
    company = [Coactivity(0.46), Coactivity(0.31)]  # the loaded run's
    took_turns = [Interleaving(50, 3), Interleaving(51, 3)]
    long = 0.027
    assert long >= COACTIVE_TRUSTED_STEP_S
    locked = [Met(50, 2), Met(51, 4)]  # the other parked on the lock at most returns
    (finding,) = concurrency_findings(threads, overlap, company, 2, took_turns, long, locked)
    assert finding.outcome is Outcome.NOT_CONCURRENT
    assert "2 of 50" in finding.reason, finding.reason
    assert concurrent_threads(overlap, company, 2, took_turns, long, locked) == 0
    # Nor where the looks read no CPU times (interleaving not measured): co-activity was the
    # judge's fallback there, and read the lock as company.
    (finding,) = concurrency_findings(threads, overlap, company, 2, (), long, locked)
    assert finding.outcome is Outcome.NOT_CONCURRENT and "2 of 50" in finding.reason
    assert concurrent_threads(overlap, company, 2, (), long, locked) == 0
    # Threads in processes of their own meet nobody: co-activity still shows them together.
    apart = [Met(None, None), Met(None, None)]
    assert concurrency_findings(threads, overlap, company, 2, took_turns, long, apart) == []
    assert concurrent_threads(overlap, company, 2, took_turns, long, apart) == 2


def test_a_thread_parked_in_its_first_step_is_no_company_by_its_own_clock() -> None:
    """Thread 1 parked (its CPU time flat) in its first step through thread 0's whole quota, as
    the clocks read it at thread 0's returns: no look of the runner's sampler saw it (a forked
    run stepped before the sampler's first look). Counted whole, its parked step was company
    to all of thread 0's steps (overlap 1.0: `serial` read ok); by its clock, to its last."""
    from racegate.harness.judge.decide import clock_readings, overlap_shares
    from racegate.harness.run.protocol import ChildEvidence, ThreadReport

    def step(t: float, length: float, cpu0: float, clocks: tuple[float, float]) -> Step:
        return Step(0, t, t + length, 1, False, None, None, cpu0, t + length, clocks)

    # thread 0 steps 0-1, 1-2, ... 5-6 (its CPU 1 s a step); thread 1's first step 0-6, parked
    first = [step(k, 1.0, float(k), (k + 1.0, 0.0)) for k in range(6)]
    parked = [step(0.0, 6.0, 0.0, (6.0, 0.0)), step(6.0, 1.0, 0.0, (6.0, 1.0))]
    reports = [ThreadReport(0, "cpu", True, None, 0, tuple(first)),
               ThreadReport(1, "cpu", True, None, 0, tuple(parked))]  # fmt: skip
    child = ChildEvidence(
        returncode=0, timed_out=False, oom_kills=None, report=None, report_error=None,
        progress=(), stacks="", stderr_tail="", wall_s=7.0,
    )  # fmt: skip
    child = replace(child, progress=tuple(ProgressEvent(0.0, r) for r in reports))
    clocks = clock_readings((child,))
    assert overlap_shares(reports, 1, 5)[0] == 1.0  # the parked step counted whole
    # company only from the last reading that found it parked (at 5 s): one step of five
    assert overlap_shares(reports, 1, 5, clocks=clocks)[0] == pytest.approx(0.2)
