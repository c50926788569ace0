"""What a race case runs: the topologies, strategies in order, and how many runs each case makes."""

from __future__ import annotations

import statistics
from collections.abc import Callable
from dataclasses import dataclass

import pytest

from racegate.cases.session import RacegateConfig
from racegate.harness.judge.metrics import predictive_hits
from racegate.harness.judge.verdict import (
    Calibration,
    ControlRate,
    cell_label,
    cell_of,
    control_rates,
    repeats_for,
)
from racegate.harness.run.record import RunRecord
from racegate.harness.scenario.vocab import Outcome


def topologies(rc: RacegateConfig) -> list[tuple[tuple[str, ...], int]]:
    """(devices, threads per device) the race cases cover; one thread in all cannot race."""
    if rc.devices == ("cpu",):
        out = [(("cpu",), t) for t in rc.threads_per_device]
    else:
        out = []
        for t in rc.threads_per_device:
            out.append((rc.devices[:1], t))
            if len(rc.devices) > 1:
                out.append((rc.devices, t))
    return [(devices, t) for devices, t in out if len(devices) * t > 1]


def case_strategies(rc: RacegateConfig, cal: Calibration) -> list[str]:
    """The strategies in collection order: the control first (added when the production
    strategy is selected without it), so its rate is known when the production case runs."""
    control = cal.control
    chosen = list(rc.strategies)
    if rc.production in chosen and control not in chosen:
        chosen.append(control)
    return sorted(chosen, key=lambda s: s != control)  # stable: the rest keep their order


def case_order(rc: RacegateConfig, cal: Calibration) -> list[tuple[str, str, tuple[str, ...], int]]:
    """(strategy, cache state, devices, threads per device) of every race case, in collection
    order: for each cell the control's case, then the production strategy's beside it; then
    the other strategies' cases, strategy by strategy.

    pytest-xdist (--dist load) hands each worker consecutive cases, two at first at racegate's
    sizes (max(2, cases per worker // 4)), and a worker runs its own in order. So with at least
    as many workers as cells every control cell starts at once on a worker of its own, the
    production cell that waits for that control's rate queues behind it, and the longest cases
    (the production strategy's, up to the power cap) start first instead of last (one H100:
    the warm production cell waited 100 s for its control, queued behind the cold control, and
    the deleted one started at 252 s of a 458 s session).
    """
    strategies = case_strategies(rc, cal)
    cells = [(state, d, t) for state in rc.cache_states for d, t in topologies(rc)]
    first = [s for s in (cal.control, rc.production) if s in strategies]
    order = [(s, *cell) for cell in cells for s in first]
    return order + [(s, *cell) for s in strategies if s not in first for cell in cells]


def control_runs(rc: RacegateConfig, cal: Calibration) -> int:
    """The runs of a control case: all made, for its rate (--control-repeat, or --repeat)."""
    return max(rc.repeat, cal.control_repeat)


def case_repeats(strategy: str, rc: RacegateConfig, cal: Calibration) -> tuple[int, bool, str]:
    """(runs, stop at the first failure, why) for a case that is not the production strategy's."""
    if strategy == cal.control:
        n = control_runs(rc, cal)
        return n, False, f"positive control: all {n} runs, for its detection rate"
    return rc.repeat, True, f"--racegate-repeat {rc.repeat}"


def runs_at_once(repeat: int, stop: bool, *, pooled: bool, may_hang: bool) -> int:
    """How many of a non-production case's `repeat` runs it asks to make at once (it gets as
    many as the free run slots allow): all of them where the session shares run slots, unless
    the case stops at its first failure and its expectation row says its runs can hang (a hung
    run holds its slot for its whole deadline, 46–77 s on one H100, and the first failure ends
    the case anyway); one at a time for a case that stops at its first failure under a fixed
    --case-jobs (batching those put ~50 runs on 16 cores on one H200 and every run hung:
    results/h200-cell-fail-closed). One H100: the session's last case, `processes` deleted,
    made its 3 runs one by one (128 s) while 5 of 6 slots stood free."""
    if stop and (not pooled or may_hang):
        return 1
    return repeat


def production_runs_left(
    done: int,
    cell: str,
    rc: RacegateConfig,
    cal: Calibration,
    records: list,
    control_selected: bool = True,
) -> tuple[int, str]:
    """(runs still to make, why) after `done` clean production runs in `cell`; 0 when enough.

    Under pytest-xdist the control's case may still be running beside this one (workers do not
    keep collection order): until all its runs in the cell have landed, one run at a time. A
    landed run counts whether or not it reached its cache state; only those that did measure
    the rate. The cap always ends the case. Where the control's case for the cell is not in
    this session (`-k`, `-m`), no rate will come: the default --repeat, not the cap one by one
    (the verdict then reads the strategy INCONCLUSIVE there)."""
    if done >= cal.cap:
        return 0, f"the {cal.cap}-run cap (--racegate-power-cap) ends it"
    if not control_selected:
        return max(0, rc.repeat - done), (
            f"{cal.control} is not selected in {cell} in this session: the default {rc.repeat}"
        )
    landed, made = control_landed(cell, cal, records), control_runs(rc, cal)
    if landed < made:
        return 1, f"{cal.control} has {landed} of {made} runs in {cell} so far"
    needed, why = repeats_for(
        control_rates(records, cal.control).get(cell), default=rc.repeat, cal=cal
    )
    return max(0, min(needed, cal.cap) - done), why


def control_landed(cell: str, cal: Calibration, records: list) -> int:
    """How many of the control's runs in `cell` have landed in `records`."""
    return sum(1 for r in records if r.scenario.strategy == cal.control and cell_of(r) == cell)


def controls_landed(cells: set[str], rc: RacegateConfig, cal: Calibration, records: list) -> bool:
    """Whether all of the control case's runs have landed in every one of `cells`."""
    return all(control_landed(c, cal, records) >= control_runs(rc, cal) for c in cells)


@dataclass(frozen=True)
class RunCosts:
    """Seconds one more run takes in a cell: the control's, and the production strategy's."""

    control_s: float = 1.0
    production_s: float = 1.0


def run_costs(cell: str, production: str, cal: Calibration, records: list) -> RunCosts:
    """What a run costs in `cell`, from the runs landed there: the median wall of the control's
    runs (hits and misses: a hit that hangs holds its slot to the stall watch's call, 38 s on one
    H200 against 7 s for a clean warm run), and of the production strategy's, or, before it has
    any, of the control's clean runs (the same cell's work without the race). Medians: the
    session's first run starts the launcher (36–43 s on the 2-core box against ~10 s forked)."""

    def median_wall(keep: Callable[[RunRecord], bool]) -> float | None:
        walls = [r.wall_s for r in records if cell_of(r) == cell and keep(r) and r.wall_s > 0]
        return statistics.median(walls) if walls else None

    control = median_wall(lambda r: r.scenario.strategy == cal.control) or 1.0
    own = median_wall(lambda r: r.scenario.strategy == production)
    clean = median_wall(lambda r: r.scenario.strategy == cal.control and r.outcome == Outcome.OK)
    return RunCosts(control, own or clean or control)


def _left_s(rate: ControlRate, cal: Calibration, done: int, costs: RunCosts) -> float:
    """Seconds of runs still to make in a cell at this control rate, `done` production runs in:
    the production runs its power asks for; where it gives no power, the rest of the control's
    top-up and then the production strategy's runs to the cap."""
    if rate.gives_power(cal):
        return max(0, (rate.needed(cal) or cal.cap) - done) * costs.production_s
    rest = max(0, cal.control_max - rate.runs) * costs.control_s
    return rest + max(0, cal.cap - done) * costs.production_s


def cheaper_top_up(
    rate: ControlRate, cal: Calibration, done: int, costs: RunCosts
) -> tuple[int, float]:
    """(control runs to make first, seconds they are expected to save) where the control's rate
    already gives a SAFE its power; (0, 0.0) where no number of them, up to cal.control_max in
    all, is expected to save at least one production run's time.

    A rate is a sample: 2 hits in 4 (95% low 15%) asks for 29 production runs, but at the
    rate those 4 runs suggest, 2 more control runs would most likely show 3 or 4 of 6 (low 30%
    or 44%: 13 or 8 runs). Expected over what they may show (metrics.predictive_hits), 2 more
    control runs first leave about 24 runs in all at equal costs. The power rule is the same:
    the verdict still asks the production runs the control's whole rate asks for, every
    control run counted, hit or miss."""
    now = _left_s(rate, cal, done, costs)
    best, saved = 0, 0.0
    for more in range(1, cal.control_max - rate.runs + 1):
        after = more * costs.control_s
        for hits, p in enumerate(predictive_hits(rate.hits, rate.runs, more)):
            after += p * _left_s(
                ControlRate(rate.cell, rate.hits + hits, rate.runs + more), cal, done, costs
            )
        if now - after > saved:
            best, saved = more, now - after
    return (best, saved) if saved >= costs.production_s else (0, 0.0)


def control_top_up(
    rate: ControlRate | None,
    cal: Calibration,
    fired_elsewhere: bool,
    *,
    done: int = 0,
    costs: RunCosts | None = None,
) -> tuple[int, str]:
    """(control runs to add in a cell before the production strategy's next batch there, why):
    the most to add, up to cal.control_max runs in all; 0 once its rate gives a SAFE its power
    and more control runs are not expected to save time (cheaper_top_up: `done` production
    runs made so far, `costs` what a run of each takes there).

    The control's first runs are a sample: at a true rate of one in two, 4 runs miss the race
    in all of them 1 time in 16 (one H200: warm 0/4 on one side of an upgrade whose other
    side's control failed 2/4 warm, 4/4 cold and 4/4 deleted), and one hit in 4 asks for more
    than the cap's worth of production runs; either way the production strategy could only be
    INCONCLUSIVE there. So where the control fired in this cell too seldom, or never here but
    in another cell of this session (the race is visible on this machine; `fired_elsewhere`,
    from the records landed so far: the production case asks again before each batch and
    when its own runs are done), more control runs decide it. Where it fired nowhere yet,
    none: on a torch that masks or fixed the race (2.13 on CPU, 2.14+) every run would be
    wasted, and the probes decide. None either where even all-failing runs up to the most
    could not give the power (a tiny --power-cap)."""
    if rate is None:
        return 0, f"{cal.control} measured nothing here (no run of it reached its cache state)"
    if rate.gives_power(cal):
        costs = costs or RunCosts()
        more, saved = cheaper_top_up(rate, cal, done, costs)
        if more:
            return more, (
                f"{cal.control} {rate.describe()} asks for {rate.needed(cal)} production runs "
                f"here: {more} more {cal.control} runs first are expected to save "
                f"{saved / costs.production_s:.1f} production runs' time (a sharper rate asks "
                "for fewer)"
            )
        return 0, f"{cal.control} {rate.describe()} gives the power a SAFE needs"
    if rate.runs >= cal.control_max:
        return 0, f"{cal.control} made its {cal.control_max} runs at most (--racegate-control-max)"
    if rate.hits == 0 and not fired_elsewhere:
        return 0, f"{cal.control} fired nowhere in this session: more runs would not decide"
    more = cal.control_max - rate.runs
    best = ControlRate(rate.cell, rate.hits + more, rate.runs + more)
    if not best.gives_power(cal):  # a small --power-cap (bisect's 1, say): no rate would do
        return 0, (
            f"even {more} more {cal.control} runs, all failing, could not give a SAFE its power "
            f"at the {cal.cap}-run cap"
        )
    seldom = "never fired here" if rate.hits == 0 else "fired too seldom here for power"
    return more, (
        f"{cal.control} {seldom} ({rate.describe()}): up to {more} more {cal.control} runs in "
        f"{rate.cell}, until its rate gives the production strategy its power"
    )


def production_runs_done(
    done: int, cell: str, rc: RacegateConfig, cal: Calibration, records: list
) -> tuple[bool, str]:
    """(enough, why): production_runs_left has nothing left."""
    left, why = production_runs_left(done, cell, rc, cal, records)
    return left == 0, why


def planned_runs(
    record: RunRecord, rc: RacegateConfig, cal: Calibration, records: list
) -> int | None:
    """The runs `record`'s case makes, as far as `records` (the session's so far) tell: the
    production strategy's as its power asks from the control's rate in the cell once that
    rate's runs have landed (None before); any other case's case_repeats (the control's own
    runs, None for those the production case added; another strategy's --repeat, fewer where
    one fails). For progress
    lines (racegate.cases.progress): what the cases will do, not what decides."""
    strategy, cell = record.scenario.strategy, cell_of(record)
    if strategy == rc.production:
        if not controls_landed({cell}, rc, cal, records):
            return None
        return production_runs_left(0, cell, rc, cal, records)[0]
    n = case_repeats(strategy, rc, cal)[0]
    return n if record.repeat_index < n else None


def race_case_of(item: pytest.Item) -> tuple[str, str, tuple[str, ...], int] | None:
    """An item's race case (strategy, cache state, devices, threads per device), as
    racegate/cases/test_race.py parametrizes it; None for any other item."""
    callspec = getattr(item, "callspec", None)
    return callspec.params.get("race_case") if callspec is not None else None


def control_cells(items: list[pytest.Item], control: str) -> set[str]:
    """The cells ('cold 1×2') whose control case this session runs (its selected items)."""
    out = set()
    for item in items:
        case = race_case_of(item)
        if case is not None and case[0] == control:
            _, cache_state, devices, tpd = case
            out.add(cell_label(cache_state, len(devices), tpd))
    return out
