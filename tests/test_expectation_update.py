"""`python -m racegate expectations [--update]`: race.toml rows proposed and rewritten from runs."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from racegate.harness.doors import cli
from racegate.harness.judge import expectation_update as eu
from racegate.harness.judge import race_expectations as rx
from racegate.harness.scenario.vocab import CacheState, Strategy
from tests.test_baselines import make_record, write

TABLE = """# a header comment that must survive rewrites

[[expected_failure]]
torch = ">=2.9,<2.14"
device = "cuda"
strategies = ["per_device"]
outcomes = ["nested_fx_error", "hang"]
reason = "global flag"
source = "eval_frame.py"

[[expected_failure]]
torch = ">=2.11,<2.13"
device = "cuda"
strategies = ["singleton"]
outcomes = ["nested_fx_error"]
strict = false
reason = "flaky"
source = "results/x"
"""
PRODUCTION = Strategy.WARMUP_LOCKED


def table(tmp_path: Path, text: str = TABLE) -> Path:
    path = tmp_path / "race.toml"
    path.write_text(text)
    return path


def cuda(strategy: str, torch: str = "2.13.0+cu130", **kw) -> object:
    return make_record(strategy=strategy, torch=torch, transformers="5.17.0", devices="0",
                       tpd=2, **kw)  # fmt: skip


def run_cli(tmp_path: Path, records: list, *extra: str) -> int:
    path = write(tmp_path / "runs.jsonl", records)
    return cli.main(["expectations", str(path), "--table", str(tmp_path / "race.toml"), *extra])


def test_a_strict_row_that_xpassed_everywhere_is_narrowed_below_the_release(tmp_path: Path) -> None:
    runs = [cuda("per_device") for _ in range(3)]
    proposal = eu.propose(rx.load(table(tmp_path)), runs, PRODUCTION)
    assert proposal.narrow == {1: (">=2.9,<2.13", proposal.narrow[1][1])}
    assert "XPASS" in proposal.narrow[1][1] and not proposal.add and not proposal.delete


def test_a_strict_row_that_xpassed_at_its_lowest_release_is_deleted(tmp_path: Path) -> None:
    runs = [cuda("per_device", torch="2.9.1") for _ in range(2)]
    proposal = eu.propose(rx.load(table(tmp_path)), runs, PRODUCTION)
    assert list(proposal.delete) == [1]


def test_one_failing_run_keeps_a_strict_row_and_non_strict_rows_are_kept(tmp_path: Path) -> None:
    runs = [cuda("per_device"), cuda("per_device", nested=1), cuda("singleton", torch="2.12.0")]
    proposal = eu.propose(rx.load(table(tmp_path)), runs, PRODUCTION)
    assert not proposal.changes and proposal.lines()[0].startswith("no change")


def test_a_new_failure_is_proposed_and_needs_reason_and_source(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    path = table(tmp_path)
    runs = [cuda("warmup", other="recompile_blocked", torch="2.15.0+cu130") for _ in range(3)]
    assert run_cli(tmp_path, runs, "--update") == 2
    out, err = capsys.readouterr()
    assert "add row (torch 2.15 transformers 5.17 cuda warmup cold 1x2: 3/3 runs failed" in out
    assert 'torch = ">=2.15,<2.16"' in out and "strict = true" in out
    assert "1 new row(s) need --reason and --source" in err and err.count("\n") == 1
    assert path.read_text() == TABLE  # nothing written

    assert run_cli(tmp_path, runs, "--update", "--reason", "cache lookup", "--source", "PR 1") == 0
    assert "wrote" in capsys.readouterr().out
    rows = rx.load(path)
    assert [r.reason for r in rows] == ["global flag", "flaky", "cache lookup"]
    assert rows[2].source == "PR 1" and rows[2].strict
    hit = rx.match(rows, torch_version="2.15.0+cu130", transformers_version="5.17.0",
                   device="cuda:0", strategy=Strategy.WARMUP, cache_state=CacheState.COLD,
                   threads_per_device=2, devices=1)  # fmt: skip
    assert hit is rows[2]
    assert path.read_text().startswith("# a header comment that must survive rewrites\n")
    # the run now agrees with the table: a second update changes nothing
    assert run_cli(tmp_path, runs, "--update") == 0
    assert "no change" in capsys.readouterr().out


def test_a_failure_in_fewer_than_all_runs_gets_a_non_strict_row(tmp_path: Path) -> None:
    runs = [cuda("warmup", other="hang"), cuda("warmup"), cuda("warmup", nested=1)]
    proposal = eu.propose(rx.load(table(tmp_path)), runs, PRODUCTION)
    ((raw, why),) = proposal.add
    assert raw["strict"] is False and raw["outcomes"] == ["nested_fx_error", "hang"]
    assert "2/3 runs failed" in why


def test_the_production_strategy_is_rejected_never_given_a_row(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    table(tmp_path)
    runs = [cuda(str(PRODUCTION), other="crash") for _ in range(3)]
    assert run_cli(tmp_path, runs, "--update", "--reason", "r", "--source", "s") == 1
    out = capsys.readouterr().out
    assert "rejected: " in out and "production strategy may never be expected to fail" in out
    assert (tmp_path / "race.toml").read_text() == TABLE


def test_an_outcome_the_matching_row_does_not_list_is_reported(tmp_path: Path) -> None:
    proposal = eu.propose(rx.load(table(tmp_path)), [cuda("per_device", other="oom")], PRODUCTION)
    assert any("row 1 matched runs with oom" in n for n in proposal.notes)


def test_rewriting_the_committed_table_keeps_every_row_as_written(tmp_path: Path) -> None:
    committed = rx.DEFAULT_TABLE.read_text()
    path = table(tmp_path, committed)
    text = eu.apply(eu.Proposal(rx.load(path)), path, reason=None, source=None)
    assert tomllib.loads(text) == tomllib.loads(committed)
    assert eu.header_of(text) == eu.header_of(committed)


def test_bad_records_or_table_are_usage_errors(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    table(tmp_path, TABLE.replace("strict = false", 'strict = "false"'))
    assert run_cli(tmp_path, [cuda("per_device")]) == 2
    assert "row 2: strict is 'false'" in capsys.readouterr().err
