"""What each verdict word means and what to do about it: the one text, shipped in the package.

`racegate explain WORD` (and `python -m racegate explain WORD`) prints an entry, so a user of an
installed racegate, who has no docs/ folder, can read what the verdict block's last line said;
that line names the command (racegate.harness.judge.gate). docs/vocabulary.md's table of the
words is generated from `WORDS` (`markdown()`; tests/test_words.py fails where the two
differ, printing the table to paste). The words themselves are defined where they
are decided: the decision's in racegate.harness.judge.gate (Word), a strategy's in
racegate.harness.judge.verdict (Status); tests/test_words.py checks each has an entry here.
"""

from __future__ import annotations

import textwrap
from dataclasses import dataclass


@dataclass(frozen=True)
class Meaning:
    """One word: where it is printed, the exit it gives (None: no exit of its own), what it
    means, and what to do."""

    word: str
    where: str
    exit: int | None
    means: str
    todo: str


WORDS: tuple[Meaning, ...] = (
    Meaning(
        "SAFE",
        "the decision (the verdict block's last line), and a strategy's verdict",
        0,
        "The production strategy ran clean here, concurrently, in a private root, while the "
        "positive control (the known-bad strategy) showed that this machine produces the race, "
        "over enough runs that a strategy as race-prone as the control would have been caught "
        "with 99% probability (or a probe says the hazard is gone upstream); its tokens/s and "
        "memory met their bar where they were judged. A strategy's SAFE means the same for "
        "that strategy.",
        "Upgrade with the production strategy as it is. Keep the records (the block names "
        "them) as the evidence.",
    ),
    Meaning(
        "UNSAFE",
        "the decision, and a strategy's verdict",
        1,
        "A run of the strategy failed here: the block's `failed:` lines list each failed run "
        "(cell, repeat, start time, outcome and why). For the decision: a production run "
        "failed, or its tokens/s or memory missed the bar, or (the report) a gating A/B "
        "comparison regressed.",
        "Do not upgrade with this strategy. The last line names what to do instead (a strategy "
        "that was SAFE here, or the failure to read); a strategy other than the production one "
        "being UNSAFE is what the positive control is for and does not fail the gate.",
    ),
    Meaning(
        "UNDECIDED",
        "the decision",
        7,
        "Neither SAFE nor UNSAFE: no production run failed, but nothing shows this machine "
        "would have seen a failure (the production strategy is MASKED, INCONCLUSIVE or NOT "
        "RUN), or a test failed other than by a run outcome, or no race case ran at all. "
        "Missing evidence is never SAFE.",
        "Run what the line says (more runs, the control in every cell, a GPU host where the CPU "
        "masks the race), then decide. Exit 7 is apart from pytest's own codes (0-5, 6).",
    ),
    Meaning(
        "MASKED",
        "a strategy's verdict",
        None,
        "No run of the strategy failed here, but the positive control never failed either while "
        "a probe shows the hazard on this torch: this machine cannot produce the race, so the "
        "clean runs prove nothing (typical of torch 2.13 on CPU).",
        "Run the race cases where the race can be produced (a GPU host); the decision stays "
        "UNDECIDED until then.",
    ),
    Meaning(
        "INCONCLUSIVE",
        "a strategy's verdict",
        None,
        "No run of the strategy failed, but the evidence is short: the control did not run or "
        "fire in a cell, power asks for more runs (the line says how many), runs were still "
        "busy at their deadline, or no run had two threads.",
        "Give it what the line asks: more runs (--racegate-repeat, --racegate-power-cap), the "
        "control in every cell, a longer run timeout.",
    ),
    Meaning(
        "NOT RUN",
        "a strategy's verdict",
        None,
        "The strategy was asked for but no run of it is in the records judged here.",
        "Check the selection (-k, -m, --racegate-strategies) and that its cases were not "
        "skipped (a GPU case on a machine without one).",
    ),
    Meaning(
        "not gated",
        "the report's gate column",
        None,
        "The group has no run of the production strategy (older records): neither SAFE nor UNSAFE.",
        "Run the production strategy's race cases for that group.",
    ),
    Meaning(
        "NO DATA",
        "the report's tables",
        None,
        "A strategy with no run in that group (the verdict's NOT RUN).",
        "As NOT RUN.",
    ),
)
BY_WORD = {m.word.upper(): m for m in WORDS}


def explain_command(word: str) -> str:
    """The command that explains `word` (what the verdict block's last line names)."""
    return f"racegate explain {word}"


def lookup(word: str) -> Meaning:
    """The entry of `word` (any case); ValueError of one line naming the words there are."""
    found = BY_WORD.get(" ".join(word.split()).upper())
    if found is None:
        raise ValueError(
            f"racegate explain: unknown word {word!r}; choose from: "
            f"{', '.join(m.word for m in WORDS)}"
        )
    return found


def explain(word: str, width: int = 88) -> str:
    """The text `racegate explain WORD` prints."""
    m = lookup(word)
    exit_ = f" (exit {m.exit})" if m.exit is not None else ""
    body = [
        f"{m.word}{exit_}: {m.where}",
        "",
        *textwrap.wrap(m.means, width),
        "",
        *textwrap.wrap(f"What to do: {m.todo}", width),
    ]
    return "\n".join(body)


def markdown() -> str:
    """The table docs/vocabulary.md holds between its `words` markers."""
    rows = ["| word | exit | where | what it means | what to do |", "|---|---|---|---|---|"]
    for m in WORDS:
        exit_ = "" if m.exit is None else str(m.exit)
        rows.append(f"| **{m.word}** | {exit_} | {m.where} | {m.means} | {m.todo} |")
    return "\n".join(rows)
