"""Deterministic race probes: each probe's verdict on the installed torch against the table.

The probes run once per module, in a fresh subprocess
(racegate.harness.probes.runner.run_probes_isolated); each verdict must equal its entry in
racegate/harness/expectations/probes.toml. No entry for this torch: fail (in racegate's checkout:
add a row; elsewhere: racegate.cases.advice says what a user can do).
"""

from __future__ import annotations

import pytest

from racegate.cases import advice
from racegate.harness.judge import probe_expectations
from racegate.harness.judge.probe_expectations import Status
from racegate.harness.probes import runner as probes


@pytest.fixture(scope="module")
def probe_run() -> probes.ProbeRun:
    return probes.run_probes_isolated()


@pytest.fixture(scope="module")
def probe_table() -> list[probe_expectations.Expectation]:
    return probe_expectations.load()


@pytest.mark.race
@pytest.mark.parametrize("name", list(probes.PROBES))
def test_race_probe(
    name: str,
    probe_run: probes.ProbeRun,
    probe_table: list[probe_expectations.Expectation],
    pytestconfig: pytest.Config,
) -> None:
    result = next((r for r in probe_run if r.name == name), None)
    if result is None:
        pytest.fail(f"probe {name} produced no result:\n{probes.format_table(probe_run)}")
    status, message = probe_expectations.compare(result, probe_table)
    if status is not Status.MATCH:  # the maintainer's steps only in racegate's own checkout
        pytest.fail(advice.probe_failure(status, result, message, pytestconfig), pytrace=False)
