"""The bisection itself: first release whose decision differs, over an oracle (release -> evidence).

Pure search logic, no torch and no processes: `harness.bisect.evidence` supplies the oracle that
runs probes and race cases in each release's environment. Flake-aware: a step whose decision is
UNDECIDED is asked again (up to `tries` times) and never taken as either side; before a culprit
is named both neighbours are asked `confirm` more times and must give the same decision every
time. The search assumes one change in the range (the decision of every release between the two
neighbours is not asked); `checked` lists every answer it got.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum

from harness.judge.gate import EXIT_CODES, EXIT_UNDECIDED, Word


@dataclass(frozen=True)
class Evidence:
    """What one release showed: its decision, and the observations the decision came from."""

    release: str
    decision: Word
    observations: Mapping[str, str]  # e.g. {"probe compiled_call_during_make_fx": "hazard"}
    commit: str = ""  # upstream commit of the release (torch.version.git_version), if known
    note: str = ""  # why UNDECIDED, or anything the oracle wants printed with the step


Oracle = Callable[[str], Evidence]


class Outcome(StrEnum):
    CHANGED = "changed"  # a change found and confirmed on both neighbours
    UNCHANGED = "unchanged"  # both ends of the range decide the same way
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

    @property
    def direction(self) -> str:
        """'first bad' (SAFE -> UNSAFE), 'first fixed' (UNSAFE -> SAFE), or ''."""
        if self.outcome is not Outcome.CHANGED or self.before is None or self.after is None:
            return ""
        return "first fixed" if self.after.decision is Word.SAFE else "first bad"

    def changed_observations(self) -> dict[str, tuple[str, str]]:
        """What differs between the two neighbours: name -> (before, after)."""
        if self.before is None or self.after is None:
            return {}
        a, b = self.before.observations, self.after.observations
        return {k: (a.get(k, "-"), b.get(k, "-")) for k in sorted({*a, *b}) if a.get(k) != b.get(k)}

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
            if evidence.decision is not Word.UNDECIDED:
                return evidence
        raise _Undecided(evidence, tries)

    try:
        lo, hi = 0, len(releases) - 1
        first, last = decided(releases[lo]), decided(releases[hi])
        if first.decision is last.decision:
            result.outcome, result.before, result.after = Outcome.UNCHANGED, first, last
            return result
        known = {lo: first, hi: last}
        while hi - lo > 1:
            mid = (lo + hi) // 2
            known[mid] = decided(releases[mid])
            if known[mid].decision is first.decision:
                lo = mid
            else:
                hi = mid
        before, after = known[lo], known[hi]
        for evidence in (before, after):
            for _ in range(confirm):
                again = decided(evidence.release)
                if again.decision is not evidence.decision:
                    result.outcome, result.before, result.after = Outcome.FLAKY, before, after
                    result.why = (
                        f"{evidence.release} decided {evidence.decision}, then {again.decision} "
                        "on a re-run: no culprit named"
                    )
                    return result
    except _Undecided as stuck:
        result.why = (
            f"{stuck.evidence.release} stayed UNDECIDED after {stuck.tries} tries "
            f"(bound hit): {stuck.evidence.note or 'no decision'}"
        )
        return result
    result.outcome, result.before, result.after = Outcome.CHANGED, before, after
    return result
