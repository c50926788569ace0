"""Which outcomes show the race: the one rule that gives the positive control its power.

A failing control run counts as "the race was caught" only when its record shows the race
itself; any other failure is reported as "the control failed for another reason" and gives the
verdict no power (racegate.harness.judge.verdict). The rule, for one run record:

- a thread's outcome is `nested_fx_error` (the nested-FX error) or `silent_fallback` (a compiled
  kernel that ran uncompiled): the race, as racegate.harness.judge.outcomes classifies it;
- a thread's error is dynamo's MetricsContext collision ("Metric(s) ... have already been set in
  the current context"): torch 2.10's compile-metrics context is one per process, and two
  threads compiling at once write into the same one (classified `other_error`, as any error it
  does not name; racegate/harness/expectations/race.toml,
  results/cpu-torch-releases-probes-and-races);
- a `hang` the stall watch called (`stalled_s`: every stack unchanged, the run idle) where a
  stepping thread's stack has a frame in torch's compiler (COMPILE_FILES): threads stuck in a
  compile, as the H200's per_device deadlocks were (results/h200-cell-control-detection);
- a `crash` with a fault dump (faulthandler's "Fatal Python error" and its "Current thread"
  block, in the record's stacks) whose current thread, the one that faulted, has a frame in
  torch's compiler: it died inside a compile while other threads ran (the torch 2.11 SIGSEGVs
  of results/cpu-torch-releases-probes-and-races faulted in fake_tensor under inductor, one
  thread tracing after another had exited). A crash without a fault dump (a SIGKILL, an exit
  code, a dump whose current thread is outside the compiler) does not count: nothing ties it
  to the race.

Not race evidence: `not_concurrent` (the threads took turns), `other_error` but the above, `oom`,
a hang at the deadline the watch did not call a stall, a stall outside the compiler,
`recompile_blocked` (a warmed-up strategy's miss, not the control's race) and `timeout`.

`timeout` is overload, not a hang: the run reached its deadline while the stall watch found its
threads still at work. It counts as neither clean nor failed (`timed_out`). Nor does
`not_concurrent`: the runner could not show the threads running together, which says nothing
about whether the step fails (`no_evidence`; racegate.harness.scenario.vocab.NO_EVIDENCE).
A run is a failure (`failed`) only where it shows the step failed: an error, a stall or hang, a
fallback, a blocked recompile, an out-of-memory, a crash.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from pathlib import Path

from racegate.harness.run import stacks
from racegate.harness.run.record import RunRecord
from racegate.harness.scenario.vocab import NO_EVIDENCE, Outcome, is_failure

# Thread outcomes that are the race itself.
RACE_OUTCOMES = frozenset({Outcome.NESTED_FX_ERROR, Outcome.SILENT_FALLBACK})
# torch/_dynamo/metrics_context.py (MetricsContext.update / set), 2.10: one context per process.
METRICS_CONTEXT_COLLISION = re.compile(
    r"Metric(\(s\))? .+ ha(s|ve) already been set in the current context"
)
# torch's compiler: a frame in one of these files is inside a compile (tracing, fake tensors,
# AOT autograd, inductor), matched on faulthandler's `File "..."` lines.
COMPILE_FILES = (
    "torch/_dynamo/",
    "torch/_inductor/",
    "torch/fx/",
    "torch/_functorch/",
    "torch/_subclasses/",
    "torch/_guards.py",
)
_FATAL = "Fatal Python error"
_CURRENT = "Current thread "


def compile_frame(block: str) -> bool:
    """One thread's stack has a frame in torch's compiler."""
    files = [line.replace("\\", "/") for line in block.splitlines() if "File " in line]
    return any(f in line for line in files for f in COMPILE_FILES)


def _metrics_collision(record: RunRecord) -> bool:
    return any(METRICS_CONTEXT_COLLISION.search(t.error_text or "") for t in record.threads)


def _stalled_in_compile(record: RunRecord) -> bool:
    return record.stalled_s is not None and any(
        compile_frame(block) for block in stacks.stepping(record.stacks or "")
    )


def _faulted_in_compile(record: RunRecord) -> bool:
    """A fault dump whose current thread (the one that faulted) has a compiler frame."""
    text = record.stacks or ""
    if _FATAL not in text:
        return False
    _, found = stacks.blocks(text)
    return any(b[0].startswith(_CURRENT) and compile_frame("\n".join(b[1:])) for _, b in found)


# A traceback's frame line, as Python writes it.
_FRAME = re.compile(r'^\s*File "(?P<file>[^"]+)", line (?P<line>\d+), in (?P<func>\S+)', re.M)
_EXCEPTION = re.compile(
    r"^(?P<type>[A-Za-z_][\w.]*(?:Error|Exception|Warning))(?::\s*(?P<msg>.*))?$"
)
# Where a frame is library code, not the trainer's own: installed packages, the standard
# library, Python's frozen modules, racegate's machinery.
_LIBRARY = ("/site-packages/", "/dist-packages/", "/lib/python3", "<frozen ", "/racegate/harness/")
# What racegate calls of a workload: the user's entry points, named in the verdict.
ENTRY_POINTS = ("make_replica", "step", "eager_fallbacks", "flops_per_step", "shapes")


def _workload_file(record: RunRecord) -> str:
    """The workload module's path suffix ('examples/short_step_workload.py')."""
    module = str(record.scenario.workload).split(":")[0]
    return module.replace(".", "/") + ".py"


def _own_frame(file: str, workload_file: str) -> bool:
    path = file.replace("\\", "/")
    return path.endswith(workload_file) or not any(m in path for m in _LIBRARY)


def own_error(record: RunRecord) -> str | None:
    """Where a failed run's error is the trainer's own bug, one line saying so: the error was
    raised in the workload's code (the innermost frame of its traceback is the workload
    module's, or outside every library, and its statement is a `raise` or an `assert`), with no
    frame of torch's compiler in it
    (COMPILE_FILES) ("your code raised ValueError: bad size in make_replica (mytrain.py:12) ...").
    None where it is not (the race, a torch error, no traceback to tell)."""
    if record.outcome not in (Outcome.OTHER_ERROR, Outcome.CRASH) or shows_race(record):
        return None
    texts = [t.error_text for t in record.threads if t.error_text]
    if record.outcome == Outcome.CRASH:
        texts.append((record.detail or "").partition("; stderr: ")[2])
    mine = _workload_file(record)
    for text in texts:
        frames = list(_FRAME.finditer(text))
        # Raised under torch's compiler (dynamo runs the user's code as it traces): not outside
        # torch's compile, whoever's frame raised.
        if not frames or compile_frame(text):
            continue
        inner = frames[-1]
        if not _own_frame(inner["file"], mine):
            continue
        tail = [line.strip() for line in text[inner.end() :].splitlines() if line.strip()]
        # The statement that raised is the trainer's own `raise` (or `assert`): an error a torch
        # op raises from C++ has the caller's line innermost too, and may be torch's regression.
        if not tail or not tail[0].startswith(("raise ", "raise(", "assert ")):
            continue
        found = (m for line in tail if (m := _EXCEPTION.match(line)))
        exc = next(found, None)
        if exc is None:
            continue
        own = [f for f in frames if _own_frame(f["file"], mine)]
        entry = next((f["func"] for f in own if f["func"] in ENTRY_POINTS), inner["func"])
        where = f"{Path(inner['file']).name}:{inner['line']}"
        msg = " ".join((exc["msg"] or "").split())[:100]
        return (
            f"your code raised {exc['type']}{': ' + msg if msg else ''} in {entry} ({where}), "
            "outside torch: the trainer's own bug, not the race"
        )
    return None


def shows_race(record: RunRecord) -> bool:
    """The run's record shows the race (the module's rule)."""
    if any(t.outcome in RACE_OUTCOMES for t in record.threads) or record.outcome in RACE_OUTCOMES:
        return True
    if _metrics_collision(record):
        return True
    if record.outcome == Outcome.HANG and _stalled_in_compile(record):
        return True
    return record.outcome == Outcome.CRASH and _faulted_in_compile(record)


def timed_out(record: RunRecord) -> bool:
    """Overload: the run reached its deadline still at work (`timeout`; a record written before
    that outcome says `hang` with busy_at_deadline). Neither clean nor a failure."""
    if record.outcome == Outcome.TIMEOUT:
        return True
    return record.outcome == Outcome.HANG and record.busy_at_deadline is True


# An OSError's text when the machine, not the step, failed a run: no disk space, no file room.
NO_SPACE_MARKS = ("[Errno 28]", "No space left on device", "[Errno 27]", "File too large")


def infrastructure_failure(record: RunRecord) -> str | None:
    """The line of the run's detail or a thread's error that says the machine failed it (a full
    disk or file-size limit: NO_SPACE_MARKS); None where nothing says so. Such a run failed, but
    not by its step: it shows nothing about the strategy."""
    texts = [record.detail or "", *(t.error or "" for t in record.threads)]
    texts += [t.error_text or "" for t in record.threads]
    for text in texts:
        for line in text.splitlines():
            if any(mark in line for mark in NO_SPACE_MARKS):
                return " ".join(line.split())
    return None


def no_evidence(record: RunRecord) -> bool:
    """Neither clean nor a failure: timed out still at work, its threads were not shown running
    together (NO_EVIDENCE), or the machine failed it (infrastructure_failure)."""
    return (
        timed_out(record)
        or record.outcome in NO_EVIDENCE
        or (record.outcome != Outcome.OK and infrastructure_failure(record) is not None)
    )


def is_failed(record: RunRecord) -> bool:
    """The run shows that the step failed (an error, a stall, a fallback, a blocked recompile,
    an out-of-memory, a crash): the only runs that can make a strategy UNSAFE."""
    return is_failure(record.outcome) and not no_evidence(record)


# What would let a not_concurrent run show its threads running together (docs/gate.md).
SHOW_CONCURRENCY = (
    "longer steps (more work per step), fewer runs side by side (--case-jobs, "
    "RACEGATE_RACE_WORKERS) or a less loaded host would show them"
)


def _why(record: RunRecord) -> str:
    """What the failure was, shortly: the record's outcome and its first reason."""
    first = (record.detail or "").split("; ")[0]
    if record.outcome == Outcome.HANG:
        if record.stalled_s is None:
            return "hang at the deadline that the stall watch did not call a stall"
        return "hang stalled outside torch's compiler"
    if record.outcome == Outcome.CRASH and _FATAL not in (record.stacks or ""):
        first = f"{first} (no fault dump)" if first else "no fault dump"
    elif record.outcome == Outcome.CRASH:
        first = f"{first} (its faulting thread outside torch's compiler)"
    text = f"{record.outcome}: {first}" if first else str(record.outcome)
    return text if len(text) <= 160 else text[:157] + "..."


def other_reason(record: RunRecord) -> str | None:
    """Why a run that is not clean shows no race ("not_concurrent: thread 1's ..."), a timeout
    included (overload: no failure, and no clean run either); None for a clean run and for a run
    that shows the race."""
    if record.outcome == Outcome.OK or shows_race(record):
        return None
    if timed_out(record):
        return "timeout: reached its deadline still at work (overload)"
    return _why(record)


def own_error_of(records: Iterable[RunRecord], strategy: str | None) -> str | None:
    """The first of `strategy`'s failed runs (None: any strategy's) that is the trainer's own
    error (own_error), as own_error says it; None where there is none."""
    mine = (r for r in records if strategy is None or r.scenario.strategy == strategy)
    return next((e for r in mine if is_failed(r) and (e := own_error(r))), None)


def own_error_sides(
    current: Iterable[RunRecord], candidate: Iterable[RunRecord], strategy: str | None
) -> str:
    """`racegate upgrade`'s line on the trainer's own error: whether it fails on both sides
    (then it is not the upgrade) or only with the candidate; "" where the candidate's runs show
    none."""
    theirs = own_error_of(candidate, strategy)
    if theirs is None:
        return ""
    if own_error_of(current, strategy) is not None:
        return (
            f"the candidate's failure is the trainer's own ({theirs}), and the current "
            "environment fails the same way: not the upgrade; fix the trainer, then run again"
        )
    return (
        f"the candidate's failure is the trainer's own ({theirs}), but only with the "
        "candidate: the current environment ran without it, so the upgrade changed what the "
        "trainer's code meets"
    )


def unjudged_why(unjudged: Sequence[RunRecord], n: int) -> str:
    """Why runs that are neither clean nor failed prove nothing, and what would decide them."""
    machine = sum(1 for r in unjudged if not timed_out(r) and infrastructure_failure(r))
    slow = sum(1 for r in unjudged if timed_out(r))
    apart = len(unjudged) - slow - machine
    parts = []
    if machine:
        parts.append(
            f"{machine} of {n} runs failed for want of disk space, not by their step: free space "
            "where TMPDIR and the records are, then run again"
        )
    if slow:
        parts.append(
            f"{slow} of {n} runs timed out still at work (not stalled): too slow to judge; "
            "rerun with fewer runs side by side (--case-jobs, RACEGATE_RACE_WORKERS) or give "
            "them a longer --run-timeout"
        )
    if apart:
        parts.append(
            f"{apart} of {n} runs could not show {'their' if apart != 1 else 'its'} threads "
            f"running together (not_concurrent): {SHOW_CONCURRENCY}"
        )
    return "; ".join(parts)
