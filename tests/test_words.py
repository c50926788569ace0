"""The verdict words' text ships in the package (racegate.harness.judge.words): every word the
judge decides has an entry, `racegate explain WORD` prints it, docs/vocabulary.md's table is
generated from it, and the verdict block's last line names the command."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from racegate.harness.doors import cli
from racegate.harness.judge import words
from racegate.harness.judge.gate import Decision, Word
from racegate.harness.judge.verdict import Status

ROOT = Path(__file__).resolve().parent.parent
BLOCK = re.compile(r"<!-- words:[^\n]*-->\n(.*?)\n<!-- /words -->", re.DOTALL)


def test_every_word_decided_has_an_entry() -> None:
    for word in [*(str(s) for s in Status), *(str(w) for w in Word)]:
        assert words.lookup(word).means and words.lookup(word).todo, word
    for word in Word:  # the decision's exit, as the gate gives it
        assert words.lookup(word).exit == Decision(word, "", "").exit_code, word


def test_the_vocabulary_page_holds_the_generated_table() -> None:
    page = (ROOT / "docs" / "vocabulary.md").read_text()
    found = BLOCK.search(page)
    assert found is not None, "docs/vocabulary.md lost its <!-- words: --> block"
    assert found.group(1) == words.markdown(), (
        "docs/vocabulary.md's words table differs from racegate/harness/judge/words.py; "
        f"paste this between its markers:\n{words.markdown()}"
    )


@pytest.mark.parametrize("given", ["UNDECIDED", "undecided", "NOT RUN", "not  run"])
def test_explain_prints_the_entry(given: str, capsys: pytest.CaptureFixture) -> None:
    assert cli.main(["explain", *given.split()]) == 0
    out = capsys.readouterr().out
    entry = words.lookup(given)
    assert out.startswith(entry.word) and "What to do:" in out
    assert " ".join(out.split()).count(" ".join(entry.means.split())) == 1


def test_explain_of_an_unknown_word_is_a_usage_error(capsys: pytest.CaptureFixture) -> None:
    assert cli.main(["explain", "MAYBE"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("racegate: error: unknown word 'MAYBE'; choose from: SAFE, ")
    assert "\n" not in err


def test_the_last_line_names_the_command() -> None:
    line = Decision(Word.UNDECIDED, "why", "run more").line()
    assert line == "UNDECIDED: run more (exit 7; racegate explain UNDECIDED)"
