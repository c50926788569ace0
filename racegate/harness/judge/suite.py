"""What the regression suite (cases/) needs from the harness: run a case, record it, judge it.

Each failing outcome raises its own exception class, so `xfail(raises=...)` only absorbs
the failure a table row predicts; any other failure still fails the case.
"""

from __future__ import annotations

from racegate.harness.judge.outcomes import is_spurious_recompile, worst
from racegate.harness.judge.race_evidence import no_evidence, timed_out, unjudged_why
from racegate.harness.run.record import RunRecord
from racegate.harness.scenario.vocab import Outcome


class RaceOutcomeError(AssertionError):
    """A run's outcome was not `ok`."""


OUTCOME_ERRORS: dict[Outcome, type[RaceOutcomeError]] = {
    o: type(f"{o.value.title().replace('_', '')}Seen", (RaceOutcomeError,), {"outcome": o})
    for o in Outcome
    if o is not Outcome.OK
}


SPURIOUS_NOTE = (
    "spurious: an existing cache entry's guards passed on re-check — torch's cache lookup raced "
    "another thread (upstream bug, not a new shape; results/guard-lookup-spurious-miss)"
)


def explain(records: list[RunRecord]) -> str:
    lines = []
    for r in records:
        errors = sorted({t.error for t in r.threads if t.error})
        if any(is_spurious_recompile(t.error_text or "") for t in r.threads):
            errors.append(SPURIOUS_NOTE)
        lines.append(
            f"run {r.repeat_index + 1}: {r.outcome}, {r.threads_concurrent}/{r.threads_asked} "
            f"threads concurrent, counts { ({k: v for k, v in r.outcome_counts.items() if v}) }"
            + (f", detail: {r.detail}" if r.detail else "")
            + "".join(f"\n    {e[:300]}" for e in errors)
        )
    return "\n".join(lines)


class NotJudged(RaceOutcomeError):
    """Every run that was not `ok` showed nothing either way (racegate.harness.judge.race_evidence
    .no_evidence: a timeout, threads not shown running together): no failure and no clean run;
    not an outcome an expectation may name, and never "unsafe"."""


class TooSlowToJudge(NotJudged):
    """Every run not `ok` timed out still at work (racegate.harness.judge.race_evidence
    .timed_out): not the `hang` an expectation may name."""


def judge(records: list[RunRecord]) -> None:
    """Raise the worst run's outcome error unless every run was ok.

    An `ok` run had every thread it asked for report and run concurrently:
    racegate.harness.judge.decide makes a run with fewer `other_error` and one whose threads ran
    alone `not_concurrent`. A run that shows nothing either way (a timeout, `not_concurrent`) is
    no failure: only where no run failed is NotJudged raised for them."""
    failed = [r for r in records if r.outcome != Outcome.OK]
    real = [Outcome(r.outcome) for r in failed if not no_evidence(r)]
    if failed and not real:
        apart = sum(1 for r in failed if not timed_out(r))
        kind = TooSlowToJudge if not apart else NotJudged
        raise kind(f"not judged: {unjudged_why(failed, len(records))}:\n{explain(records)}")
    if real:
        outcome = worst(real)
        raise OUTCOME_ERRORS[outcome](f"{outcome} in {len(records)} run(s):\n{explain(records)}")
