"""The bisection itself: first release whose decision differs, over an oracle (release -> evidence).

Pure search logic, no torch and no processes: `racegate.harness.doors.bisection.evidence` supplies
the oracle that runs probes and race cases in each release's environment. What is compared is a
step's state: its class (racegate.harness.doors.bisection.steps: RACES, MASKED, GONE, ...) and its
decision (the gating probes' and the production strategy's words combined). Flake-aware: a step that
did not settle (UNDECIDED, or its class UNCLEAR; a MASKED step is settled) is asked again (up to
`tries` times) and never taken as either side; before a change is named both neighbours are asked
`confirm` more times and must give the same state every time. Each stretch between two changes is
assumed to hold one state: the first change from the oldest release is found by halving, then, while
the state reached differs from the newest release's, the next change in the rest of the range (RACES
-> MASKED -> GONE names both). `checked` lists every answer it got.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum

from racegate.harness.doors.bisection import steps
from racegate.harness.judge.gate import EXIT_CODES, EXIT_UNDECIDED, Word


@dataclass(frozen=True)
class Evidence:
    """What one release showed: its decision, and the observations the decision came from."""

    release: str
    decision: Word
    observations: Mapping[str, str]  # e.g. {"probe compiled_call_during_make_fx": "hazard"}
    commit: str = ""  # upstream commit of the release (torch.version.git_version), if known
    note: str = ""  # why UNDECIDED, or anything the oracle wants printed with the step
    # the step's class (racegate.harness.doors.bisection.steps.Hazard); "" where none is given
    hazard: str = ""
    production: Word | None = None  # the race selection's word; None where it did not run
    why: str = ""  # why this class: the control's rates and the probes that decided it

    @property
    def state(self) -> tuple[str, Word]:
        """What the search compares between releases: the class and the decision (which
        holds the production strategy's word, racegate.harness.doors.bisection.steps.settled)."""
        return self.hazard, self.decision

    @property
    def settled(self) -> bool:
        return steps.settled(self.hazard, self.decision)


@dataclass(frozen=True)
class Change:
    """Two adjacent releases whose states differ, each confirmed by its re-runs."""

    before: Evidence
    after: Evidence

    @property
    def direction(self) -> str:
        """'first bad', 'first fixed', 'first masked', ...
        (racegate.harness.doors.bisection.steps.names)."""
        return steps.names(self.before.state, self.after.state)[0]

    @property
    def older(self) -> str:
        """'last good', 'last bad', 'last where the race shows', ..."""
        return steps.names(self.before.state, self.after.state)[1]

    def changed_observations(self) -> dict[str, tuple[str, str]]:
        """What differs between the two neighbours: name -> (before, after)."""
        a, b = self.before.observations, self.after.observations
        return {k: (a.get(k, "-"), b.get(k, "-")) for k in sorted({*a, *b}) if a.get(k) != b.get(k)}


Oracle = Callable[[str], Evidence]


class Outcome(StrEnum):
    CHANGED = "changed"  # a change found and confirmed on both neighbours
    UNCHANGED = "unchanged"  # both ends of the range are in the same state
    UNDECIDED = "undecided"  # a step stayed UNDECIDED after `tries`, so no culprit is named
    FLAKY = "flaky"  # a neighbour's re-runs disagreed with its first answer


@dataclass
class Result:
    outcome: Outcome
    releases: list[str]
    before: Evidence | None = None  # the last release with the old decision (last good)
    after: Evidence | None = None  # the first release with the new one (first bad / fixed)
    checked: list[Evidence] = field(default_factory=list)  # every answer, in the order asked
    why: str = ""  # for UNDECIDED / FLAKY: which release and what it said
    # every confirmed change, oldest first (before/after are the first one's); a search stopped
    # by an undecided step or a flip keeps the changes confirmed before it
    changes: list[Change] = field(default_factory=list)

    @property
    def direction(self) -> str:
        """The first change's: 'first bad', 'first fixed', 'first masked', ..., or ''."""
        if self.outcome is not Outcome.CHANGED or not self.changes:
            return ""
        return self.changes[0].direction

    def changed_observations(self) -> dict[str, tuple[str, str]]:
        """What differs between the first change's neighbours: name -> (before, after)."""
        if self.before is None or self.after is None:
            return {}
        return Change(self.before, self.after).changed_observations()

    @property
    def exit_code(self) -> int:
        """The gate's code for the newest release's decision when the answer is conclusive
        (CHANGED or UNCHANGED), else UNDECIDED (7): a search that could not decide fails closed."""
        newest = next((e for e in reversed(self.checked) if e.release == self.releases[-1]), None)
        if self.outcome in (Outcome.CHANGED, Outcome.UNCHANGED) and newest is not None:
            return EXIT_CODES[newest.decision]
        return EXIT_UNDECIDED


class _Undecided(Exception):
    def __init__(self, evidence: Evidence, tries: int) -> None:
        super().__init__(evidence.release)
        self.evidence, self.tries = evidence, tries


def bisect(releases: Sequence[str], oracle: Oracle, *, tries: int = 3, confirm: int = 1) -> Result:
    """Find adjacent releases (before, after) in `releases` (oldest first) whose decisions differ.

    tries: answers asked of one release while it is UNDECIDED (>= 1); confirm: extra answers
    asked of each neighbour before naming them (>= 0), all of which must agree.
    """
    if len(releases) < 2:
        raise ValueError(f"bisect needs at least two releases, got {list(releases)}")
    if tries < 1 or confirm < 0:
        raise ValueError(f"tries must be >= 1 and confirm >= 0 (got {tries}, {confirm})")
    result = Result(Outcome.UNDECIDED, list(releases))

    def ask(release: str) -> Evidence:
        evidence = oracle(release)
        result.checked.append(evidence)
        return evidence

    def decided(release: str) -> Evidence:
        for _ in range(tries):
            evidence = ask(release)
            if evidence.settled:
                return evidence
        raise _Undecided(evidence, tries)

    confirmed: set[str] = set()

    def confirm_both(before: Evidence, after: Evidence) -> bool:
        for evidence in (before, after):
            if evidence.release in confirmed:
                continue
            for _ in range(confirm):
                again = decided(evidence.release)
                if again.state != evidence.state:
                    result.outcome, result.before, result.after = Outcome.FLAKY, before, after
                    result.why = (
                        f"{evidence.release} decided {describe_state(evidence)}, then "
                        f"{describe_state(again)} on a re-run: no culprit named"
                    )
                    return False
            confirmed.add(evidence.release)
        return True

    try:
        lo, hi = 0, len(releases) - 1
        first, last = decided(releases[lo]), decided(releases[hi])
        if first.state == last.state:
            result.outcome, result.before, result.after = Outcome.UNCHANGED, first, last
            return result
        known = {lo: first, hi: last}
        while known[lo].state != last.state:
            start, top = lo, hi
            while top - start > 1:
                mid = (start + top) // 2
                if mid not in known:  # asked already while looking for an earlier change
                    known[mid] = decided(releases[mid])
                if known[mid].state == known[lo].state:
                    start = mid
                else:
                    top = mid
            before, after = known[start], known[top]
            if not confirm_both(before, after):
                return result
            result.changes.append(Change(before, after))
            if len(result.changes) == 1:
                result.before, result.after = before, after
            lo = top
    except _Undecided as stuck:
        result.why = (
            f"{stuck.evidence.release} stayed undecided after {stuck.tries} tries "
            f"(bound hit): {stuck.evidence.note or 'no decision'}"
        )
        return result
    result.outcome = Outcome.CHANGED
    return result


def describe_state(e: Evidence) -> str:
    """'MASKED (decision UNDECIDED, production UNDECIDED)', or the decision alone."""
    if not e.hazard:
        return str(e.decision)
    production = f", production {e.production}" if e.production is not None else ""
    return f"{e.hazard} (decision {e.decision}{production})"
