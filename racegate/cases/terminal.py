"""pytest plugin: the session's verdict block (racegate.harness.judge.verdict) and its calibration
options.

The last lines of a race session are the decision, rendered from the records this session
appended to its results file (under pytest-xdist only the controller prints, reading the file
all workers share), those of each --racegate-records-from PATH (said), and this torch's probe
verdicts: the table's, or the probe cases' own results when they ran in this session. Unless
--no-racegate-gate, pytest exits with that decision's code (racegate.harness.judge.gate); with
--racegate-decision-file PATH the decision is also written there
(racegate.harness.judge.decision_file). Registered only in a session that asks for racegate
(racegate.cases.race_session).
"""

from __future__ import annotations

from collections.abc import Generator
from dataclasses import replace

import pytest

from racegate.cases.plan import race_case_of
from racegate.cases.session import racegate_key
from racegate.harness.doors import options
from racegate.harness.judge import decision_file, probe_expectations, verdict
from racegate.harness.judge.baselines import production_bars
from racegate.harness.judge.gate import Decision, decide_gate, infrastructure_cause
from racegate.harness.judge.inputs import check_records_from, records_from, roles_of
from racegate.harness.judge.suite import NotJudged, RaceOutcomeError
from racegate.harness.probes.runner import (
    ProbeRun,  # the probe registry and runner: no torch import
)
from racegate.harness.run import state
from racegate.harness.run.record import RunRecord, read_jsonl
from racegate.harness.scenario import settings

calibration_key = pytest.StashKey[verdict.Calibration]()
PLUGIN_NAME = "racegate-verdict"
PROBES_PROPERTY = "racegate_probes"  # user property carrying a probe run's verdicts
# User property on a race case's failed report whose failure is a run outcome the records hold
# (a RaceOutcomeError, or a strict xfail that passed): the verdict judges it, so it is evidence,
# not a broken case.
EVIDENCE_PROPERTY = "racegate_evidence"
# User property on a race case's failed report whose failure is a run outcome of a strategy that
# is not the production one: the verdict calls that strategy UNSAFE here, and the decision is
# the production strategy's. pytest counts such a case "unsafe", not "failed" (its own last line
# would otherwise say "1 failed" above a SAFE that exits 0).
OTHER_STRATEGY_PROPERTY = "racegate_other_strategy"
UNSAFE_CATEGORY = "unsafe"


def check_calibration(config: pytest.Config) -> None:
    """The calibration's counts (--control-repeat, --control-max, --power-cap): a ValueError of
    one line naming the bad one. racegate.cases.plugin checks them before it makes anything."""
    settings.check_environment()  # the run variables too: a bad one is a usage error here
    opt = config.getoption
    counts = {
        "--control-repeat": "racegate_control_repeat",
        "--control-max": "racegate_control_max",
        "--power-cap": "racegate_power_cap",
    }
    for flag, name in counts.items():
        if opt(name) < 1:
            raise ValueError(f"{flag} must be ≥ 1, got {opt(name)}")
    if opt("racegate_control_max") < opt("racegate_control_repeat"):
        raise ValueError(
            f"--control-max {opt('racegate_control_max')} is below --control-repeat "
            f"{opt('racegate_control_repeat')}: the control's runs per cell are at least its "
            "repeats (give --control-max ≥ --control-repeat)"
        )


# Registered by racegate.cases.plugin from its own pytest_configure, once the settings are stashed
# (the control is the workload's: its roles); its options are
# racegate.harness.doors.options.PYTEST_ONLY.
def pytest_configure(config: pytest.Config) -> None:
    opt = config.getoption
    rc = config.stash.get(racegate_key, None)
    control = rc.control if rc is not None else verdict.Calibration().control
    try:
        check_records_from(opt("racegate_records_from"))
    except ValueError as exc:
        raise pytest.UsageError(f"racegate: {options.pytest_words(str(exc))}") from None
    _clear_decision_file(config)
    config.stash[calibration_key] = verdict.Calibration(
        control=control,
        control_repeat=opt("racegate_control_repeat"),
        control_max=opt("racegate_control_max"),
        cap=opt("racegate_power_cap"),
    )
    config.pluginmanager.register(SessionVerdict(config), PLUGIN_NAME)


class SessionVerdict:
    """This session's window on the results file and the probe verdicts its cases reported."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self.before = 0  # records the results file held when this session began; -1 unreadable
        self.probes: dict[str, str] = {}
        self.race = False  # a race case reported in this session
        self.failed_cases = 0  # failed tests whose failure is no run outcome (a broken case)
        self.concluded: tuple[list[str], Decision] | None = None  # the block and its decision

    def pytest_sessionstart(self, session: pytest.Session) -> None:
        # Every process (xdist controller and each worker) starts its session before any case
        # runs anywhere, so what the file holds now is what earlier sessions wrote.
        rc = self.config.stash[racegate_key]
        try:
            exists = rc.results is not None and rc.results.is_file()
            self.before = len(read_jsonl(rc.results)) if exists else 0
        except ValueError:
            self.before = -1

    def records(self) -> list[RunRecord]:
        """The records appended to the results file since this session began (never those an
        earlier session left there: each invocation judges its own run)."""
        rc = self.config.stash[racegate_key]
        if rc.results is None or not rc.results.is_file():
            return []
        if self.before < 0:
            raise ValueError(f"{rc.results} was unreadable when this session began")
        return read_jsonl(rc.results)[self.before :]

    def pytest_collectreport(self, report: pytest.CollectReport) -> None:
        # A module that failed to collect (kept going with --continue-on-collection-errors)
        # is a broken case: no evidence either way, so the decision is never SAFE.
        if report.failed:
            self.failed_cases += 1

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_makereport(
        self, item: pytest.Item, call: pytest.CallInfo[None]
    ) -> Generator[None, pytest.TestReport, pytest.TestReport]:
        """A probe case's whole probe run rides on its report to the controller (xdist too)."""
        report = yield
        outcome = call.excinfo is None or call.excinfo.errisinstance(RaceOutcomeError)
        if call.when == "call" and report.failed and "race" in item.keywords and outcome:
            report.user_properties.append((EVIDENCE_PROPERTY, True))
            case = race_case_of(item)
            production = str(self.config.stash[racegate_key].production)
            # A case whose runs showed nothing either way (NotJudged) is no "unsafe" one.
            judged = call.excinfo is not None and not call.excinfo.errisinstance(NotJudged)
            if judged and case is not None and str(case[0]) != production:
                report.user_properties.append((OTHER_STRATEGY_PROPERTY, case[0]))
        if call.when == "call":
            for value in getattr(item, "funcargs", {}).values():
                if isinstance(value, ProbeRun):
                    seen = {r.name: str(r.verdict) for r in value}
                    report.user_properties.append((PROBES_PROPERTY, seen))
        return report

    @pytest.hookimpl(tryfirst=True)
    def pytest_report_teststatus(
        self, report: pytest.TestReport, config: pytest.Config
    ) -> tuple[str, str, str] | None:
        """A strategy other than the production one failed by a run outcome: "unsafe" in
        pytest's counts (a strict xfail that passed, upstream's change, stays "failed")."""
        if report.when == "call" and report.failed and _other_strategy(report) is not None:
            return UNSAFE_CATEGORY, "U", "UNSAFE"
        return None

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if "race" in report.keywords:
            self.race = True
        if report.failed and (EVIDENCE_PROPERTY, True) not in report.user_properties:
            self.failed_cases += 1
        for name, value in report.user_properties:
            if name == PROBES_PROPERTY and isinstance(value, dict):
                self.probes.update(value)


def _other_strategy(report: pytest.TestReport) -> str | None:
    """The strategy of a race case that failed by a run outcome, where it is not the production
    strategy (its report's OTHER_STRATEGY_PROPERTY); None otherwise."""
    for name, value in report.user_properties:
        if name == OTHER_STRATEGY_PROPERTY and isinstance(value, str):
            return value
    return None


def _unsafe_lines(terminalreporter: pytest.TerminalReporter) -> list[str]:
    """One line per case pytest counted "unsafe", with its failure's first line: pytest lists
    only "failed" ones in its failures and short summary."""
    lines = []
    for report in terminalreporter.stats.get(UNSAFE_CATEGORY, []):
        crash = getattr(report.longrepr, "reprcrash", None)
        first = (crash.message if crash is not None else str(report.longrepr)).splitlines()
        lines += verdict.wrap(f"UNSAFE {report.nodeid}: {first[0] if first else 'failed'}", 7)
    if lines:
        head = (
            "racegate: cases of strategies other than the production one that failed by a run "
            'outcome (pytest counts them "unsafe"; the verdict below lists each failed run):'
        )
        lines = [*verdict.wrap(head, 2), *lines]
    return lines


def _session(config: pytest.Config) -> SessionVerdict:
    plugin = config.pluginmanager.get_plugin(PLUGIN_NAME)
    assert isinstance(plugin, SessionVerdict), "racegate.cases.terminal is not loaded"
    return plugin


def session_records(config: pytest.Config) -> list[RunRecord]:
    """The records this session appended to its results file ([] without one)."""
    return _session(config).records()


def probe_verdicts(config: pytest.Config) -> tuple[dict[str, str], str]:
    """(probe -> verdict on this torch, where from): this session's probe runs beat the table."""
    rc = config.stash[racegate_key]
    device = "cpu" if rc.devices == ("cpu",) else "cuda"
    out: dict[str, str] = {}
    where = "racegate/harness/expectations/probes.toml"
    try:
        table = probe_expectations.load()
        for name in verdict.RACE_PROBES:
            entry = probe_expectations.lookup(table, name, rc.versions["torch"], device)
            if entry is not None:
                out[name] = str(entry.verdict)
    except (OSError, ValueError) as exc:
        where = f"no table ({exc})"
    ran = _session(config).probes
    if ran:
        out.update(ran)
        where = "this session's probe run"
    return out, where


def block(config: pytest.Config, failed_cases: int = 0) -> tuple[list[str], Decision]:
    """The verdict block for this session and the gate's decision its last line says
    (failed_cases: tests that failed other than by a run outcome the verdict judges)."""
    rc = config.stash[racegate_key]
    cal = config.stash[calibration_key]
    title = " racegate verdict ".center(verdict.WIDTH, "=")
    try:
        if rc.results is None:
            raise ValueError("no records were written (no results file)")
        session = _session(config).records()  # each run once: none of these merged again
        merged, notes = records_from(config.getoption("racegate_records_from"), own=session)
        records = [*merged, *session]
        # The roles the records ran under, as the report reads them (this session's own).
        production, control = roles_of(records, empty=(str(rc.production), cal.control))
    except (OSError, ValueError) as exc:
        decision = decide_gate(None)
        lines = verdict.wrap(f"records unreadable, nothing decided: {exc}", 2)
        return [title, *lines, decision.line()], decision
    probes, where = probe_verdicts(config)
    decided = verdict.decide(
        records,
        production=production,
        probes=probes,
        strategies=[control, *rc.strategies],
        calibration=replace(cal, control=control),
        versions=rc.versions,
        hardware=", ".join(rc.devices),
    )
    bars = production_bars(records, production)  # memory, the test slowdown: as the report
    cause = infrastructure_cause(records)  # a full disk: no verdict, as `run` and the report
    decision = decide_gate(decided, failed_cases=failed_cases, missed=bars, infrastructure=cause)
    lines = verdict.render(decided, decision)
    own = len(records) - len(merged)
    note = f"records: {own} from {rc.results}; probe verdicts from {where}"
    notes = [*notes, note]
    return [lines[0], *(w for n in notes for w in verdict.wrap(n, 2)), *lines[1:]], decision


def _conclude(config: pytest.Config, failed_cases: int) -> tuple[list[str], Decision] | None:
    """The block and decision, once per session (the controller only; None where no race case
    ran: unit tests only)."""
    if hasattr(config, "workerinput") or racegate_key not in config.stash:
        return None  # an xdist worker: the controller decides
    plugin = _session(config)
    if not plugin.race:
        return None
    if plugin.concluded is None:
        plugin.concluded = block(config, failed_cases)
    return plugin.concluded


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Under the gate (the default), pytest exits with the decision's code: a session whose
    cases passed exits 0 only when the decision is SAFE. Interrupts, internal and usage errors
    keep pytest's own codes. --decision-file gets the decision, gate or not (its reader checks
    pytest's exit against it)."""
    rc = session.config.stash[racegate_key]
    own = rc.results is not None and rc.results.parent.parent == state.runs_dir(
        session.config.rootpath
    )
    if (
        exitstatus == pytest.ExitCode.INTERRUPTED
        and own
        and not hasattr(session.config, "workerinput")
    ):  # Ctrl-C: `report` must never take this run for the latest complete one
        state.end_incomplete(rc.results, "interrupted (Ctrl-C): pytest stopped before its end")
    concluded = _conclude(session.config, _session(session.config).failed_cases)
    if concluded is None:
        return
    gate = session.config.getoption("racegate_gate")
    if gate and exitstatus in (pytest.ExitCode.OK, pytest.ExitCode.TESTS_FAILED):
        session.exitstatus = concluded[1].exit_code
    path = session.config.getoption("racegate_decision_file")
    if path is not None and rc.results is not None:
        decided = decision_file.SessionDecision(concluded[1], str(rc.results))
        decision_file.write(path, decided)


def _clear_decision_file(config: pytest.Config) -> None:
    """--decision-file: a file already at the path is removed (a stale decision must never be
    read as this session's); a path that cannot hold the file is a usage error now."""
    path = config.getoption("racegate_decision_file")
    if path is None or hasattr(config, "workerinput"):  # the controller writes it
        return
    if path.is_dir() or not path.parent.is_dir():
        what = "is a folder" if path.is_dir() else "is in no existing folder"
        raise pytest.UsageError(
            f"racegate: --racegate-decision-file {path} {what}; give a file path"
        )
    try:
        path.unlink(missing_ok=True)
    except OSError as exc:
        raise pytest.UsageError(
            f"racegate: --racegate-decision-file {path}: cannot remove the file there: "
            f"{exc.strerror}"
        ) from None


LAST_LINE_CLAUSE = 90  # characters of the decision's reason in pytest's last line


def last_line_key(decision: Decision) -> str:
    """What pytest's last line counts for a decision other than SAFE ("17 passed, 1 UNDECIDED
    verdict (undecided here: per_device cannot produce the race on this machine) in 373s"): a
    session whose cases all passed must not read as green where nothing, or UNSAFE, was
    decided. pytest prints every key of its stats in that line (as pytest-rerunfailures'
    "rerun"); the decision's reason up to its first ';'."""
    clause = decision.reason.split(";")[0].strip().rstrip(".")
    if len(clause) > LAST_LINE_CLAUSE:
        clause = clause[: LAST_LINE_CLAUSE - 1].rstrip() + "…"
    return f"{decision.word} verdict ({clause})" if clause else f"{decision.word} verdict"


def pytest_terminal_summary(
    terminalreporter: pytest.TerminalReporter, exitstatus: int, config: pytest.Config
) -> None:
    concluded = _conclude(config, _session(config).failed_cases)
    if concluded is None:
        return
    for line in [*_unsafe_lines(terminalreporter), *concluded[0]]:
        terminalreporter.write_line(line)
    decision = concluded[1]
    if not decision.passed:  # pytest's own last line says it too, not only the block
        terminalreporter.stats.setdefault(last_line_key(decision), []).append(decision)
    if not config.getoption("racegate_gate"):
        terminalreporter.write_line(
            f"(--no-racegate-gate: pytest's exit status is its own, not {concluded[1].word}'s)"
        )
