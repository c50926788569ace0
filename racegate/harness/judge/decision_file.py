"""A session's gate decision as a file: the one place it crosses from pytest to another process.

`pytest -m race --decision-file PATH` writes the decision its verdict block ends with
(racegate.harness.judge.gate.Decision: word, why, what to do; its exit code follows the word) with
the records file it judged, as versioned JSON. `racegate upgrade` reads each side's through `read`,
which takes it only when it is whole, of this schema, about the records that side wrote, and
pytest exited with the decision's code: anything else is a DecisionFileError of one line saying
which, and that side is UNDECIDED (fail closed), never a guess from the printed text.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from racegate.harness.judge.gate import Decision, Word
from racegate.harness.run.files import write_whole

SCHEMA_VERSION = 1


class DecisionFileError(ValueError):
    """The decision file is missing, unreadable, of another schema, or disagrees with the
    session (its records, pytest's exit code): one line."""


@dataclass(frozen=True)
class SessionDecision:
    """What a pytest session decided, and about which records."""

    decision: Decision
    records: str  # the --results file the session appended to and judged

    def to_json(self) -> dict[str, object]:
        d = self.decision
        return {
            "schema": SCHEMA_VERSION,
            "word": str(d.word),
            "reason": d.reason,
            "next": d.next,
            "exit_code": d.exit_code,
            "records": self.records,
        }

    @classmethod
    def from_json(cls, data: object, where: Path) -> SessionDecision:
        if not isinstance(data, dict):
            raise DecisionFileError(f"{where}: not a JSON object")
        if data.get("schema") != SCHEMA_VERSION:
            raise DecisionFileError(
                f"{where}: schema {data.get('schema')!r}, this racegate reads {SCHEMA_VERSION}"
            )
        word = data.get("word")
        if word not in set(Word):
            raise DecisionFileError(f"{where}: word {word!r} is not one of {', '.join(Word)}")
        texts = {k: data.get(k) for k in ("reason", "next", "records")}
        bad = [k for k, v in texts.items() if not isinstance(v, str)]
        if bad:
            raise DecisionFileError(f"{where}: {bad[0]} is {data.get(bad[0])!r}, not a string")
        decision = Decision(Word(word), texts["reason"], texts["next"])
        if data.get("exit_code") != decision.exit_code:
            raise DecisionFileError(
                f"{where}: exit_code {data.get('exit_code')!r} is not {word}'s "
                f"({decision.exit_code})"
            )
        return cls(decision, texts["records"])


def write(path: Path, decided: SessionDecision) -> None:
    """Write the file whole or not at all (racegate.harness.run.files)."""
    write_whole(path, json.dumps(decided.to_json(), indent=1, sort_keys=True) + "\n")


def read(path: Path, *, records: Path, exit_code: int) -> Decision:
    """The decision a session wrote to `path`, checked against what its caller saw: the
    session judged `records`, and pytest exited with `exit_code`. DecisionFileError otherwise."""
    try:
        text = path.read_text()
    except FileNotFoundError:
        raise DecisionFileError(f"no decision file {path} (no race case was judged)") from None
    except OSError as exc:
        raise DecisionFileError(f"{path}: cannot read it: {exc.strerror}") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise DecisionFileError(f"{path}: not JSON ({exc})") from None
    decided = SessionDecision.from_json(data, path)
    if Path(decided.records) != records:
        raise DecisionFileError(
            f"{path}: it judged {decided.records}, not this session's records {records}"
        )
    if exit_code != decided.decision.exit_code:
        raise DecisionFileError(
            f"{path} says {decided.decision.word} (exit {decided.decision.exit_code}), but "
            f"pytest exited {exit_code}"
        )
    return decided.decision
