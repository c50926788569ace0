"""racegate/harness/expectations/race.toml: its loader's checks, version-range matching, the
production rule."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from racegate.harness.judge import race_expectations as rx
from racegate.harness.judge.expectations import DeviceKind, Scope, parse_range
from racegate.harness.run.checked import GateInputError
from racegate.harness.scenario.vocab import STRATEGIES, CacheState, Outcome, Strategy, StrategySpec

ROW = """
[[expected_failure]]
torch = ">=2.9,<2.14"
device = "{device}"
strategies = [{strategies}]
outcomes = ["nested_fx_error", "hang"]
reason = "global flag"
source = "eval_frame.py"
"""


def write(
    tmp_path: Path, device: str = "cuda", strategies: str = '"per_device"', extra: str = ""
) -> Path:
    p = tmp_path / "race.toml"
    p.write_text(ROW.format(device=device, strategies=strategies) + extra)
    return p


def find(rows, torch_version="2.11.0+cu130", device="cuda:0", tpd=2, strategy=Strategy.PER_DEVICE):
    return rx.match(
        rows,
        torch_version=torch_version,
        transformers_version="5.17.0",
        device=device,
        strategy=strategy,
        cache_state=CacheState.COLD,
        threads_per_device=tpd,
        devices=2,
    )


def test_match_by_range_device_strategy_threads(tmp_path: Path) -> None:
    rows = rx.load(write(tmp_path))
    row = find(rows)
    assert row is not None and row.strict
    assert row.outcomes == (Outcome.NESTED_FX_ERROR, Outcome.HANG)
    assert find(rows, torch_version="2.14.1") is None
    assert find(rows, device="cpu") is None
    assert find(rows, tpd=1) is not None  # 2 devices × 1 thread is still 2 threads
    assert find(rows, strategy=Strategy.WARMUP) is None


def test_a_row_covering_the_production_strategy_loads_it_is_no_usage_error(tmp_path: Path) -> None:
    """Issue 54: a trainer gated with `--production-strategy warmup` got exit 4, "the production
    strategy may never be expected to fail". Such a row is an answer (the verdict quotes it:
    tests/test_verdict.py), not a bad table."""
    rows = rx.load(write(tmp_path, strategies='"per_device", "warmup"'))
    assert find(rows, strategy=Strategy.WARMUP) is not None


def own_spec(like: Strategy, **changed: bool) -> StrategySpec:
    """A workload's own strategy spec that meets the race as `like` does (only fields outside
    RACE_FIELDS changed)."""
    return dataclasses.replace(STRATEGIES[like], **changed)


def test_torch_rows_match_any_workload_by_spec_drafter_rows_the_drafter_by_name(
    tmp_path: Path,
) -> None:
    """A fact about torch holds for any trainer whose strategy meets the race alike, whatever it
    names it; a fact about racegate's drafter (its kernels, its measured detection) for the
    drafter alone."""
    table = tmp_path / "race.toml"
    table.write_text(
        ROW.format(device="any", strategies='"warmup"') + 'about = "torch"\n'
        + ROW.format(device="any", strategies='"singleton"') + 'about = "drafter"\n'
    )  # fmt: skip
    torch_row, drafter_row = rx.load(table)
    assert (torch_row.about, drafter_row.about) == ("torch", "drafter")

    def case(strategy: str, spec: StrategySpec | None, drafter: bool) -> int | None:
        row = rx.match(
            [torch_row, drafter_row], torch_version="2.11.0", transformers_version="5.17.0",
            device="cuda:0", strategy=strategy, cache_state=CacheState.COLD,
            threads_per_device=2, spec=spec, drafter=drafter,
        )  # fmt: skip
        return None if row is None else row.row

    # A user's own name, warmed up like `warmup`: the torch row, by its spec.
    assert case("warmed_up", own_spec(Strategy.WARMUP, counts_fallbacks=False), False) == 1
    # The same name locked (warmup_locked's spec): not warmup's race, no row.
    assert case("warmed_up", STRATEGIES[Strategy.WARMUP_LOCKED], False) is None
    # A user workload's `warmup` (racegate's name keeps the registry's spec): the torch row.
    assert case("warmup", None, False) == 1
    # A user workload's `singleton`: the drafter's row is not about it.
    assert case("singleton", None, False) is None
    assert case("singleton", None, True) == 2  # the drafter's own
    # Strict only where the detection was measured: the drafter.
    assert torch_row.strict_for(True) and not torch_row.strict_for(False)
    assert drafter_row.strict_for(True)


def test_the_committed_table_says_what_each_row_is_about() -> None:
    rows = rx.load()
    assert all(r.about in rx.ABOUT and "about" in r.raw for r in rows), [r.row for r in rows]
    assert {r.about for r in rows} == {"torch", "drafter"}


def test_about_is_checked(tmp_path: Path) -> None:
    with pytest.raises(GateInputError, match="row 1: about is 'mine'; choose from: torch, drafter"):
        rx.load(write(tmp_path, extra='about = "mine"\n'))


@pytest.mark.parametrize(
    ("edit", "needle"),
    [
        # each was a traceback, a silent acceptance or a wrong reading
        (
            lambda t: "expected_failure = 5\n",
            "race.toml: expected_failure is 5; expected [[expected_failure]] rows",
        ),
        (
            lambda t: t + 'strict = "false"\n',
            "race.toml row 1: strict is 'false'; expected true or false",
        ),
        (
            lambda t: t + "stirct = false\n",
            "race.toml row 1: unknown key 'stirct'; allowed: about, cache_states,",
        ),
        (
            lambda t: t.replace('outcomes = ["nested_fx_error", "hang"]', "outcomes = []"),
            "race.toml row 1: outcomes is []; expected a non-empty list of: nested_fx_error,",
        ),
        (
            lambda t: t.replace('"hang"]', '"ok"]'),
            "race.toml row 1: outcomes is 'ok'; choose from: nested_fx_error,",
        ),
        (
            lambda t: t.replace('device = "cuda"', 'device = "tpu"'),
            "race.toml row 1: device is 'tpu'; choose from: cpu, cuda, any",
        ),
        (
            lambda t: t.replace('"per_device"', '"fast"'),
            "race.toml row 1: strategies is 'fast'; choose from: per_device,",
        ),
        (
            lambda t: t.replace('strategies = ["per_device"]', 'strategies = "per_device"'),
            "race.toml row 1: strategies is 'per_device'; expected a non-empty list of: per_device",
        ),
        (
            lambda t: t + "min_threads = 2.5\n",
            "race.toml row 1: min_threads is 2.5; expected an integer ≥ 1",
        ),
        (
            lambda t: t + "min_devices = true\n",
            "race.toml row 1: min_devices is True; expected an integer ≥ 1",
        ),
        (
            lambda t: t + 'cache_states = ["hot"]\n',
            "race.toml row 1: cache_states is 'hot'; choose from: cold, warm, deleted",
        ),
        (
            lambda t: t.replace('reason = "global flag"', "reason = 3"),
            "race.toml row 1: reason is 3; expected a non-empty string",
        ),
        (lambda t: t.replace('source = "eval_frame.py"', ""), "race.toml row 1: missing source"),
        (
            lambda t: t.replace('">=2.9,<2.14"', '"==2.11"'),
            "race.toml row 1: unsupported clause '==2.11' in torch",
        ),
        (
            lambda t: t.replace('">=2.9,<2.14"', "2.11"),
            "race.toml row 1: torch is 2.11; expected a string range",
        ),
        (lambda t: t + 'transformers = "five"\n', "race.toml row 1: bad transformers range 'five'"),
        (
            lambda t: "[expected_failures]\n",
            "race.toml: unknown key 'expected_failures'; allowed: expected_failure",
        ),
    ],
    # Ids without the file name: `pytest -k race` selects the race cases, not these tests.
    ids=lambda v: None if callable(v) else v.replace("race.toml", "table"),
)
def test_bad_tables_are_one_line_errors_naming_file_row_field_and_choices(
    tmp_path: Path, edit, needle: str
) -> None:
    path = tmp_path / "race.toml"
    path.write_text(edit(ROW.format(device="cuda", strategies='"per_device"')))
    with pytest.raises(GateInputError) as info:
        rx.load(path)
    message = str(info.value)
    assert needle in message and "\n" not in message


def test_an_unreadable_or_malformed_table_is_an_input_error(tmp_path: Path) -> None:
    with pytest.raises(GateInputError, match="cannot read the race table"):
        rx.load(tmp_path)  # a directory
    bad = tmp_path / "race.toml"
    bad.write_text("[[expected_failure]\n")
    with pytest.raises(GateInputError, match="cannot read the race table"):
        rx.load(bad)


def test_bad_version_is_an_input_error() -> None:
    with pytest.raises(GateInputError, match="bad torch version 'two'"):
        rx.release("two")


def test_committed_table_loads_and_spares_production() -> None:
    rows = rx.load()
    assert rows, "the committed table should hold the known-bad rows"
    assert all(r.reason and r.source for r in rows)


def test_topology_bounds(tmp_path: Path) -> None:
    rows = rx.load(write(tmp_path, extra="min_devices = 2\nmin_threads_per_device = 2\n"))
    assert find(rows, tpd=2) is not None
    assert find(rows, tpd=1) is None
    one_gpu = rx.match(
        rows,
        torch_version="2.11.0",
        transformers_version="5.17.0",
        device="cuda:0",
        strategy=Strategy.PER_DEVICE,
        cache_state=CacheState.COLD,
        threads_per_device=4,
        devices=1,
    )
    assert one_gpu is None


def test_transformers_range(tmp_path: Path) -> None:
    rows = rx.load(write(tmp_path, extra='transformers = ">=5.8,<5.20"\n'))
    assert find(rows) is not None  # 5.17.0
    assert rx.match(rows, torch_version="2.11.0", transformers_version="5.24.0", device="cuda:0",
                    strategy=Strategy.PER_DEVICE, cache_state=CacheState.COLD,
                    threads_per_device=2, devices=2) is None  # fmt: skip


@pytest.mark.parametrize(
    ("scope", "device", "covered"),
    [
        (Scope(parse_range(">=2.10,<2.14", "t", "torch")), "cpu", True),
        (Scope(parse_range(">=2.10,<2.14", "t", "torch")), "cuda:1", True),
        (Scope(parse_range(">=2.10,<2.14", "t", "torch"), device=DeviceKind.CUDA), "cpu", False),
        (Scope(parse_range(">=2.10,<2.14", "t", "torch"), device=DeviceKind.CUDA), "cuda:0", True),
        (Scope(parse_range(">=2.10,<2.14", "t", "torch"), device=DeviceKind.CPU), "cuda", False),
        (Scope(parse_range(">=2.14", "t", "torch")), "cpu", False),
    ],
)
def test_one_matching_rule_for_devices_and_ranges(scope: Scope, device: str, covered: bool) -> None:
    # the race and probe tables both match through Scope.covers (one rule, one place)
    assert scope.covers(torch_version="2.13.0+cpu", device=device) is covered


@pytest.mark.parametrize("strategy", [Strategy.PER_DEVICE, Strategy.SINGLETON])
@pytest.mark.parametrize("cache_state", list(CacheState))
def test_two_threads_on_one_gpu_may_also_register_vmaps_decompositions_twice(
    strategy: Strategy, cache_state: CacheState
) -> None:
    """One H100, torch 2.11 (results/one-gpu-command-times): besides the FX race, 2 of
    per_device's 12 runs and 1 of singleton's 4 failed on torch's first-call registration of
    vmap decompositions, made twice by two threads (`other_error`). The one-GPU row expects it,
    so such a case is an expected failure, not a FAILED item beside a SAFE decision."""
    rows = rx.load()
    row = rx.match(rows, torch_version="2.11.0+cu130", transformers_version="5.17.0",
                   device="cuda:0", strategy=strategy, cache_state=cache_state,
                   threads_per_device=2, devices=1)  # fmt: skip
    assert row is not None and not row.strict
    assert Outcome.OTHER_ERROR in row.outcomes, row
    assert "lazy_load_decompositions" in row.source, row.source
