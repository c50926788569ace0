"""The race suite: every strategy × cache state × topology on the devices present.

Known-bad combinations come from racegate/harness/expectations/race.toml and are
`xfail(strict=True)`; the production strategy must always pass. The production strategy and the
positive control (the known-bad one) are the workload's (its roles(); [tool.racegate],
--production-strategy and
--control-strategy override them). Each cell's control case is collected first, the production
case beside it (racegate.cases.plan.case_order); the control runs all its repeats,
so its detection rate per cache state × topology, read back from this session's records, sets
how many runs the production strategy's case makes there
(racegate.harness.judge.verdict.repeats_for); where that rate cannot give a SAFE its power, or
more control runs are expected to save more production runs than they cost, the production case
adds control runs in its cell (racegate.cases.plan.control_top_up).
"""

from __future__ import annotations

import functools
import shlex
import sys
import time

import pytest

from racegate.cases import advice
from racegate.cases.plan import (
    case_order,
    case_repeats,
    control_cells,
    control_landed,
    control_runs,
    control_top_up,
    controls_landed,
    production_runs_left,
    run_costs,
    runs_at_once,
)
from racegate.cases.race_session import (
    calibration,
    control_primes,
    session_records,
    slot_pool,
)
from racegate.cases.session import RacegateConfig, racegate_key
from racegate.harness.doors.pipeline import batch_slots, run_case
from racegate.harness.judge import race_expectations
from racegate.harness.judge.suite import OUTCOME_ERRORS, judge
from racegate.harness.judge.verdict import Calibration, cell_label, control_rates
from racegate.harness.run.record import RunRecord
from racegate.harness.run.runner import SharedPrimes
from racegate.harness.run.slots import OWN_WAIT_S, Slot, SlotPool, release
from racegate.harness.scenario.spec import Scenario, make_scenario
from racegate.harness.scenario.vocab import CacheState, Outcome, spec_of
from racegate.harness.scenario.workload_api import DEFAULT_WORKLOAD

# Per-case time limit (pytest-timeout, thread method: all stacks dumped on a hang).
CASE_TIMEOUT_S = 900
# How often a case waiting for the control's runs reads the session's records again.
CONTROL_POLL_S = 1.0


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "race_case" not in metafunc.fixturenames:
        return
    rc = metafunc.config.stash[racegate_key]
    cal = calibration(metafunc.config)
    params = []
    # The control runs all its repeats and the production case as many as power asks: the
    # case's time limit grows with its most runs (each run keeps the same budget).
    # The production case may first add control runs (and their priming run) in its cell.
    top_up = max(0, cal.control_max - control_runs(rc, cal)) + 1
    most = {cal.control: control_runs(rc, cal), rc.production: cal.cap + top_up}
    for strategy, cache_state, devices, tpd in case_order(rc, cal):
        timeout = CASE_TIMEOUT_S * max(1.0, most.get(strategy, rc.repeat) / rc.repeat)
        marks = [pytest.mark.race, pytest.mark.timeout(timeout)]
        if strategy == rc.production:  # `-m production` selects these
            marks.append(pytest.mark.production)
        if devices != ("cpu",):
            marks.append(pytest.mark.gpu)
        if len(devices) > 1:
            marks.append(pytest.mark.multi_gpu)
        drafter = rc.workload == DEFAULT_WORKLOAD
        row = race_expectations.match(
            rc.expectations,
            torch_version=rc.versions["torch"],
            transformers_version=rc.versions["transformers"],
            device=devices[0],
            strategy=strategy,
            cache_state=cache_state,
            threads_per_device=tpd,
            devices=len(devices),
            spec=spec_of(str(strategy), rc.strategy_specs),
            drafter=drafter,
        )
        # The production strategy's case is judged by the verdict, which quotes a matching row
        # (UNSAFE): no xfail hides its failure, and no strict XPASS breaks its case.
        if row is not None and strategy != rc.production:
            marks.append(
                pytest.mark.xfail(
                    strict=row.strict_for(drafter),
                    raises=tuple(OUTCOME_ERRORS[o] for o in row.outcomes),
                    reason=advice.xfail_reason(row, metafunc.config),
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


def test_race(race_case, racegate_config, pytestconfig, request) -> None:
    strategy, cache_state, devices, tpd = race_case
    rc = racegate_config
    cal = calibration(pytestconfig)
    cell = cell_label(cache_state, len(devices), tpd)
    scenario = _scenario(rc, strategy, cache_state, devices, tpd)
    command = shlex.join([sys.executable, "-m", "pytest", *sys.argv[1:]])
    pool = slot_pool(pytestconfig)
    own = _own_slot(pool, strategy, rc, cal, pytestconfig, request.session.items)
    try:
        # One priming run for the case's warm/deleted runs. The control's are the worker's
        # (control_primes): the production case's added control runs copy the cache of the
        # control case's priming run (on the same worker: the cell's two cases are collected
        # side by side), not one more of their own.
        with SharedPrimes() as case_primes:
            primes = control_primes(pytestconfig) if strategy == cal.control else case_primes
            # The production case's control scenario where the control's case for this cell is
            # in the session (its rate will come; the case adds control runs where it asks)
            control = None
            if strategy == rc.production and cell in control_cells(
                request.session.items, cal.control
            ):
                control = _scenario(rc, cal.control, cache_state, devices, tpd)
            records, why = _run_race_case(
                scenario,
                strategy,
                cell,
                rc,
                cal,
                pytestconfig,
                primes,
                command,
                _may_hang(request.node),
                control,
            )
    finally:
        release(own)
    judge(records)  # raises on a failed run (which ended the case unless it is the control)
    print(f"{strategy} {cell}: {len(records)} runs; {why}")


def _scenario(
    rc: RacegateConfig, strategy: str, cache_state: CacheState, devices: tuple[str, ...], tpd: int
) -> Scenario:
    """The scenario of `strategy`'s runs in one cell of this session."""
    return make_scenario(
        preset=rc.preset,
        strategy=strategy,
        cache_state=cache_state,
        schedule=rc.schedule,
        switch_interval_s=rc.switch_interval,
        stall_s=rc.stall,
        devices=devices,
        threads_per_device=tpd,
        strategy_spec=rc.strategy_specs.get(strategy),  # a workload's own strategy: its spec
        steps=4 if devices == ("cpu",) else 8,
        warmup_steps=1,
        # Warm and deleted runs copy the cache of one priming run made first: it takes a
        # run's share of the case's time. A run's budget is the same whatever the case's
        # repeats (its time limit scales).
        timeout_s=rc.run_timeout_within(CASE_TIMEOUT_S * 0.8 / (rc.repeat + cache_state.primed)),
        workload=rc.workload,
        production=rc.production,  # the roles the verdict judges by, in each record
        control=rc.control,
    )


def _own_slot(
    pool: SlotPool | None,
    strategy: str,
    rc: RacegateConfig,
    cal: Calibration,
    pytestconfig: pytest.Config,
    items: list[pytest.Item],
) -> list[Slot]:
    """This case's run slot, which others then see busy ([] without a pool, or when none came
    free in OWN_WAIT_S). A case of neither the control nor the production strategy first waits,
    within the same OWN_WAIT_S, for the control's runs to land in every cell this session runs
    it: the control's cells and the production cells that wait on their rates are the chain
    the session's wall time hangs on, so their runs get the free slots first (one H200: the
    cold control's 4 runs, each a ~50 s hang, went one at a time while the other strategies'
    cases held the slots, and the cold production cell could start only at 208 s of 349)."""
    if pool is None:
        return []
    deadline = time.monotonic() + OWN_WAIT_S
    if strategy not in (cal.control, rc.production):
        cells = control_cells(items, cal.control)
        while not controls_landed(cells, rc, cal, session_records(pytestconfig)):
            if time.monotonic() >= deadline:
                print(f"{cal.control}'s runs had not all landed in {OWN_WAIT_S:.0f} s: going on")
                break
            time.sleep(CONTROL_POLL_S)
    own = pool.own(wait_s=max(0.0, deadline - time.monotonic()))
    if not own:
        print(
            f"no run slot came free within {OWN_WAIT_S:.0f} s of this case's start (its wait for "
            f"{cal.control}'s runs included): this case runs over the pool's size"
        )
    return own


def _may_hang(item: pytest.Item) -> bool:
    """The case's expectation row (its xfail mark) names a hang among the outcomes it expects."""
    mark = item.get_closest_marker("xfail")
    return mark is not None and OUTCOME_ERRORS[Outcome.HANG] in mark.kwargs.get("raises", ())


def _run_race_case(
    scenario: Scenario,
    strategy: str,
    cell: str,
    rc: RacegateConfig,
    cal: Calibration,
    pytestconfig: pytest.Config,
    primes: SharedPrimes,
    command: str,
    may_hang: bool,
    control: Scenario | None = None,
) -> tuple[list[RunRecord], str]:
    """The case's runs (all the control's; the production strategy's as many as its power
    asks; the others until the first failure) and why that many. Runs at once: --case-jobs N,
    or (auto) this worker's own run slot and the session's free ones (racegate.harness.run.slots).
    control: for the production case, the control's scenario in this cell where the control's
    case for it is in this session (None: no rate will come, the default --repeat)."""
    pool = slot_pool(pytestconfig)
    run = functools.partial(
        run_case,
        scenario,
        results=rc.results,
        command=command,
        timing_valid=not rc.overlapping,
        primes=primes,
    )
    if strategy != rc.production:
        repeat, stop, why = case_repeats(strategy, rc, cal)
        records = []
        # Batch by batch, each with the slots free then, as the production case below: a case
        # waiting for its own slot gets one between batches, not after all of this case's runs.
        while (left := repeat - len(records)) > 0:
            want = runs_at_once(left, stop, pooled=pool is not None, may_hang=may_hang)
            jobs, extra = batch_slots(pool, rc.case_jobs, want, scenario, primes)
            try:
                records += run(jobs, stop_on_failure=stop, first_index=len(records), jobs=jobs)
            finally:
                release(extra)
            if stop and any(r.outcome != Outcome.OK for r in records):
                break  # the case has failed
    else:  # as many clean runs as the control's rate here asks for (racegate.harness.judge.verdict)
        records = []
        left, why = production_runs_left(
            0, cell, rc, cal, session_records(pytestconfig), control is not None
        )
        while all(r.outcome == Outcome.OK for r in records):
            # Once the control's own runs here have landed, whether it needs more is asked
            # before each batch and once more when power asks for none: by then the control
            # may have fired in another cell (a hang there takes longer than a clean run here).
            if (
                control is not None
                and controls_landed({cell}, rc, cal, session_records(pytestconfig))
                and _top_up_control(
                    control, cell, rc, cal, pytestconfig, pool, command, len(records)
                )
            ):
                left, why = production_runs_left(
                    len(records), cell, rc, cal, session_records(pytestconfig)
                )
            if not left:
                break
            # Once the control's rate is complete the runs still needed are known: a batch.
            batch, extra = batch_slots(pool, rc.case_jobs, left, scenario, primes)
            try:
                records += run(batch, stop_on_failure=True, first_index=len(records), jobs=batch)
            finally:
                release(extra)
            left, why = production_runs_left(
                len(records), cell, rc, cal, session_records(pytestconfig), control is not None
            )
    return records, why


def _top_up_control(
    control: Scenario,
    cell: str,
    rc: RacegateConfig,
    cal: Calibration,
    pytestconfig: pytest.Config,
    pool: SlotPool | None,
    command: str,
    done: int,
) -> int:
    """More control runs in `cell`, batch by batch, while its rate there cannot give the
    production strategy its power, or more of them are expected to save production runs
    (`done` of them made so far; racegate.cases.plan.control_top_up). Their records land in
    the session's results, where the verdict reads the control's rate; the control's failures
    are what it is for, so they fail nothing here. Returns how many it made. Their warm/deleted
    runs copy the worker's priming run of the control (control_primes): one, however many
    times this is asked, shared with the control's own case where it ran on this worker."""
    primes = control_primes(pytestconfig)
    made, primed_before = 0, primes.made
    while True:
        records = session_records(pytestconfig)
        rates = control_rates(records, cal.control)
        elsewhere = any(r.hits for c, r in rates.items() if c != cell)
        costs = run_costs(cell, rc.production, cal, records)
        more, why = control_top_up(rates.get(cell), cal, elsewhere, done=done, costs=costs)
        landed = control_landed(cell, cal, records)
        # Bounded by the runs landed (runs whose priming failed count here, not in the
        # rate) and by the runs made (a record that did not land cannot loop this).
        more = min(more, cal.control_max - landed, cal.control_max - made)
        if more <= 0:
            if made and control.cache_state.primed:
                copied = (
                    "a priming run of their own"
                    if primes.made > primed_before
                    else "the control case's priming run"
                )
                print(f"{cal.control}: {made} more runs in {cell}, copying {copied}")
            return made
        print(why)
        jobs, extra = batch_slots(
            pool, rc.case_jobs, min(more, cal.control_repeat), control, primes
        )
        try:
            run_case(
                control,
                jobs,
                results=rc.results,
                command=command,
                timing_valid=False,
                first_index=landed,
                jobs=jobs,
                primes=primes,
            )
        finally:
            release(extra)
        made += jobs


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
        strategy_spec=rc.strategy_specs.get(rc.production),
        schedule=rc.schedule,
        switch_interval_s=rc.switch_interval,
        stall_s=rc.stall,
        devices=drafters,
        target_devices=targets,
        threads_per_device=1,
        steps=8,
        timeout_s=rc.run_timeout_within(CASE_TIMEOUT_S * 0.8 / rc.repeat),
        workload=rc.workload,
        production=rc.production,
        control=rc.control,
    )
    command = shlex.join([sys.executable, "-m", "pytest", *sys.argv[1:]])
    records = run_case(
        scenario, rc.repeat, rc.results, command,
        stop_on_failure=True, timing_valid=not rc.overlapping,
    )  # fmt: skip
    judge(records)
