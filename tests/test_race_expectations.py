"""The expectations table: version-range matching and the production-strategy rule."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.judge import race_expectations as rx
from harness.vocab import CacheState, Outcome, Strategy

ROW = """
[[expected_failure]]
torch = ">=2.9,<2.14"
device = "{device}"
strategies = [{strategies}]
outcomes = ["nested_fx_error", "hang"]
reason = "global flag"
source = "eval_frame.py"
"""


def write(tmp_path: Path, device: str = "cuda", strategies: str = '"per_device"') -> Path:
    p = tmp_path / "race.toml"
    p.write_text(ROW.format(device=device, strategies=strategies))
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


def test_production_strategy_may_not_be_expected_to_fail(tmp_path: Path) -> None:
    path = write(tmp_path, strategies='"per_device", "warmup"')
    with pytest.raises(ValueError, match="production strategy 'warmup' to fail"):
        rx.load(path, production=Strategy.WARMUP)


def test_bad_rows_are_rejected(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="unknown device 'tpu'"):
        rx.load(write(tmp_path, device="tpu"))
    with pytest.raises(ValueError, match="unknown strategy 'fast'"):
        rx.load(write(tmp_path, strategies='"fast"'))
    with pytest.raises(ValueError, match="bad torch version 'two'"):
        rx.release("two")


def test_committed_table_loads_and_spares_production() -> None:
    from harness import settings

    rows = rx.load(production=settings.production_strategy())  # the committed [tool.racegate]
    assert rows, "the committed table should hold the known-bad rows of DESIGN §3"
    assert all(r.reason and r.source for r in rows)


def test_topology_bounds(tmp_path: Path) -> None:
    p = tmp_path / "race.toml"
    p.write_text(
        ROW.format(device="cuda", strategies='"per_device"').replace(
            'device = "cuda"', 'device = "cuda"\nmin_devices = 2\nmin_threads_per_device = 2'
        )
    )
    rows = rx.load(p)
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
