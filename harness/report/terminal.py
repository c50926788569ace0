"""pytest plugin: the session's verdict block (harness.judge.verdict) and its calibration options.

The last lines of a race session are the decision, rendered from the records this session
appended to its results file (under pytest-xdist only the controller prints, reading the file
all workers share) and this torch's probe verdicts: the table's, or the probe cases' own
results when they ran in this session.
"""

from __future__ import annotations

from collections.abc import Generator

import pytest

from harness.judge import probe_expectations, verdict
from harness.judge.suite import racegate_key
from harness.probes.runner import ProbeRun  # the probe registry and runner: no torch import
from harness.record import RunRecord, read_jsonl

calibration_key = pytest.StashKey[verdict.Calibration]()
PLUGIN_NAME = "racegate-verdict"
PROBES_PROPERTY = "racegate_probes"  # user property carrying a probe run's verdicts


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("racegate", "racegate: cross-thread compile race gate")
    default = verdict.Calibration()
    group.addoption(
        "--control-repeat",
        dest="racegate_control_repeat",
        type=int,
        default=default.control_repeat,
        help="runs per control case, all run: its detection rate sets the production "
        "strategy's runs (default: %(default)s, or --repeat if higher)",
    )
    group.addoption(
        "--records-from",
        dest="racegate_records_from",
        type=int,
        default=None,
        help="judge the results file's records from this one on (0: all), not only those this "
        "session appends: for a cell run as several pytest sessions into one file "
        "(default: this session's own)",
    )
    group.addoption(
        "--power-cap",
        dest="racegate_power_cap",
        type=int,
        default=default.cap,
        help="most runs per production case that power may ask for (default: %(default)s)",
    )


@pytest.hookimpl(trylast=True)  # after conftest.py's: the control is the workload's (its roles)
def pytest_configure(config: pytest.Config) -> None:
    opt = config.getoption
    rc = config.stash.get(racegate_key, None)
    control = rc.control if rc is not None else verdict.Calibration().control
    counts = {"--control-repeat": "racegate_control_repeat", "--power-cap": "racegate_power_cap"}
    for flag, name in counts.items():
        if opt(name) < 1:
            raise pytest.UsageError(f"racegate: {flag} must be ≥ 1, got {opt(name)}")
    config.stash[calibration_key] = verdict.Calibration(
        control=control,
        control_repeat=opt("racegate_control_repeat"),
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

    def pytest_sessionstart(self, session: pytest.Session) -> None:
        # Every process (xdist controller and each worker) starts its session before any case
        # runs anywhere, so what the file holds now is what earlier sessions wrote.
        rc = self.config.stash[racegate_key]
        start = self.config.getoption("racegate_records_from")
        if start is not None:
            self.before = max(0, start)
            return
        try:
            exists = rc.results is not None and rc.results.is_file()
            self.before = len(read_jsonl(rc.results)) if exists else 0
        except ValueError:
            self.before = -1

    def records(self) -> list[RunRecord]:
        """The records appended to the results file since this session began."""
        rc = self.config.stash[racegate_key]
        if rc.results is None or not rc.results.is_file():
            return []
        if self.before < 0:
            raise ValueError(f"{rc.results} was unreadable when this session began")
        return read_jsonl(rc.results)[self.before :]

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_makereport(
        self, item: pytest.Item, call: pytest.CallInfo[None]
    ) -> Generator[None, pytest.TestReport, pytest.TestReport]:
        """A probe case's whole probe run rides on its report to the controller (xdist too)."""
        report = yield
        if call.when == "call":
            for value in getattr(item, "funcargs", {}).values():
                if isinstance(value, ProbeRun):
                    seen = {r.name: str(r.verdict) for r in value}
                    report.user_properties.append((PROBES_PROPERTY, seen))
        return report

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if "race" in report.keywords:
            self.race = True
        for name, value in report.user_properties:
            if name == PROBES_PROPERTY and isinstance(value, dict):
                self.probes.update(value)


def _session(config: pytest.Config) -> SessionVerdict:
    plugin = config.pluginmanager.get_plugin(PLUGIN_NAME)
    assert isinstance(plugin, SessionVerdict), "harness.report.terminal is not loaded"
    return plugin


def session_records(config: pytest.Config) -> list[RunRecord]:
    """The records this session appended to its results file ([] without one), or those from
    --records-from on."""
    return _session(config).records()


def probe_verdicts(config: pytest.Config) -> tuple[dict[str, str], str]:
    """(probe -> verdict on this torch, where from): this session's probe runs beat the table."""
    rc = config.stash[racegate_key]
    device = "cpu" if rc.devices == ("cpu",) else "cuda"
    out: dict[str, str] = {}
    where = "expectations/probes.toml"
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


def block(config: pytest.Config) -> list[str]:
    """The verdict block for this session."""
    rc = config.stash[racegate_key]
    cal = config.stash[calibration_key]
    title = " racegate verdict ".center(verdict.WIDTH, "=")
    if rc.results is None:
        return [title, "no records were written (no results file): nothing to decide"]
    try:
        records = _session(config).records()
    except ValueError as exc:
        return [title, f"records unreadable, nothing decided: {exc}"[: verdict.WIDTH]]
    probes, where = probe_verdicts(config)
    decided = verdict.decide(
        records,
        production=str(rc.production),
        probes=probes,
        strategies=[cal.control, *rc.strategies],
        calibration=cal,
        versions=rc.versions,
        hardware=", ".join(rc.devices),
    )
    lines = verdict.render(decided)
    note = f"records: {len(records)} from {rc.results}; probe verdicts from {where}"
    return [lines[0], *verdict.wrap(note, 2), *lines[1:]]


def pytest_terminal_summary(
    terminalreporter: pytest.TerminalReporter, exitstatus: int, config: pytest.Config
) -> None:
    if hasattr(config, "workerinput") or racegate_key not in config.stash:
        return  # an xdist worker: the controller prints
    if not _session(config).race:
        return  # no race case ran: unit tests only
    for line in block(config):
        terminalreporter.write_line(line)
