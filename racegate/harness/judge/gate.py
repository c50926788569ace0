"""The one gate decision: SAFE / UNSAFE / UNDECIDED and its exit code, for every command.

pytest's exit status for the race selection, the terminal verdict block's last line, `python -m
harness run`'s exit, `report`'s gate.json and its Markdown/HTML headline all come from
`decide_gate` (one group of records) or `combine` (the report's groups), so one run never reads
as three answers. What each word means, and what to do, is racegate.harness.judge.words's
(`racegate explain WORD`), which the last line names.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from enum import StrEnum

from racegate.harness.judge.race_evidence import infrastructure_failure
from racegate.harness.judge.verdict import Status, Verdict
from racegate.harness.judge.words import explain_command
from racegate.harness.run.record import RunRecord

# Where a reader learns the words: a command every installed racegate has (the report names it).
WORDS_DOC = explain_command("WORD")


class Word(StrEnum):
    SAFE = "SAFE"  # the production strategy is SAFE here (and its tokens/s met its bar)
    UNSAFE = "UNSAFE"  # it failed a run, or its tokens/s or memory missed the bar
    UNDECIDED = "UNDECIDED"  # no failure, but nothing shows this machine would have seen one


# Defined once: every gating command exits with these. pytest's own codes are 0-5 (6 in recent
# releases), so UNDECIDED takes 7, which none of them uses.
EXIT_SAFE, EXIT_UNSAFE, EXIT_USAGE, EXIT_UNDECIDED = 0, 1, 2, 7
EXIT_CODES: dict[str, int] = {
    Word.SAFE: EXIT_SAFE,
    Word.UNSAFE: EXIT_UNSAFE,
    "usage": EXIT_USAGE,
    Word.UNDECIDED: EXIT_UNDECIDED,
}
# A Ctrl-C (or the SIGINT/SIGTERM a CI runner or `timeout` sends): the command stopped before a
# decision, as a shell reports a SIGINT; what it recorded is kept. Never a decision's code.
EXIT_INTERRUPTED = 130


class NothingDecided(Exception):
    """The infrastructure failed (a full disk, a folder gone, an interrupt): one line naming
    the cause, exit EXIT_UNDECIDED, never a verdict's code."""


def infrastructure_cause(records: Iterable[RunRecord]) -> str | None:
    """Why these runs prove nothing either way (None: nothing of the kind): a run that failed
    for want of disk space names it in its detail or a thread's error."""
    for r in records:
        if r.outcome != "ok" and (line := infrastructure_failure(r)):
            return (
                f"a run failed for want of disk space, not by its step ({r.outcome}: "
                f"{line[:200]}); free space where TMPDIR and the records are, then run again"
            )
    return None


# A gating command that ran and decided (whichever way): not a usage error or a crash.
DECIDED_EXITS = frozenset({EXIT_SAFE, EXIT_UNSAFE, EXIT_UNDECIDED})


@dataclass(frozen=True)
class Decision:
    word: Word
    reason: str  # why this word, one sentence
    next: str  # what to run next ("" when nothing is asked)

    @property
    def exit_code(self) -> int:
        return EXIT_CODES[self.word]

    @property
    def passed(self) -> bool:
        return self.word is Word.SAFE

    def line(self) -> str:
        """The verdict block's last line: the word, what to do, and the command that explains
        the word."""
        text = (self.next or self.reason).rstrip(".")
        return f"{self.word}: {text} (exit {self.exit_code}; {explain_command(self.word)})"

    def to_json(self) -> dict[str, object]:
        return {
            "passed": self.passed,
            "decision": str(self.word),
            "exit_code": self.exit_code,
            "reason": self.reason,
            "next": self.next,
        }


def decide_gate(
    verdict: Verdict | None,
    throughput: bool | None = None,
    failed_cases: int = 0,
    *,
    bar: str = "tokens/s or memory missed its bar",
    missed: Sequence[str] = (),
    infrastructure: str | None = None,
) -> Decision:
    """The decision for one set of records.

    verdict: racegate.harness.judge.verdict.decide's result (None: no records, nothing decided);
    throughput: whether tokens/s (and memory) met their bar, None where not judged;
    failed_cases: tests that failed other than by a run outcome the verdict judges (a broken
    case, a unit test; 0 outside pytest): no evidence either way, so never SAFE;
    bar: what missed the bar, when throughput is False;
    missed: each bar the records missed (racegate.harness.judge.baselines.production_bars, and the
    report's tokens/s floors): throughput False, with these as the bar;
    infrastructure: why the runs prove nothing (`infrastructure_cause`): UNDECIDED, first.
    """
    if infrastructure:
        return Decision(Word.UNDECIDED, f"nothing decided: {infrastructure}", infrastructure)
    if missed:
        throughput, bar = False, "; ".join(missed)
    if verdict is None:
        return Decision(Word.UNDECIDED, "no run records: nothing was decided", "run the race cases")
    prod = verdict.production_verdict
    if prod.status is Status.UNSAFE:
        return Decision(Word.UNSAFE, f"{prod.strategy} UNSAFE: {prod.why}", verdict.advice)
    if throughput is False:
        return Decision(
            Word.UNSAFE,
            f"{prod.strategy} {prod.status}, but {bar}",
            f"do not upgrade with {prod.strategy}: {bar} (docs/gate.md)",
        )
    if failed_cases:
        s = "s" * (failed_cases != 1)
        return Decision(
            Word.UNDECIDED,
            f"{failed_cases} test{s} failed other than by a run outcome (see the test report)",
            f"fix the {failed_cases} test{s} that failed other than by a run outcome (pytest's "
            f"report above), then run again; the verdict alone says: {verdict.advice}",
        )
    if prod.status is Status.SAFE:
        return Decision(Word.SAFE, f"{prod.strategy} SAFE: {prod.why}", verdict.advice)
    return Decision(Word.UNDECIDED, f"{prod.strategy} {prod.status}: {prod.why}", verdict.advice)


def combine(decisions: Iterable[Decision], *, empty: str) -> Decision:
    """Several groups' decisions as one (the report): UNSAFE if any is, else UNDECIDED if any
    is, else SAFE; no group at all is UNDECIDED (`empty` says why): fail closed."""
    decisions = list(decisions)
    if not decisions:
        return Decision(Word.UNDECIDED, empty, "run the production strategy's race cases")
    for word in (Word.UNSAFE, Word.UNDECIDED):
        hit = [d for d in decisions if d.word is word]
        if hit:
            more = f" (and {len(hit) - 1} more)" if len(hit) > 1 else ""
            return Decision(word, hit[0].reason + more, hit[0].next)
    return Decision(Word.SAFE, decisions[0].reason, decisions[0].next)
