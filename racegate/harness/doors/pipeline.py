"""The run stage driven end to end: a scenario run in fresh processes and decided, a case's runs.

Both front doors (racegate/harness/doors/cli.py and the pytest plugin's cases) run scenarios through
here."""

from __future__ import annotations

import contextlib
import secrets
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from racegate.harness.judge.decide import record_run
from racegate.harness.run import runner
from racegate.harness.run.record import RunRecord, append_jsonl, invocation
from racegate.harness.run.runner import SharedPrimes
from racegate.harness.run.slots import Slot, SlotPool
from racegate.harness.scenario.spec import Scenario
from racegate.harness.scenario.vocab import Outcome


def run_scenario(
    scenario: Scenario,
    *,
    command: str = "",
    repeat_index: int = 0,
    work_dir: Path | None = None,
    keep: bool = False,
    timing_valid: bool = True,
    primes: runner.SharedPrimes | None = None,
) -> RunRecord:
    """Run one scenario in fresh processes and decide it (see
    racegate.harness.run.runner.collect)."""
    evidence = runner.collect(
        scenario,
        command=command,
        repeat_index=repeat_index,
        work_dir=work_dir,
        keep=keep,
        timing_valid=timing_valid,
        primes=primes,
    )
    record = record_run(evidence)
    # Its identity: this invocation's id and one of its own, so a reader counts it once
    # however often it is given (racegate.harness.run.record.unique_runs).
    record.invocation, record.run_id = invocation(), secrets.token_hex(8)
    return record


def batch_slots(
    pool: SlotPool | None,
    case_jobs: int,
    want: int,
    scenario: Scenario,
    primes: SharedPrimes,
) -> tuple[int, list[Slot]]:
    """(runs at once, the extra slots held for them) for a batch of `want` runs of `scenario`.

    A warm or deleted scenario's priming run is made first (once per `primes`), on the slot the
    case already holds, and only then are the batch's extra slots taken: its runs copy that one
    cache, so until it is made they could only wait, each holding a slot idle that another
    case's runs could use. One H100, the main command at c45484e: about 250 of its 1,875
    run-seconds were runs of a batch waiting on their case's priming run (~24 s each)."""
    if scenario.cache_state.primed:
        primes.get(scenario)
    if pool is None:
        return max(1, min(case_jobs or 1, want)), []
    extra = pool.extra(want - 1)  # none while a case waits for its own slot
    return 1 + len(extra), extra


def run_case(
    scenario: Scenario,
    repeat: int,
    results: Path | None,
    command: str,
    *,
    stop_on_failure: bool = False,
    timing_valid: bool = True,
    first_index: int = 0,
    jobs: int = 1,
    primes: SharedPrimes | None = None,
) -> list[RunRecord]:
    """`repeat` isolated runs of `scenario`; each record is appended to `results` as it lands.

    stop_on_failure: end after the first run that is not `ok` (the case has failed; a hang
    would otherwise cost every remaining run its whole timeout); with `jobs` > 1 the batch in
    flight finishes first. Detection rates come from `python -m racegate run --repeat N`, which
    runs them all. first_index: the repeat index of the first of these runs, for a case that
    calls this more than once. jobs: runs at once, in batches (their records then say
    timing_valid False: they overlapped each other). primes: the priming runs to share (a
    caller that calls this more than once for one case passes its own); by default the
    case's warm/deleted runs share one priming run, made here and removed at the end.
    """
    jobs = max(1, min(jobs, repeat))
    timing_valid = timing_valid and jobs == 1
    records: list[RunRecord] = []
    indices = list(range(first_index, first_index + repeat))
    with contextlib.ExitStack() as stack, ThreadPoolExecutor(max_workers=jobs) as pool:
        if primes is None:
            primes = stack.enter_context(SharedPrimes())
        for start in range(0, repeat, jobs):
            batch = pool.map(
                lambda k: run_scenario(
                    scenario,
                    command=command,
                    repeat_index=k,
                    timing_valid=timing_valid,
                    primes=primes,
                ),
                indices[start : start + jobs],
            )
            for record in batch:
                if results is not None:
                    append_jsonl(results, record)
                records.append(record)
            if stop_on_failure and any(r.outcome != Outcome.OK for r in records):
                break
    return records
