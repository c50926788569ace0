"""The verdict: decide() on run records for every path, render() width, and the calibration
end to end on CPU with a workload whose race probability is a knob (tests/race_knob_workload.py).
"""

from __future__ import annotations

import dataclasses
import math
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from racegate.cases.session import RacegateConfig
from racegate.harness.judge.gate import decide_gate
from racegate.harness.judge.suite import OUTCOME_ERRORS, NotJudged, TooSlowToJudge, judge
from racegate.harness.judge.verdict import (
    Calibration,
    ControlRate,
    Status,
    control_rates,
    decide,
    judge_strategy,
    render,
    repeats_for,
    runs_for_power,
)
from racegate.harness.run.record import (
    CacheProof,
    Hardware,
    RunRecord,
    ThreadRecord,
    Versions,
    read_jsonl,
)
from racegate.harness.scenario.spec import make_scenario
from racegate.harness.scenario.vocab import Outcome, Schedule, Strategy
from racegate.harness.scenario.workload_api import DEFAULT_WORKLOAD

ROOT = Path(__file__).resolve().parent.parent
VERSIONS = {"torch": "2.13.0+cpu", "transformers": "5.17.0", "python": "3.12.3"}
# The cache proof of a warm run whose priming run failed
# (racegate.harness.judge.decide.cache_findings).
UNPRIMED = CacheProof("warm", "/x", {}, None, prime_ok=False, prime_counters={}, proven_warm=False)
HAZARD = {"compiled_call_during_make_fx": "hazard"}
GONE = {"compiled_call_during_make_fx": "safe", "flag_stuck_after_overlap": "safe"}


# A stepping thread's stack inside dynamo, as faulthandler writes it
# (racegate/harness/run/stacks.py).
IN_COMPILE = (
    "Thread 0x00007fe067fff6c0 (most recent call first):\n"
    '  File "/v/site-packages/torch/_dynamo/convert_frame.py", line 2626 in __call__\n'
    '  File "/repo/harness/run/threads.py", line 148 in _thread_main\n'
)


def record(
    strategy: str, outcome: str = "ok", cache_state: str = "cold", tpd: int = 2,
    stalled_s: float | None = None, busy_at_deadline: bool | None = None,
    stacks: str | None = None, error_text: str | None = None, detail: str | None = None,
) -> RunRecord:  # fmt: skip
    """A run record as racegate.harness.judge.decide writes one; a stalled hang's stacks default to
    a stepping thread stuck in dynamo (race evidence) unless `stacks` says otherwise."""
    scenario = make_scenario(strategy=strategy, cache_state=cache_state, threads_per_device=tpd)
    threads = [ThreadRecord(i, "cpu", outcome if i == 0 else "ok") for i in range(tpd)]
    threads[0].error_text = error_text
    threads[0].error = error_text.splitlines()[0] if error_text else None
    if stacks is None and stalled_s is not None:
        stacks = IN_COMPILE
    return RunRecord(
        scenario=scenario, outcome=outcome, outcome_counts={outcome: 1},
        threads=threads, threads_asked=tpd, threads_concurrent=tpd, versions=Versions(**VERSIONS),
        hardware=Hardware(device_name="cpu", cpu_count=2, cuda_device_count=0),
        stalled_s=stalled_s, busy_at_deadline=busy_at_deadline, stacks=stacks, detail=detail,
    )  # fmt: skip


def runs(strategy: str, n: int, failed: int = 0, **kw: object) -> list[RunRecord]:
    return [record(strategy, "nested_fx_error" if k < failed else "ok", **kw) for k in range(n)]


def status(v, strategy: str) -> Status:
    return next(s.status for s in v.strategies if s.strategy == strategy)


def test_power_formula_matches_its_definition() -> None:
    assert runs_for_power(0.5) == 7 and runs_for_power(0.25) == 17
    assert runs_for_power(0.0) is None and runs_for_power(1.0) == 1


def test_safe_needs_the_controls_power_and_states_it() -> None:
    # per_device 4 of 8 warm, 8 of 8 cold: Wilson lows 0.22 and 0.68 -> 20 and 5 runs.
    control = runs("per_device", 8, 4, cache_state="warm") + runs("per_device", 8, 8)
    rates = control_rates(control, "per_device")
    assert [rates[c].needed(Calibration()) for c in ("warm 1×2", "cold 1×2")] == [20, 5]
    prod = runs("warmup_locked", 20, cache_state="warm") + runs("warmup_locked", 5)
    v = decide(control + prod, production="warmup_locked", probes=HAZARD)
    assert v.strategies[0].strategy == "warmup_locked" and v.passed
    why = v.production_verdict.why
    assert "0 of 25 runs failed; per_device failed 4 of 8 warm and 8 of 8 cold runs" in why
    assert "caught with ≥ 99%" in why and "per-run failure rate < 14% (95%)" in why
    assert status(v, "per_device") is Status.UNSAFE
    assert v.advice == "keep warmup_locked; per_device is unsafe here."


def test_one_thread_runs_do_not_count_towards_the_safe_claim() -> None:
    """Throughput runs beside the race runs (a plain `pytest cases` session) raced nobody: the
    claim counts only the runs that could race."""
    control = runs("per_device", 8, 8)
    prod = runs("warmup_locked", 5)
    v = decide(control + prod + runs("warmup_locked", 40, tpd=1), production="warmup_locked",
               probes=HAZARD)  # fmt: skip
    why = v.production_verdict.why
    assert v.passed and "0 of 5 runs failed" in why, why
    assert (
        why
        == decide(control + prod, production="warmup_locked", probes=HAZARD).production_verdict.why
    )


def test_too_few_clean_runs_is_inconclusive_with_how_many_more() -> None:
    control = runs("per_device", 8, 4, cache_state="warm")
    v = decide(control + runs("warmup_locked", 3, cache_state="warm"), production="warmup_locked")
    p = v.production_verdict
    assert p.status is Status.INCONCLUSIVE and p.more_runs == 17 and not v.passed
    assert "17 more clean runs (17 in warm 1×2)" in p.why
    assert "run warmup_locked 17 more times" in v.advice


def test_the_cap_binds_and_the_power_reached_is_said() -> None:
    control = runs("per_device", 8, 2)  # low 0.07: 63 runs asked, cap 10 -> 50% power
    cal = Calibration(cap=10)
    v = decide(control + runs("warmup_locked", 10), production="warmup_locked", calibration=cal)
    p = v.production_verdict
    assert p.status is Status.INCONCLUSIVE and "the 10-run cap binds in cold 1×2" in p.why
    assert p.power is not None and 0.4 < p.power < 0.6
    v = decide(control + runs("warmup_locked", 10), production="warmup_locked",
               calibration=Calibration(cap=10, min_power=0.4))  # fmt: skip
    assert v.passed and "≥ 52% (the 10-run cap binds" in v.production_verdict.why


def test_unsafe_names_the_outcome_and_what_held() -> None:
    control = runs("per_device", 4, 4)
    v = decide(
        control + runs("warmup_locked", 2, 1) + runs("warmup", 7),
        production="warmup_locked", probes=HAZARD,
    )  # fmt: skip
    assert v.production_verdict.status is Status.UNSAFE
    assert v.production_verdict.why == "failed 1 of 2 runs (nested_fx_error 1)"
    assert status(v, "warmup") is Status.SAFE
    assert v.advice.startswith("do not upgrade with warmup_locked: failed 1 of 2 runs")
    assert "warmup held here" in v.advice


def test_control_never_fired_with_a_hazard_probe_is_masked() -> None:
    v = decide(
        runs("per_device", 4) + runs("warmup_locked", 30) + runs("singleton", 2),
        production="warmup_locked", probes=HAZARD,
    )  # fmt: skip
    assert v.production_verdict.status is Status.MASKED and not v.passed  # never on count alone
    assert "probe compiled_call_during_make_fx shows the hazard on torch 2.13.0" in (
        v.production_verdict.why
    )
    assert status(v, "per_device") is Status.MASKED
    # The control's own MASKED is what the advice says first; a lazy strategy is named after it.
    assert v.advice.startswith("undecided here: per_device cannot produce the race")
    assert "singleton only masked here" in v.advice and "per_device only masked" not in v.advice


def test_control_never_fired_with_the_hazard_gone_is_safe_fixed_upstream() -> None:
    v = decide(runs("per_device", 4) + runs("warmup_locked", 3), production="warmup_locked",
               probes=GONE)  # fmt: skip
    assert v.passed
    why = v.production_verdict.why
    assert "probe compiled_call_during_make_fx says the hazard is gone on torch 2.13.0" in why
    assert "fixed upstream" in why


def test_no_control_or_no_probe_verdict_is_inconclusive() -> None:
    v = decide(runs("warmup_locked", 30), production="warmup_locked", probes=GONE)
    assert v.production_verdict.status is Status.INCONCLUSIVE
    assert "per_device, the positive control, did not run in cold 1×2" in v.production_verdict.why
    v = decide(runs("per_device", 4) + runs("warmup_locked", 30), production="warmup_locked")
    assert v.production_verdict.status is Status.INCONCLUSIVE
    # A hazard on this torch is no mask where the control did not run at all (deselected):
    # nothing shows it cannot fire here.
    v = decide(runs("warmup_locked", 3), production="warmup_locked", probes=HAZARD)
    assert v.production_verdict.status is Status.INCONCLUSIVE
    assert "per_device, the positive control, did not run in cold 1×2" in v.production_verdict.why


def test_not_run_strategies_and_an_empty_session() -> None:
    v = decide([], production="warmup_locked", strategies=["per_device"], versions=VERSIONS,
               hardware="cpu")  # fmt: skip
    assert [s.status for s in v.strategies] == [Status.NOT_RUN, Status.NOT_RUN]
    assert v.advice.startswith("run warmup_locked (the production strategy)")
    assert render(v, decide_gate(v))[1].startswith("torch 2.13.0+cpu · transformers 5.17.0")


def test_render_fits_100_columns_and_ends_with_the_decision() -> None:
    control = runs("per_device", 8, 4, cache_state="warm") + runs("per_device", 8, 8)
    records = control + runs("warmup_locked", 20, cache_state="warm") + runs("warmup_locked", 5)
    for v in (
        decide(records, production="warmup_locked", probes=HAZARD,
               strategies=["singleton", "nested_fx_off"]),
        decide(runs("per_device", 4) + runs("warmup_locked", 3), production="warmup_locked",
               probes=HAZARD),
    ):  # fmt: skip
        lines = render(v, decide_gate(v))
        assert all(len(line) <= 100 for line in lines), max(lines, key=len)
        words = ("SAFE: ", "UNSAFE: ", "UNDECIDED: ")
        last = [i for i, line in enumerate(lines) if line.startswith(words)]
        assert len(last) == 1 and all(line.startswith(" ") for line in lines[last[0] + 1 :])
    text = "\n".join(render(v, decide_gate(v)))
    assert "MASKED       warmup_locked (production)" in text
    assert "ran: cold 1×2: 3 runs" in text


def test_repeats_come_from_the_controls_rate() -> None:
    cal = Calibration(cap=30)
    rate = control_rates(runs("per_device", 8, 4), "per_device")["cold 1×2"]
    assert repeats_for(rate, default=3, cal=cal)[0] == 20
    assert repeats_for(None, default=3, cal=cal)[0] == 3
    never = control_rates(runs("per_device", 4), "per_device")["cold 1×2"]
    assert repeats_for(never, default=3, cal=cal)[0] == 3
    assert repeats_for(rate, default=3, cal=Calibration(cap=5))[0] == 5


def _suite(tmp_path: Path, knob: str, *extra: str) -> tuple[subprocess.CompletedProcess, list]:
    results = tmp_path / "runs.jsonl"
    env = {k: v for k, v in os.environ.items() if not k.startswith("RACEGATE_")}
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "racegate/cases/test_race.py::test_race",
         "-p", "no:cacheprovider",
         "--racegate-workload", "tests.race_knob_workload:make_workload",
         "--racegate-preset", knob, "--racegate-strategies", "warmup_locked",
         "--racegate-devices", "cpu", "--racegate-threads-per-device", "2",
         "--racegate-results", str(results), "-W", "ignore", *extra],
        cwd=ROOT, capture_output=True, text=True, timeout=900, env=env,
    )  # fmt: skip
    return proc, read_jsonl(results) if results.exists() else []


@pytest.mark.skipif(sys.platform != "linux", reason="the suite's child processes need Linux")
@pytest.mark.process
def test_end_to_end_the_knob_sets_the_repeats_and_the_verdict(tmp_path: Path) -> None:
    """p=1: the control fails 3 of 3 runs (Wilson low 0.44: 8 runs asked, capped at 5, power
    94%), so warmup_locked runs 5 times and is SAFE; the block ends the session."""
    args = ("p=1", "--racegate-control-repeat", "3", "--racegate-power-cap", "5")
    proc, records = _suite(tmp_path, *args)
    if any(r.outcome == Outcome.NOT_CONCURRENT for r in records[:3]):
        # A loaded 2-core box starved a control run's threads (they never overlapped): that run
        # is no evidence either way, and the control's rate is then not the knob's. Once more.
        (tmp_path / "again").mkdir()
        proc, records = _suite(tmp_path / "again", *args)
    out = proc.stdout
    seen = [(r.scenario.strategy, r.outcome, r.detail) for r in records]  # what a failure says
    expected = ["per_device"] * 3 + ["warmup_locked"] * 5
    assert [r.scenario.strategy for r in records] == expected, seen
    assert [r.outcome for r in records[:3]] == ["nested_fx_error"] * 3, out[-3000:]
    assert all(r.outcome == "ok" for r in records[3:]), out[-3000:]
    block = " ".join(out[out.index(" racegate verdict ") :].split())  # unwrapped
    assert re.search(r"SAFE +warmup_locked \(production\): 0 of 5 runs failed; per_device failed "
                     r"3 of 3 cold runs here", block), block  # fmt: skip
    assert "the 5-run cap binds in cold 1×2" in block
    assert "SAFE: keep warmup_locked; per_device is unsafe here (exit 0; racegate explain " in block
    assert "racegate explain SAFE)" in block
    assert proc.returncode == 0, out[-3000:]  # pytest's exit is the decision's: SAFE
    # Progress: a line per run as it landed, in order, all before the verdict block (without
    # -n the case's output is captured: the lines pass around that capture).
    before_block = out[: out.index(" racegate verdict ")]
    said = re.findall(r"^racegate \[\d+:\d\d · (\d+) runs?\] (\S+) cold 1×2 run (\d+) of (\d+): "
                      r"(\S+) in ", before_block, re.MULTILINE)  # fmt: skip
    # Each with the runs its case makes: the control's 3, the production strategy's 5 (its cap).
    assert said == [
        (str(n), r.scenario.strategy, str(r.repeat_index + 1), "3" if n <= 3 else "5", r.outcome)
        for n, r in enumerate(records, 1)
    ], out[:3000]


@pytest.mark.skipif(sys.platform != "linux", reason="the suite's child processes need Linux")
@pytest.mark.process
def test_end_to_end_a_deselected_control_leaves_the_default_repeats(tmp_path: Path) -> None:
    """`-k warmup_locked` deselects the control: no rate will come, so the production case
    makes --repeat runs (3), not one at a time up to the cap (5 here), and stays undecided."""
    proc, records = _suite(
        tmp_path,
        "p=1",
        "-k",
        "warmup_locked",
        "--racegate-power-cap",
        "5",
        "--racegate-repeat",
        "3",
        "-rA",
    )
    out = proc.stdout
    assert [r.scenario.strategy for r in records] == ["warmup_locked"] * 3, out[-3000:]
    assert "per_device is not selected in cold 1×2 in this session: the default 3" in out
    block = " ".join(out[out.index(" racegate verdict ") :].split())
    assert "INCONCLUSIVE warmup_locked (production)" in block, block
    assert "per_device, the positive control, did not run in cold 1×2" in block, block
    # Every case passed, but nothing is decided: pytest exits UNDECIDED's own code, not 0.
    assert "UNDECIDED: run warmup_locked again before upgrading" in block, block
    assert proc.returncode == 7, out[-3000:]


@pytest.mark.skipif(sys.platform != "linux", reason="the suite's child processes need Linux")
@pytest.mark.process
def test_end_to_end_a_control_that_never_fires_masks(tmp_path: Path) -> None:
    """p=0: the window never opens, per_device stays clean, and on a torch whose probes show the
    hazard the verdict is MASKED (on one where they say it is gone: SAFE, fixed upstream)."""
    proc, records = _suite(tmp_path, "p=0", "--racegate-control-repeat", "1")
    assert [r.outcome for r in records] == ["ok", "ok"], proc.stdout[-3000:]
    block = " ".join(proc.stdout[proc.stdout.index(" racegate verdict ") :].split())
    masked = r"MASKED +warmup_locked \(production\).*probe compiled_call_during_make_fx"
    fixed = r"SAFE +warmup_locked \(production\).*fixed upstream"
    assert re.search(f"({masked}|{fixed})", block), block
    assert ("UNDECIDED: " in block and proc.returncode == 7) or (
        "SAFE: " in block and proc.returncode == 0
    ), (block, proc.returncode)


def _rc(**kw: object) -> RacegateConfig:
    fields = dict(
        gpus=2, devices=("cuda:0", "cuda:1"), threads_per_device=(1, 2), cache_states=(),
        strategies=(Strategy.WARMUP_LOCKED, Strategy.WARMUP), schedule=Schedule.RECOMPILE,
        switch_interval=1e-5, stall=15.0, preset="small", repeat=3, run_timeout=None, results=None,
        workload="w:f", production=Strategy.WARMUP_LOCKED, expectations=[], versions={},
    )  # fmt: skip
    return RacegateConfig(**(fields | kw))


def test_a_progress_line_counts_the_runs_its_case_makes_where_known() -> None:
    """The control's own runs (4), none for the runs the production case adds; the production
    strategy's from the control's rate once its runs in the cell have landed (4 of 4, low 51%:
    7), none before; another strategy's --repeat."""
    from racegate.cases.plan import planned_runs

    rc, cal = _rc(devices=("cpu",), gpus=0, threads_per_device=(2,)), Calibration()
    control = runs("per_device", 5, 5)
    control[4] = dataclasses.replace(control[4], repeat_index=4)  # an added run
    production = runs("warmup_locked", 1)[0]
    for k, r in enumerate(control[:4]):
        assert planned_runs(dataclasses.replace(r, repeat_index=k), rc, cal, control) == 4
    assert planned_runs(control[4], rc, cal, control) is None
    assert planned_runs(production, rc, cal, control[:2]) is None  # the rate still coming
    assert planned_runs(production, rc, cal, control[:4]) == 7
    assert planned_runs(runs("warmup", 1)[0], rc, cal, control) == 3


def test_each_control_cell_is_collected_with_its_production_cell_before_the_rest() -> None:
    from racegate.cases.plan import case_order

    rc = _rc(cache_states=("cold", "warm"), devices=("cpu",), gpus=0, threads_per_device=(2,))
    order = [(strategy, state) for strategy, state, _, _ in case_order(rc, Calibration())]
    assert order == [
        ("per_device", "cold"),
        ("warmup_locked", "cold"),
        ("per_device", "warm"),
        ("warmup_locked", "warm"),
        ("warmup", "cold"),
        ("warmup", "warm"),
    ]


@pytest.mark.parametrize(
    ("stop", "pooled", "may_hang", "at_once"),
    [(False, False, False, 4), (False, True, True, 4), (True, True, False, 4),
     (True, True, True, 1), (True, False, False, 1)],
)  # fmt: skip
def test_a_case_whose_runs_cannot_hang_asks_for_all_of_them_at_once_in_shared_slots(
    stop: bool, pooled: bool, may_hang: bool, at_once: int
) -> None:
    from racegate.cases.plan import runs_at_once

    assert runs_at_once(4, stop, pooled=pooled, may_hang=may_hang) == at_once


def test_cases_skip_one_thread_and_put_the_control_first() -> None:
    from racegate.cases.plan import (
        case_repeats,
        case_strategies,
        production_runs_done,
        production_runs_left,
        topologies,
    )

    rc, cal = _rc(), Calibration()
    assert topologies(rc) == [(("cuda:0", "cuda:1"), 1), (("cuda:0",), 2), (rc.devices, 2)]
    assert case_strategies(rc, cal) == ["per_device", "warmup_locked", "warmup"]
    assert case_repeats(Strategy.PER_DEVICE, rc, cal)[:2] == (4, False)
    assert case_repeats(Strategy.WARMUP, rc, cal)[:2] == (3, True)
    # The production case runs until the control's complete rate is met: 4 of 8 → 20 runs.
    control = runs("per_device", 8, 4)
    assert production_runs_done(19, "cold 1×2", rc, cal, control)[0] is False
    enough, why = production_runs_done(20, "cold 1×2", rc, cal, control)
    assert enough and "20 runs" in why
    # The control still running beside it (pytest-xdist): keep going, whatever its rate so far.
    enough, why = production_runs_done(25, "cold 1×2", rc, cal, runs("per_device", 2, 2))
    assert not enough and "2 of 4 runs" in why
    assert production_runs_done(30, "cold 1×2", rc, cal, [])[0]  # the cap ends it
    # A control run that never reached its cache state has landed all the same: the rate of
    # the other 3 (3 of 3, low 44% → 8 runs) decides, not one run at a time up to the cap.
    unprimed = runs("per_device", 4, 4, cache_state="warm")
    unprimed[0].cache = UNPRIMED
    left, why = production_runs_left(3, "warm 1×2", rc, cal, unprimed)
    assert left == 5 and "8 runs" in why, why
    # The control's case for the cell not selected (-k): no rate will come, so the default
    # --repeat (3), not one run at a time up to the 30-run cap.
    left, why = production_runs_left(1, "cold 1×2", rc, cal, [], control_selected=False)
    assert left == 2 and "not selected" in why, why
    assert production_runs_left(3, "cold 1×2", rc, cal, [], control_selected=False)[0] == 0


def test_the_control_gets_more_runs_where_its_rate_cannot_power_a_safe() -> None:
    """One H200, upgrade's candidate side: per_device failed 4/4 cold and 4/4 deleted but 0/4
    warm, so warmup_locked could only be INCONCLUSIVE there. More control runs in that cell
    decide it; where the control fired nowhere (a torch that masks the race) none would."""
    from racegate.cases.plan import RunCosts, control_top_up

    cal = Calibration()
    rates = control_rates(runs("per_device", 4, 0, cache_state="warm"), "per_device")
    more, why = control_top_up(rates["warm 1×2"], cal, fired_elsewhere=True)
    assert more == 8 and "never fired here" in why, why
    assert control_top_up(rates["warm 1×2"], cal, fired_elsewhere=False)[0] == 0
    # One hit in 4 (95% low 4.6%): 30 runs at the cap catch it with 76% < 90%: more, wherever.
    once = control_rates(runs("per_device", 4, 1), "per_device")["cold 1×2"]
    assert not once.gives_power(cal)
    more, why = control_top_up(once, cal, fired_elsewhere=False)
    assert more == 8 and "too seldom" in why, why
    # Two in 4 (low 15%) gives power (29 runs); where a control run costs 5 production runs
    # (a hang against a clean warm run) no more are asked (more, at equal costs: below);
    # reaching --control-max is enough too.
    twice = control_rates(runs("per_device", 4, 2), "per_device")["cold 1×2"]
    hangs = RunCosts(control_s=40.0, production_s=8.0)
    assert twice.gives_power(cal) and control_top_up(twice, cal, True, costs=hangs)[0] == 0
    at_max = control_rates(runs("per_device", 12, 1), "per_device")["cold 1×2"]
    assert control_top_up(at_max, cal, True) == (
        0,
        "per_device made its 12 runs at most (--racegate-control-max)",
    )
    assert control_top_up(None, cal, True) == (
        0,
        "per_device measured nothing here (no run of it reached its cache state)",
    )
    # Where no rate could do (bisect's --power-cap 1: even 12/12 powers one run to 68%), none.
    tiny = Calibration(cap=1, control_repeat=3)
    all_three = control_rates(runs("per_device", 3, 3), "per_device")["cold 1×2"]
    more, why = control_top_up(all_three, tiny, fired_elsewhere=True)
    assert more == 0 and "could not give a SAFE its power at the 1-run cap" in why, why


def test_more_control_runs_come_first_where_they_are_expected_to_save_production_runs() -> None:
    """One H200 at 9621b56: the warm control fired 2 of 4, which asks for 29 production runs
    (8 s each, one at a time beside the other cases). At the rate those 4 runs suggest, two more
    control runs most likely show 3 or 4 of 6 (13 or 8 runs). Measured against the runs a true
    rate of one in two would make, exactly (every outcome of the extra runs weighed by its
    binomial chance): the policy's control runs plus the production runs its rate then asks for
    come to fewer than 29. Not where the rate is already sharp (3/4, 4/4), nor where a control
    run costs far more than a production run, nor once the production runs are mostly made."""
    from racegate.cases.plan import RunCosts, cheaper_top_up, control_top_up

    cal = Calibration()
    twice = control_rates(runs("per_device", 4, 2, cache_state="warm"), "per_device")["warm 1×2"]
    more, why = control_top_up(twice, cal, fired_elsewhere=False)
    assert more >= 1 and "asks for 29 production runs" in why and "expected to save" in why, why
    at_half = more + sum(
        math.comb(more, x) * 0.5**more * ControlRate("warm 1×2", 2 + x, 4 + more).needed(cal)
        for x in range(more + 1)
    )
    assert at_half < 29 - 2, at_half
    for hits in (3, 4):
        sharp = ControlRate("warm 1×2", hits, 4)
        assert cheaper_top_up(sharp, cal, done=0, costs=RunCosts()) == (0, 0.0)
    assert cheaper_top_up(twice, cal, done=0, costs=RunCosts(40.0, 8.0)) == (0, 0.0)
    assert cheaper_top_up(twice, cal, done=25, costs=RunCosts()) == (0, 0.0)


def test_what_more_runs_are_likely_to_show_is_the_beta_binomial() -> None:
    """2 hits in 4, 2 more runs: under a uniform prior P(0, 1, 2 hits) = 2/7, 3/7, 2/7."""
    from racegate.harness.judge.metrics import predictive_hits

    assert predictive_hits(2, 4, 2) == pytest.approx([2 / 7, 3 / 7, 2 / 7])
    for hits, n, more in ((0, 4, 8), (4, 4, 3), (1, 6, 6)):
        assert sum(predictive_hits(hits, n, more)) == pytest.approx(1.0)
    # More hits seen: more hits expected.
    assert predictive_hits(4, 4, 1)[1] > predictive_hits(1, 4, 1)[1]
    with pytest.raises(ValueError, match="hits ≤ runs"):
        predictive_hits(5, 4, 1)


@pytest.mark.skipif(sys.platform != "linux", reason="the suite's child processes need Linux")
@pytest.mark.process
def test_end_to_end_the_production_case_adds_control_runs_until_power(tmp_path: Path) -> None:
    """p=1, one control run, a 5-run cap: 1/1 (low 21%) gives 5 runs 69% power, 2/2 (34%)
    87%, 3/3 (44%) 94% ≥ 90%: the production case adds 2 control runs, one at a time, then
    makes its 5; SAFE. Without the top-up: 1 control run and INCONCLUSIVE (exit 7)."""
    args = (
        "p=1",
        "--racegate-control-repeat",
        "1",
        "--racegate-power-cap",
        "5",
        "--racegate-control-max",
        "6",
        "-rA",
    )
    proc, records = _suite(tmp_path, *args)
    if any(
        r.outcome == Outcome.NOT_CONCURRENT for r in records if r.scenario.strategy == "per_device"
    ):
        (tmp_path / "again").mkdir()  # a starved control run (see above): once more
        proc, records = _suite(tmp_path / "again", *args)
    out = proc.stdout
    seen = [(r.scenario.strategy, r.outcome, r.repeat_index) for r in records]
    assert seen == [("per_device", "nested_fx_error", i) for i in range(3)] + [
        ("warmup_locked", "ok", i) for i in range(5)
    ], out[-3000:]
    assert "per_device fired too seldom here for power (cold 1×2 1/1" in out, out[-3000:]
    block = " ".join(out[out.index(" racegate verdict ") :].split())
    assert re.search(r"SAFE +warmup_locked \(production\): 0 of 5 runs failed; per_device failed "
                     r"3 of 3 cold runs here", block), block  # fmt: skip
    assert proc.returncode == 0, out[-3000:]


@pytest.mark.skipif(sys.platform != "linux", reason="the suite's child processes need Linux")
@pytest.mark.process
def test_end_to_end_added_control_runs_copy_the_control_cases_priming_run(tmp_path: Path) -> None:
    """The same top-up in a warm cell: the control case primes the control's cache once, and
    the production case's 2 added control runs copy that cache instead of priming again (one
    H200: a second priming run of 19 s on the chain the session's wall time hangs on)."""
    args = ("p=1", "--racegate-cache-states", "warm", "--racegate-control-repeat", "1",
            "--racegate-power-cap", "5", "--racegate-control-max", "6", "-rA")  # fmt: skip
    proc, records = _suite(tmp_path, *args)
    out = proc.stdout
    control = [r for r in records if r.scenario.strategy == "per_device"]
    assert [r.outcome for r in control] == ["nested_fx_error"] * 3, out[-3000:]
    assert all(r.cache is not None and r.cache.prime_copied for r in control), out[-3000:]
    assert "per_device: 2 more runs in warm 1×2, copying the control case's priming run" in out, (
        out[-3000:]
    )
    # The knob compiles with the eager backend, which leaves no inductor cache to prove warm:
    # the production strategy's first run says so (not this test's concern).
    assert "cache state 'warm' not proven" in out, out[-3000:]


@pytest.mark.skipif(sys.platform != "linux", reason="the suite's child processes need Linux")
@pytest.mark.process
def test_end_to_end_other_strategies_wait_for_the_controls_runs(tmp_path: Path) -> None:
    """Three xdist workers sharing 3 run slots, one case each (xdist's load scheduling hands 3
    items to 3 workers round robin): the control's (2 runs, at once), the production one and
    warmup's. warmup's runs start only once the control's have landed, so the control had a
    second slot: its cells and the production cells that wait on them are what the session's
    wall time hangs on (one H200: the cold control's hangs went one at a time while the other
    strategies held the slots)."""
    pytest.importorskip("xdist")
    args = ("p=1", "--racegate-strategies", "warmup_locked,warmup",
            "--racegate-control-repeat", "2", "--racegate-control-max", "2",
            "--racegate-power-cap", "3", "-n", "3", "--dist", "load")  # fmt: skip
    proc, records = _suite(tmp_path, *args)
    out = proc.stdout
    seen = [(r.scenario.strategy, r.started_at, r.wall_s) for r in records]
    control = [r for r in records if r.scenario.strategy == "per_device"]
    other = [r for r in records if r.scenario.strategy == "warmup"]
    assert len(control) == 2 and other, (seen, out[-3000:])
    # Under pytest-xdist the controller says each run as it lands, the workers nothing.
    said = re.findall(r"^racegate \[\d+:\d\d · \d+ runs?\] (\S+) cold", out, re.MULTILINE)
    assert sorted(said) == sorted(r.scenario.strategy for r in records), out[:3000]
    ended = max(_start(r) + r.wall_s for r in control)
    assert min(_start(r) for r in other) >= ended, seen
    # The control's two runs overlapped: it had both slots.
    first, second = sorted(control, key=_start)
    assert _start(second) < _start(first) + first.wall_s, seen


def _start(record: RunRecord) -> float:
    from datetime import datetime

    assert record.started_at is not None
    return datetime.fromisoformat(record.started_at).timestamp()


def test_control_runs_that_never_reached_their_cache_state_measure_nothing() -> None:
    """Seen on one H200 with 13 runs of a case at once: every priming run timed out and every
    control run hung. Those hangs are not the race: the rate counts only primed runs."""
    primed = runs("per_device", 4, 4, cache_state="warm")
    unprimed = [dataclasses.replace(r, cache=UNPRIMED) for r in primed]
    assert control_rates(primed, "per_device")["warm 1×2"].hits == 4
    assert "warm 1×2" not in control_rates(unprimed, "per_device")


def test_one_thread_runs_are_no_evidence_and_a_control_that_fired_elsewhere_is_no_mask() -> None:
    """Throughput runs (one thread in total) ask for no power; a cell the control skipped while it
    fired in others is INCONCLUSIVE, not MASKED."""
    alone = runs("warmup_locked", 3, tpd=1)
    v = decide(alone, production="warmup_locked", probes=HAZARD)
    assert status(v, "warmup_locked") is Status.INCONCLUSIVE
    assert "one thread in total" in v.production_verdict.why
    mixed = [*runs("per_device", 8, 8), *runs("warmup_locked", 5), *runs("warmup_locked", 2,
             cache_state="warm")]  # fmt: skip
    v = decide([*mixed, *alone], production="warmup_locked", probes=HAZARD)
    assert status(v, "warmup_locked") is Status.INCONCLUSIVE
    assert "did not run in warm 1×2" in v.production_verdict.why


def test_runs_busy_at_their_deadline_leave_a_strategy_undecided_not_unsafe() -> None:
    """On the H200 a production wave of 16 runs at once on 16 cores left 5 of 8 cold
    warmup_locked runs compiling at their deadline, and the gate said FAIL: do not upgrade
    (results/h200-stall-watch-signal-fix). Such runs show no failure and are no clean runs
    either."""
    # `timeout`, and a record from before that outcome (a hang marked busy at its deadline).
    slow = [record("warmup_locked", "timeout", busy_at_deadline=True) for _ in range(4)]
    slow.append(record("warmup_locked", "hang", busy_at_deadline=True))
    clean = runs("warmup_locked", 17)
    control = [record("per_device", "hang", stalled_s=20.0) for _ in range(8)]
    v = decide(control + slow + clean, production="warmup_locked", probes=HAZARD)
    p = v.production_verdict
    assert p.status is Status.INCONCLUSIVE and p.failed == 0 and not v.passed, p.why
    assert "5 of 22 runs timed out still at work (not stalled): too slow" in p.why
    assert "rerun with fewer runs side by side" in p.why
    # Which runs, and why, as `failed:` lists an UNSAFE strategy's: where two invocations
    # differ (one timed out, the other did not), the block says which run.
    assert len(p.unclean_runs) == 5 and p.unclean_runs[0].startswith("cold 1×2 run 1"), p
    assert ": timeout: " in p.unclean_runs[0] and ": hang: " in p.unclean_runs[4], p
    block = " ".join(render(v, decide_gate(v)))
    assert "not clean: cold 1×2 run 1" in block and "not clean: 2 more runs" not in block
    # A timeout of the control is no detection either, nor a clean run: its reason is said.
    rate = control_rates([*control, *slow[:1]], "warmup_locked")["cold 1×2"]
    assert (rate.hits, rate.runs) == (0, 1) and rate.others[0].startswith("timeout: "), rate
    # A hang it did not find busy (or a stalled one) is still a failure, and one real failure
    # beside slow runs makes the strategy unsafe.
    for hang in (record("warmup_locked", "hang"), record("warmup_locked", "hang", stalled_s=9.0)):
        assert judge_strategy("warmup_locked", [*clean, hang], {}).status is Status.UNSAFE
    mixed = judge_strategy("warmup_locked", [*slow, record("warmup_locked", "nested_fx_error")], {})
    assert mixed.status is Status.UNSAFE and mixed.failed == 1, mixed.why
    # The case names the real failure beside slow runs, not their hang.
    with pytest.raises(OUTCOME_ERRORS[Outcome.NESTED_FX_ERROR]):
        judge([*slow, record("warmup_locked", "nested_fx_error")])
    with pytest.raises(TooSlowToJudge):
        judge([*slow, *clean])


NOT_TOGETHER = (
    "thread 1's work beside other threads' is not shown: 3 of the runner's looks in its steady "
    "time beside others' steps found it running (needs ≥ 10)"
)


def test_runs_not_shown_concurrent_are_neither_clean_nor_a_failure() -> None:
    """The issue-54 trainer: `processes` read "UNSAFE: failed 2 of 9 runs (not_concurrent 2)"
    only because the runner could not show its workers overlapping. A not_concurrent run is
    like a timeout: it never makes a strategy UNSAFE, is never a clean run, gives the control
    no power, and the verdict says what would show the threads together."""
    apart = [record("processes", "not_concurrent", detail=NOT_TOGETHER) for _ in range(2)]
    control = [record("per_device", "hang", stalled_s=20.0) for _ in range(8)]
    v = decide(
        [*control, *runs("warmup_locked", 17), *apart, *runs("processes", 7)],
        production="warmup_locked", probes=HAZARD,
    )  # fmt: skip
    p = next(s for s in v.strategies if s.strategy == "processes")
    assert p.status is Status.INCONCLUSIVE and p.failed == 0 and not p.failed_runs, p
    assert "2 of 9 runs could not show their threads running together (not_concurrent)" in p.why
    assert "longer steps" in p.why and len(p.unclean_runs) == 2, p
    assert ": not_concurrent: " in p.unclean_runs[0], p.unclean_runs
    assert "processes are unsafe" not in v.advice and "processes is unsafe" not in v.advice
    # As the production strategy: never UNSAFE (never exit 1, never "do not upgrade").
    prod = decide([*control, *apart, *runs("processes", 7)], production="processes")
    decision = decide_gate(prod)
    assert prod.production_verdict.status is Status.INCONCLUSIVE, prod.production_verdict
    assert str(decision.word) == "UNDECIDED" and "do not upgrade" not in decision.next
    # Only the step's real failure makes it UNSAFE, counted alone, the others said apart.
    failed = record("processes", "recompile_blocked", error_text="RuntimeError: Detected recompile")
    mixed = judge_strategy("processes", [*apart, failed, *runs("processes", 6)], {})
    assert mixed.status is Status.UNSAFE and mixed.failed == 1, mixed
    assert mixed.failures == {"recompile_blocked": 1}, mixed.failures
    assert "failed 1 of 9 runs (recompile_blocked 1)" in mixed.why, mixed.why
    assert "not judged, neither clean nor failed (not_concurrent 2)" in mixed.why
    # A control's not_concurrent run is no detection: its reason is said, and it gives no power.
    rate = control_rates(
        [record("per_device", "not_concurrent", detail=NOT_TOGETHER)], "per_device"
    )
    only = rate["cold 1×2"]
    assert (only.hits, only.runs) == (0, 1) and only.others[0].startswith("not_concurrent: ")
    # The case: no outcome error an expectation could absorb, and never "unsafe".
    with pytest.raises(NotJudged, match="could not show their threads running together"):
        judge([*apart, *runs("processes", 3)])
    with pytest.raises(OUTCOME_ERRORS[Outcome.RECOMPILE_BLOCKED]):
        judge([*apart, failed])


def test_a_control_hang_at_the_timeout_is_no_detection_and_a_stalled_one_is() -> None:
    """A control run that merely met its timeout (a slow run on an overloaded host) did not
    show the race; one the stall watch stopped (racegate's threads stuck in the compiler) did.
    The verdict says how many control failures it did not count, and why."""
    stalled = [record("per_device", "hang", stalled_s=20.0) for _ in range(4)]
    timed_out = [record("per_device", "hang") for _ in range(4)]
    rate = control_rates(stalled + timed_out, "per_device")["cold 1×2"]
    assert (rate.hits, rate.runs, len(rate.others)) == (4, 8, 4)
    # Through the JSON records too (what a session's results file holds).
    again = [RunRecord.from_json(r.to_json()) for r in stalled + timed_out]
    assert control_rates(again, "per_device")["cold 1×2"] == rate
    prod = runs("warmup_locked", 5)
    # 8 of 8 caught would ask 5 clean runs (SAFE); 4 of 8 asks 20.
    assert decide(stalled * 2 + prod, production="warmup_locked", probes=HAZARD).passed
    v = decide(stalled + timed_out + prod, production="warmup_locked", probes=HAZARD)
    p = v.production_verdict
    assert p.status is Status.INCONCLUSIVE and p.more_runs == 15, p.why
    hang = "hang at the deadline that the stall watch did not call a stall"
    assert f"failed 4 of 8 cold runs (4 failed for another reason, no power: {hang} ×4)" in p.why
    text = "\n".join(render(v, decide_gate(v)))
    assert (
        f"cold 1×2 4/8 (95%: 22%–78%; 4 failed for another reason, no power: {hang} ×4)"
        in " ".join(text.split())
    ), text
    # Other failures of the control still count, and the control itself is still UNSAFE.
    other = [record("per_device", "nested_fx_error") for _ in range(4)]
    assert control_rates(other + timed_out, "per_device")["cold 1×2"].hits == 4
    assert status(v, "per_device") is Status.UNSAFE


def _timed(records: list[RunRecord], tokens: list[float]) -> list[RunRecord]:
    return [
        dataclasses.replace(r, tokens_per_s=t, timing_valid=True)
        for r, t in zip(records, tokens, strict=True)
    ]


def test_a_safe_strategy_significantly_faster_than_production_is_named() -> None:
    """If `processes` is faster and SAFE for a workload, the verdict says so."""
    control = runs("per_device", 8, 8)  # cold 8/8: a clean strategy needs 5 runs there
    base = [100.0, 102.0, 98.0, 101.0, 99.0]
    prod = _timed(runs("warmup_locked", 5), base)
    fast = _timed(runs("processes", 5), [t * 1.17 for t in base])
    v = decide(control + prod + fast, production="warmup_locked", probes=HAZARD)
    assert v.passed and status(v, "processes") is Status.SAFE
    (f,) = v.faster
    assert f.strategy == "processes" and f.cell == "cold 1×2"
    assert f.comparison.ratio == pytest.approx(1.17)
    text = "\n".join(render(v, decide_gate(v)))
    assert "processes is SAFE here and ran 1.17× the tokens/s of warmup_locked" in text
    assert "5 vs 5 timed runs" in text
    # Within the noise, not faster; faster but unsafe; faster but timed beside other runs.
    same = _timed(runs("processes", 5), [101.0, 99.0, 100.0, 98.0, 102.0])
    assert decide(control + prod + same, production="warmup_locked", probes=HAZARD).faster == ()
    bad = fast[:4] + runs("processes", 1, 1)
    v = decide(control + prod + bad, production="warmup_locked", probes=HAZARD)
    assert status(v, "processes") is Status.UNSAFE and v.faster == ()
    overlapped = [dataclasses.replace(r, timing_valid=False) for r in fast]
    v = decide(control + prod + overlapped, production="warmup_locked", probes=HAZARD)
    assert status(v, "processes") is Status.SAFE and v.faster == ()
    # A number that is no rate is left out, never a crash of the verdict.
    odd = fast[:3] + _timed(runs("processes", 2), [float("nan"), float("inf")])
    (f,) = decide(control + prod + odd, production="warmup_locked", probes=HAZARD).faster
    assert len(f.comparison.candidate) == 3


def test_every_word_the_verdict_block_prints_is_defined_on_the_page_it_names() -> None:
    """Each status, decision word and line label of a real block (one H200 cell's records:
    SAFE, UNSAFE, INCONCLUSIVE, NOT RUN beside each other) is in docs/vocabulary.md's
    verdict-words section (generated from racegate.harness.judge.words, which the block's last
    line names: `racegate explain WORD`)."""
    import json
    import lzma

    from racegate.harness.judge.gate import Word
    from racegate.harness.judge.words import explain_command

    page = (ROOT / "docs/vocabulary.md").read_text()
    section = page[page.index("## Verdict words") :]
    section = section[: section.index("\n## ", 5)] if "\n## " in section[5:] else section
    text = lzma.decompress((ROOT / "tests/data/one_h200_cell_safe.jsonl.xz").read_bytes())
    records = [RunRecord.from_json(json.loads(line)) for line in text.decode().splitlines()]
    v = decide(records, production="warmup_locked", strategies=["sdpa_dense"])
    block = render(v, decide_gate(v))
    assert explain_command(decide_gate(v).word) in " ".join(" ".join(block).split())
    printed = {line.split()[0] for line in block[1:] if line.startswith("  ") and line.split()}
    printed |= {"NOT RUN"} if any("NOT RUN" in line for line in block) else set()
    printed.discard("NOT")
    assert {"SAFE", "UNSAFE", "INCONCLUSIVE", "NOT RUN"} <= printed, block
    for word in [*(str(s) for s in Status), *(str(w) for w in Word)]:
        assert f"**{word}**" in section, word
    labels = ["(production)", "(positive control)", "`ran:`", "`failed:`", "`faster:`"]
    labels += ["`records:`", "`positive control X failed"]
    for label in labels:
        assert label in section, label
    assert any(line.startswith("positive control per_device failed: ") for line in block)
    assert any("ran: " in line for line in block) and any("failed: " in line for line in block)


def _raised(call) -> BaseException:
    try:
        call()
    except Exception as exc:
        return exc
    raise AssertionError(f"{call} raised nothing")


def _own(rec: RunRecord) -> RunRecord:
    scenario = dataclasses.replace(rec.scenario, workload="tests.own_bug_workload:make_workload")
    return dataclasses.replace(rec, scenario=scenario)


def test_the_trainers_own_error_is_named_as_its_own_not_torchs() -> None:
    """Issue 54: a make_replica that raises a plain ValueError read "UNSAFE ... do not upgrade",
    exactly like a race regression. Decided from the record (the raising frame in the
    workload's code, no frame of torch's compiler): still UNSAFE (the step failed here), but
    the line says the trainer raised it, and the advice is to fix the trainer."""
    import traceback

    from racegate.harness.judge.decide import exit_finding
    from racegate.harness.judge.outcomes import NESTED_FX_MESSAGE
    from racegate.harness.judge.race_evidence import own_error
    from racegate.harness.run.protocol import ChildEvidence
    from racegate.harness.run.threads import error_chain_text
    from tests import own_bug_workload as own_bug

    # make_replica raises in the child before its threads start: the child exits 1, its
    # stderr's traceback tail in the record (as the worker's Python prints it).
    exc = _raised(
        lambda: own_bug.make_workload("replica_raise").make_replica("cpu", "eager", seed=0)
    )
    stderr = "".join(traceback.format_exception(exc))
    child = ChildEvidence(1, False, 0, None, None, (), "", stderr, 1.0)
    found = exit_finding(child, 60.0)
    assert found is not None and found.outcome is Outcome.CRASH
    crashed = _own(record("eager", "crash", detail=found.reason))
    said = own_error(crashed)
    assert said is not None and said.startswith(
        "your code raised ValueError: bucket size 32 is larger than the model's 8 in make_replica"
    ), said
    # The step raises in a thread: the thread's error text, traceback and all.
    replica = own_bug.make_workload("step_raise").make_replica(torch_device(), "eager", seed=0)
    replica.step(0)
    text = error_chain_text(_raised(lambda: replica.step(0)))
    stepped = _own(record("eager", "other_error", error_text=text))
    said = own_error(stepped)
    assert said is not None and " in step (own_bug_workload.py:" in said, said
    # Not the trainer's: an error raised inside torch, and the race itself.
    import torch

    in_torch = error_chain_text(_raised(lambda: torch.zeros(2) @ torch.zeros(3)))
    assert own_error(_own(record("eager", "other_error", error_text=in_torch))) is None
    race = f"RuntimeError: {NESTED_FX_MESSAGE}"
    assert own_error(_own(record("eager", "nested_fx_error", error_text=race))) is None
    # The verdict and the gate: UNSAFE quoting the trainer's error; never "do not upgrade".
    control = [record("per_device", "hang", stalled_s=20.0) for _ in range(4)]
    v = decide([*control, crashed, crashed], production="eager")
    p = v.production_verdict
    assert p.status is Status.UNSAFE and p.own_error, p
    assert p.why.startswith("your code raised ValueError: bucket size 32"), p.why
    decision = decide_gate(v)
    assert str(decision.word) == "UNSAFE", decision
    assert decision.next.startswith("fix the trainer") and "do not upgrade" not in decision.next
    block = " ".join(" ".join(render(v, decision)).split())
    assert "the trainer's own bug, not the race" in block, block
    # `racegate upgrade` says whether it fails on both sides (then it is not the upgrade).
    from racegate.harness.judge.race_evidence import own_error_sides

    both = own_error_sides([crashed], [stepped], "eager")
    assert "the current environment fails the same way: not the upgrade" in both, both
    only = own_error_sides(runs("eager", 2), [stepped], "eager")
    assert "only with the candidate" in only, only
    assert own_error_sides([crashed], runs("eager", 2), "eager") == ""
    # A race failure beside it is still read as the race: no trainer's-bug advice.
    mixed = decide([*control, crashed, record("eager", "nested_fx_error")], production="eager")
    assert mixed.production_verdict.own_error is None
    assert mixed.advice.startswith("do not upgrade"), mixed.advice


def torch_device():
    import torch

    return torch.device("cpu")


def _on_gpu(rec: RunRecord, workload: str, torch: str = "2.11.0+cu130") -> RunRecord:
    scenario = dataclasses.replace(rec.scenario, devices=("cuda:0",), workload=workload)
    versions = Versions(**(VERSIONS | {"torch": torch}))
    return dataclasses.replace(rec, scenario=scenario, versions=versions)


def test_a_production_strategy_the_table_expects_to_fail_gets_a_verdict_quoting_the_row() -> None:
    """Issue 54: transformers' Qwen3 trainer, gated with `--production-strategy warmup` on one
    H100 (torch 2.11), got exit 4: "race.toml row 9 expects the production strategy 'warmup' to
    fail ... fix the trainer". The user asked whether their way of training is safe; racegate
    knows a reason it is not: UNSAFE, quoting the row's reason and source (a fact about torch:
    it applies to any workload whose strategy is warmed up as `warmup` is)."""
    from racegate.harness.judge import race_expectations as rx

    user = "examples.qwen3_flex_workload:make_workload"
    control = [_on_gpu(r, user) for r in runs("singleton", 4, failed=4)]
    clean = [_on_gpu(r, user) for r in runs("warmup", 30)]
    cal = Calibration(control="singleton")
    v = decide([*control, *clean], production="warmup", calibration=cal, probes=HAZARD)
    p = v.production_verdict
    row = next(
        r for r in rx.load() if r.strategies == {Strategy.WARMUP} and r.scope.device == "cuda"
    )
    assert p.status is Status.UNSAFE, p
    assert f"race.toml row {row.row} expects it to fail here (recompile_blocked)" in p.why, p.why
    assert row.reason in p.why and row.source in p.why, p.why
    assert "its 30 runs here did not show it" in p.why, p.why
    decision = decide_gate(v)
    assert str(decision.word) == "UNSAFE" and decision.exit_code == 1, decision
    # Its own runs' failure first, the row beside it.
    failed = _on_gpu(record("warmup", "recompile_blocked"), user)
    v = decide([*control, failed, *clean[:8]], production="warmup", calibration=cal)
    assert v.production_verdict.why.startswith("failed 1 of 9 runs (recompile_blocked 1)")
    assert f"a known failure: racegate/harness/expectations/race.toml row {row.row}" in (
        v.production_verdict.why
    )
    # Without the table (or where no row covers it: torch 2.10) the clean runs decide.
    assert decide([*control, *clean], production="warmup", calibration=cal, expected=[],
                  probes=HAZARD).production_verdict.status is Status.SAFE  # fmt: skip
    older = [_on_gpu(r, user, torch="2.10.0+cu128") for r in [*control, *clean]]
    assert decide(older, production="warmup", calibration=cal).passed
    # A row about racegate's drafter (its singleton, torch >= 2.13 on cuda) is not about a
    # user's singleton: only the drafter's own runs get it.
    mine = [
        _on_gpu(r, user, "2.13.0+cu130")
        for r in [*runs("warmup", 4, failed=4), *runs("singleton", 30)]
    ]
    theirs = decide(mine, production="singleton", calibration=Calibration(control="warmup"))
    assert "race.toml row" not in theirs.production_verdict.why, theirs.production_verdict
    builtin = [_on_gpu(r, DEFAULT_WORKLOAD, "2.13.0+cu130") for r in mine]
    ours = decide(builtin, production="singleton", calibration=Calibration(control="warmup"))
    assert ours.production_verdict.status is Status.UNSAFE and "about drafter" not in ours.advice
    assert "race.toml row" in ours.production_verdict.why, ours.production_verdict


def test_a_run_the_machine_failed_is_no_verdict_on_its_strategy() -> None:
    """A full TMPDIR made a production run crash: the decision was UNDECIDED, but the strategy's
    own row still read "UNSAFE ... (crash 1)" (issue 56, item 5). A run that failed for want of
    disk space shows nothing about the step: neither clean nor failed, its cause said."""
    full = "OSError: [Errno 28] No space left on device: '/tmp/racegate-root-x/cache'"
    crashed = record("warmup_locked", "crash", error_text=full)
    control = [record("per_device", "hang", stalled_s=20.0) for _ in range(8)]
    v = decide([*control, crashed, *runs("warmup_locked", 16)], production="warmup_locked",
               probes=HAZARD)  # fmt: skip
    p = v.production_verdict
    assert p.status is Status.INCONCLUSIVE and p.failed == 0 and not p.failed_runs, p
    assert "1 of 17 runs failed for want of disk space, not by their step" in p.why, p.why
    assert str(decide_gate(v).word) == "UNDECIDED"
    # The step's own crash is still a failure.
    own = record("warmup_locked", "crash", error_text="RuntimeError: CUDA error: illegal address")
    assert judge_strategy("warmup_locked", [own, *runs("warmup_locked", 5)], {}).status is (
        Status.UNSAFE
    )
