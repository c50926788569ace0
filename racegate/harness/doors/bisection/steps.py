"""A bisection step's class from its evidence (probes, control, production); names for a change.

The race selection's verdict (racegate.harness.judge.verdict.decide) says per strategy SAFE / UNSAFE
/ MASKED / INCONCLUSIVE; a bisection needs one more thing of each release: where the hazard
stands on this machine. That is the step's class (`Hazard`):

- RACES: the positive control showed the race here (a run whose record shows it,
  racegate.harness.judge.race_evidence): the race can be produced, so the production strategy's
  clean runs count (SAFE with power, else INCONCLUSIVE and asked again).
- MASKED: the control ran in every cell and never failed, and a nested-FX probe
  (verdict.RACE_PROBES) reads hazard: the hazard is in this torch, the race selection cannot
  show it. A decided state for the search (neither good nor a flake), though the gate's word
  for the release stays UNDECIDED.
- GONE: the control never failed and the nested-FX probes read safe: fixed upstream.
- PRESENT: probes only (no race selection): a gating probe reads hazard.
- UNCLEAR: nothing decides the class (the control failed for another reason, did not run, or a
  probe hung): the step is asked again, never taken as either side.

Pure: no torch, no processes.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from enum import StrEnum

from racegate.harness.judge.gate import Word
from racegate.harness.judge.verdict import RACE_PROBES, Verdict


class Hazard(StrEnum):
    RACES = "RACES"
    MASKED = "MASKED"
    GONE = "GONE"
    PRESENT = "PRESENT"
    UNCLEAR = "UNCLEAR"


def from_probes(verdicts: Mapping[str, str], names: Sequence[str]) -> tuple[Hazard, str]:
    """The class from probes alone: PRESENT when one of `names` reads hazard, GONE when all
    read safe or n/a, else UNCLEAR (a probe hung, failed or is missing)."""
    names = tuple(names) or RACE_PROBES
    hazard = [p for p in names if verdicts.get(p) == "hazard"]
    if hazard:
        return Hazard.PRESENT, f"probe {', '.join(hazard)}: hazard"
    unclear = [p for p in names if verdicts.get(p) not in ("safe", "n/a")]
    if unclear:
        return Hazard.UNCLEAR, f"probe {', '.join(unclear)}: no verdict"
    return Hazard.GONE, f"probes {', '.join(names)}: safe or n/a"


def from_race(verdict: Verdict, probes: Mapping[str, str]) -> tuple[Hazard, str]:
    """The class from the race selection's verdict (its control's rates per cell) and the
    nested-FX probes' verdicts on this torch."""
    control = verdict.control
    rates = verdict.rates
    hits, runs = sum(r.hits for r in rates), sum(r.runs for r in rates)
    if hits:
        cells = "; ".join(r.describe() for r in rates)
        return Hazard.RACES, f"{control} showed the race in {hits} of {runs} runs ({cells})"
    if not rates:
        return Hazard.UNCLEAR, f"{control}, the positive control, did not run"
    others = [r for r in rates if r.others]
    if others:
        cells = "; ".join(r.describe() for r in others)
        return Hazard.UNCLEAR, f"{control} failed for another reason, not the race ({cells})"
    hazard = [p for p in RACE_PROBES if probes.get(p) == "hazard"]
    if hazard:
        return Hazard.MASKED, (
            f"{control} never failed ({runs} runs) while probe {', '.join(hazard)} reads hazard"
        )
    unclear = [p for p in RACE_PROBES if probes.get(p) not in ("safe", "n/a")]
    if unclear:
        return Hazard.UNCLEAR, (
            f"{control} never failed ({runs} runs) and probe {', '.join(unclear)} has no verdict"
        )
    return Hazard.GONE, (
        f"{control} never failed ({runs} runs) and probes {', '.join(RACE_PROBES)} read safe"
    )


def settled(hazard: str, decision: Word) -> bool:
    """Whether a step decided something the search can compare: a known class (or none given:
    the decision alone) and a decided word, except that MASKED is itself the answer. The
    production strategy's word enters through the decision (racegate.harness.judge.gate.combine of
    it and the gating probes): INCONCLUSIVE for want of power leaves the decision UNDECIDED, so
    the step is asked again, unless a gating probe already makes it UNSAFE (then it cannot be
    taken as good)."""
    if hazard == Hazard.UNCLEAR:
        return False
    return hazard == Hazard.MASKED or decision is not Word.UNDECIDED


def names(before: tuple[str, Word], after: tuple[str, Word]) -> tuple[str, str]:
    """(what the newer release is, what the older one is) for a change between two steps'
    (class, decision) states: 'first masked' / 'last where the race shows', 'first fixed' /
    'last bad', 'first bad' / 'last good', ..."""
    (h0, d0), (h1, d1) = before, after
    if h0 and h1 and h0 != h1:
        if h1 == Hazard.MASKED:
            return "first masked", (
                "last where the race shows" if h0 == Hazard.RACES else "last not masked"
            )
        if h1 == Hazard.GONE:
            return "first fixed", "last bad"
        if h0 == Hazard.GONE:
            return "first bad", "last good"
        if h0 == Hazard.MASKED and h1 == Hazard.RACES:
            return "first unmasked", "last masked"
    if d1 is Word.SAFE and d0 is not Word.SAFE:
        return "first fixed", "last bad"
    if d1 is Word.UNSAFE and d0 is not Word.UNSAFE:
        return "first bad", "last good"
    return "first changed", "last unchanged"
