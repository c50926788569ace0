"""The release bisection's search (racegate.harness.doors.bisection.search) over a scripted oracle,
and the release-range parsing (racegate.harness.doors.bisection.releases): the search logic, not
torch."""

from __future__ import annotations

from collections.abc import Iterable

import pytest

from racegate.harness.doors.bisection import releases
from racegate.harness.doors.bisection.search import Evidence, Outcome, bisect
from racegate.harness.judge.gate import EXIT_SAFE, EXIT_UNDECIDED, EXIT_UNSAFE, Word

S, U, X = Word.SAFE, Word.UNSAFE, Word.UNDECIDED
RELEASES = ["2.10.0", "2.11.0", "2.12.1", "2.13.0", "2.14.1", "2.15.0"]


class Scripted:
    """release -> successive decisions (the last one repeats); counts the asks."""

    def __init__(self, script: dict[str, Iterable[Word]]) -> None:
        self.script = {r: list(ws) for r, ws in script.items()}
        self.asked: list[str] = []

    def __call__(self, release: str) -> Evidence:
        self.asked.append(release)
        words = self.script[release]
        word = words.pop(0) if len(words) > 1 else words[0]
        verdict = "hazard" if word is U else "safe"
        return Evidence(release, word, {"probe p": verdict}, commit=f"sha-{release}")


def monotone(first_fixed: str) -> Scripted:
    i = RELEASES.index(first_fixed)
    return Scripted({r: [U if k < i else S] for k, r in enumerate(RELEASES)})


@pytest.mark.parametrize("first", RELEASES[1:])
def test_finds_the_first_fixed_release_and_confirms_both_neighbours(first: str) -> None:
    oracle = monotone(first)
    result = bisect(RELEASES, oracle, confirm=2)
    assert result.outcome is Outcome.CHANGED
    assert result.after is not None and result.before is not None
    assert (result.before.release, result.after.release) == (
        RELEASES[RELEASES.index(first) - 1],
        first,
    )
    assert result.direction == "first fixed"
    assert result.changed_observations() == {"probe p": ("hazard", "safe")}
    # each neighbour asked at least 1 + confirm times
    assert oracle.asked.count(result.before.release) >= 3
    assert oracle.asked.count(result.after.release) >= 3
    assert result.exit_code == EXIT_SAFE


def test_first_bad_direction_and_exit_code() -> None:
    oracle = Scripted({r: [S if r < "2.13" else U] for r in RELEASES})
    result = bisect(RELEASES, oracle)
    assert result.direction == "first bad" and result.after is not None
    assert result.after.release == "2.13.0" and result.exit_code == EXIT_UNSAFE


def test_an_undecided_step_is_asked_again_until_it_decides_never_taken_as_good() -> None:
    script = {r: [U if r < "2.14" else S] for r in RELEASES}
    script["2.13.0"] = [X, X, U]  # decides on the third ask
    oracle = Scripted(script)
    result = bisect(RELEASES, oracle, tries=3)
    assert result.outcome is Outcome.CHANGED and result.after is not None
    assert result.after.release == "2.14.1"
    assert oracle.asked.count("2.13.0") >= 3


def test_the_bound_on_asks_is_reported_and_the_exit_is_undecided() -> None:
    script = {r: [U if r < "2.14" else S] for r in RELEASES}
    script["2.13.0"] = [X]
    result = bisect(RELEASES, Scripted(script), tries=2)
    assert result.outcome is Outcome.UNDECIDED
    assert "2.13.0" in result.why and "2 tries" in result.why
    assert result.exit_code == EXIT_UNDECIDED


def test_a_neighbour_that_flips_on_its_re_run_names_no_culprit() -> None:
    script = {r: [U if r < "2.14" else S] for r in RELEASES}
    script["2.14.1"] = [S, U]  # safe once, then unsafe: flaky
    result = bisect(RELEASES, Scripted(script), confirm=1)
    assert result.outcome is Outcome.FLAKY and "2.14.1" in result.why
    assert result.exit_code == EXIT_UNDECIDED


def test_no_change_in_the_range() -> None:
    result = bisect(RELEASES, Scripted({r: [U] for r in RELEASES}))
    assert result.outcome is Outcome.UNCHANGED and result.exit_code == EXIT_UNSAFE


def test_bad_arguments() -> None:
    with pytest.raises(ValueError, match="two releases"):
        bisect(["2.13.0"], Scripted({"2.13.0": [S]}))
    with pytest.raises(ValueError, match="tries"):
        bisect(RELEASES, monotone("2.14.1"), tries=0)


OFFERED = (
    "2.15.0, 2.14.1, 2.14.0, 2.13.0+cpu, 2.13.0, 2.12.1, 2.12.0, 2.11.0, 2.10.0, 2.9.1, "
    "2.16.0rc1, 2.15.0.dev20260101"
)
PIP_OUTPUT = f"""WARNING: pip index is currently an experimental command.
torch (2.15.0)
Available versions: {OFFERED}
  INSTALLED: 2.13.0+cpu
"""


def test_pip_index_output_parsed_final_releases_kept_in_range() -> None:
    offered = releases.parse_index_output(PIP_OUTPUT)
    lo, hi = releases.parse_range("2.10..2.15", "--torch")
    assert releases.in_range(offered, lo, hi) == [
        "2.10.0",
        "2.11.0",
        "2.12.0",
        "2.12.1",
        "2.13.0",
        "2.14.0",
        "2.14.1",
        "2.15.0",
    ]
    lo, hi = releases.parse_range("2.12.1..2.14.0", "--torch")
    assert releases.in_range(offered, lo, hi) == ["2.12.1", "2.13.0", "2.14.0"]


@pytest.mark.parametrize("text", ["2.10", "2.15..2.10", "a..b", "..2.1"])
def test_a_bad_range_names_the_flag(text: str) -> None:
    with pytest.raises(ValueError, match="--torch"):
        releases.parse_range(text, "--torch")


def test_no_versions_line_is_an_error() -> None:
    with pytest.raises(ValueError, match="Available versions"):
        releases.parse_index_output("ERROR: No matching distribution found for torhc")


def test_the_printed_answer_names_both_neighbours_commits_and_the_compare_range() -> None:
    from racegate.harness.doors.bisection.command import format_result, to_json

    result = bisect(RELEASES, monotone("2.14.1"))
    text = format_result(result, "torch", 12.0)
    assert "first fixed: torch 2.14.1 (commit sha-2.14.1): SAFE" in text
    assert "last bad: torch 2.13.0 (commit sha-2.13.0): UNSAFE" in text
    assert "https://github.com/pytorch/pytorch/compare/sha-2.13.0...sha-2.14.1" in text
    assert "why: probe p hazard -> safe" in text
    doc = to_json(result, "torch", 12.0)
    assert doc["exit_code"] == EXIT_SAFE and doc["changed"] == {"probe p": ["hazard", "safe"]}
    tf = bisect(["5.6.0", "5.8.1"], Scripted({"5.6.0": [S], "5.8.1": [U]}))
    assert "transformers/compare/v5.6.0...v5.8.1" in format_result(tf, "transformers", 1.0)
