"""The race suite: every strategy × cache state × topology on the devices present.

Known-bad combinations come from expectations/race.toml and are `xfail(strict=True)`;
the production strategy ([tool.racegate]) must always pass.
"""

from __future__ import annotations

import shlex
import sys

import pytest

from harness.judge import race_expectations
from harness.judge.suite import OUTCOME_ERRORS, judge, racegate_key, run_case
from harness.scenario import make_scenario
from harness.vocab import CacheState

# Per-case time limit (pytest-timeout, thread method: all stacks dumped on a hang).
CASE_TIMEOUT_S = 900


def _topologies(rc) -> list[tuple[tuple[str, ...], int]]:
    if rc.devices == ("cpu",):
        return [(("cpu",), t) for t in rc.threads_per_device]
    out = []
    for t in rc.threads_per_device:
        out.append((rc.devices[:1], t))
        if len(rc.devices) > 1:
            out.append((rc.devices, t))
    return out


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "race_case" not in metafunc.fixturenames:
        return
    rc = metafunc.config.stash[racegate_key]
    params = []
    for strategy in rc.strategies:
        for cache_state in rc.cache_states:
            for devices, tpd in _topologies(rc):
                marks = [pytest.mark.race]
                if devices != ("cpu",):
                    marks.append(pytest.mark.gpu)
                if len(devices) > 1:
                    marks.append(pytest.mark.multi_gpu)
                row = race_expectations.match(
                    rc.expectations,
                    torch_version=rc.versions["torch"],
                    transformers_version=rc.versions["transformers"],
                    device=devices[0],
                    strategy=strategy,
                    cache_state=cache_state,
                    threads_per_device=tpd,
                    devices=len(devices),
                )
                if row is not None:
                    marks.append(
                        pytest.mark.xfail(
                            strict=row.strict,
                            raises=tuple(OUTCOME_ERRORS[o] for o in row.outcomes),
                            reason=f"{row.reason} [{row.describe()}; if this now passes, upstream "
                            f"changed: update or delete that row, citing the source]",
                        )
                    )
                topo = f"{','.join(devices)}x{tpd}"
                params.append(
                    pytest.param(
                        (strategy, cache_state, devices, tpd),
                        marks=marks,
                        id=f"{strategy}-{cache_state}-{topo}",
                    )
                )
    metafunc.parametrize("race_case", params)


@pytest.mark.timeout(CASE_TIMEOUT_S)
def test_race(race_case, racegate_config) -> None:
    strategy, cache_state, devices, tpd = race_case
    rc = racegate_config
    scenario = make_scenario(
        preset=rc.preset,
        strategy=strategy,
        cache_state=cache_state,
        schedule=rc.schedule,
        switch_interval_s=rc.switch_interval,
        devices=devices,
        threads_per_device=tpd,
        steps=4 if devices == ("cpu",) else 8,
        warmup_steps=1,
        # Warm and deleted runs first prime the cache in a run of their own: halve each budget.
        timeout_s=rc.run_timeout_within(
            CASE_TIMEOUT_S * 0.8 / rc.repeat / (1 if cache_state is CacheState.COLD else 2)
        ),
        workload=rc.workload,
    )
    command = shlex.join([sys.executable, "-m", "pytest", *sys.argv[1:]])
    records = run_case(
        scenario, rc.repeat, rc.results, command,
        stop_on_failure=True, timing_valid=not rc.overlapping,
    )  # fmt: skip
    assert all(r.threads_asked == tpd * len(devices) for r in records)
    judge(records)  # raises on the first failed run, which ended the case
    assert len(records) == rc.repeat


def incident_topology(gpus: int) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(target devices, drafter devices): the incident's 0–4 / 5–7 on 8 GPUs, else scaled down."""
    if gpus >= 8:
        return tuple(f"cuda:{i}" for i in range(5)), ("cuda:5", "cuda:6", "cuda:7")
    return ("cuda:0",), ("cuda:0", "cuda:1")


@pytest.mark.race
@pytest.mark.gpu
@pytest.mark.multi_gpu
@pytest.mark.timeout(CASE_TIMEOUT_S)
def test_race_incident_topology_production_strategy(racegate_config) -> None:
    """The production strategy must hold on the incident's own layout: target on other GPUs."""
    rc = racegate_config
    targets, drafters = incident_topology(rc.gpus)
    scenario = make_scenario(
        preset=rc.preset,
        strategy=rc.production,
        schedule=rc.schedule,
        switch_interval_s=rc.switch_interval,
        devices=drafters,
        target_devices=targets,
        threads_per_device=1,
        steps=8,
        timeout_s=rc.run_timeout_within(CASE_TIMEOUT_S * 0.8 / rc.repeat),
        workload=rc.workload,
    )
    command = shlex.join([sys.executable, "-m", "pytest", *sys.argv[1:]])
    records = run_case(
        scenario, rc.repeat, rc.results, command,
        stop_on_failure=True, timing_valid=not rc.overlapping,
    )  # fmt: skip
    assert all(r.scenario["target_devices"] == list(targets) for r in records)
    judge(records)
    assert len(records) == rc.repeat
