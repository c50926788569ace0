"""Advice about racegate's own tables (race.toml, probes.toml): the maintainer's steps only in
racegate's own checkout, a user's line in any other project (racegate.cases.advice)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

from racegate.cases import advice
from racegate.harness.judge import probe_expectations, race_expectations
from racegate.harness.judge.probe_expectations import Status
from racegate.harness.probes.runner import PROBES, ProbeResult, Verdict
from racegate.harness.run import code_root

ROOT = Path(__file__).resolve().parent.parent
OWN = SimpleNamespace(rootpath=ROOT)  # a session's config, as advice reads it


def test_only_this_checkout_as_the_rootdir_is_the_maintainers(tmp_path: Path) -> None:
    assert code_root.own_checkout(ROOT)  # these tests run from the checkout, not installed
    assert not code_root.own_checkout(tmp_path)
    assert not code_root.own_checkout(ROOT / "tests")


def test_an_expected_failure_tells_a_user_nothing_of_editing_the_tables_rows(
    tmp_path: Path,
) -> None:
    row = race_expectations.load()[0]
    mine = advice.xfail_reason(row, OWN)  # type: ignore[arg-type]
    theirs = advice.xfail_reason(row, SimpleNamespace(rootpath=tmp_path))  # type: ignore[arg-type]
    assert "update or delete that row" in mine
    assert "update or delete" not in theirs and advice.USER_NEXT in theirs
    assert row.reason in theirs


def test_a_probe_the_table_lacks_tells_a_user_what_they_can_do(tmp_path: Path) -> None:
    name = next(iter(PROBES))
    result = ProbeResult(name, Verdict.HAZARD, "it saw the hazard", 0.1, "9.9.0", "cpu")
    status, message = probe_expectations.compare(result, probe_expectations.load())
    assert status is Status.MISSING and "add a row" in message
    assert advice.probe_failure(status, result, message, OWN) == message  # type: ignore[arg-type]
    theirs = advice.probe_failure(status, result, message, SimpleNamespace(rootpath=tmp_path))  # type: ignore[arg-type]
    assert "add a row" not in theirs and "torch 9.9.0" in theirs and "it saw the hazard" in theirs
    assert "nothing in your project to change" in theirs
