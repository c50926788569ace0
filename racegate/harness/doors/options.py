"""The run options shared by pytest and `racegate run`: one table, one set of defaults, one check.

The pytest plugin (racegate/cases/plugin.py) and racegate/harness/doors/cli.py both add these
options from `SHARED` and resolve them with `resolve()`, so a flag means the same and defaults the
same in both; `PYTEST_ONLY` holds the plugin's own (xdist sharing, calibration, the gate). A bad
value is a ValueError of one line naming the value, where it came from and the allowed values.
The table names each option by its short flag (`--devices`), as `racegate run` takes it; pytest
takes it prefixed (`--racegate-devices`, `pytest_flag`), so that racegate's options never clash
with a project's own. `racegate race` and `bootstrap.py race` take either and hand pytest the
prefixed one (`to_pytest`). Standard library only, like everything it imports (bootstrap.py
imports it before any environment exists; tests/test_imports.py checks).
"""

from __future__ import annotations

import math
import os
import re
import shutil
import subprocess
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from racegate.harness.judge.calibration import Calibration
from racegate.harness.run import files
from racegate.harness.scenario import settings
from racegate.harness.scenario.spec import STALL_S, parse_devices
from racegate.harness.scenario.vocab import (
    CacheState,
    Schedule,
    Strategy,
    StrategySpec,
    parse_choice,
    spec_of,
    strategies_where,
)
from racegate.harness.scenario.workload_api import (
    Workload,
    WorkloadError,
    WorkloadSpec,
    has_strategies,
    load_workload,
    roles_of,
)

CPU_PRESET, GPU_PRESET = "tiny", "small"
# The suite's strategies per device kind, from the registry (flex has no CPU backward).
CPU_STRATEGIES = strategies_where(in_suite=True, trains_on_cpu=True)
GPU_STRATEGIES = strategies_where(in_suite=True)
SWITCH_INTERVAL_S = 1e-5  # short GIL slices: steady threads call compiled code while one traces
# The longest: a slice of a second already lets a thread run whole steps alone. Without a bound,
# inf (or 1e20) was taken, and Python's sys.setswitchinterval turns it into 0.
SWITCH_INTERVAL_MAX_S = 1.0
CLI_RUN_TIMEOUT_S = 300.0  # `harness run` has no pytest case budget to split


# Options whose value is a path. pytest picks its rootdir from the command line's paths before
# any plugin's options are known, so `--results x.jsonl` (two words, x existing) makes x's
# folder the rootdir, and the checkout's conftest, ini and testpaths are lost; `--results=x`
# is one word (racegate.cases.plugin refuses the two-word form where it did that).
PATH_FLAGS = ("--results", "--out", "--records-from", "--decision-file")
PYTEST_PREFIX = "--racegate-"


def case_jobs(text: str) -> int:
    """--case-jobs: a number ≥ 1, or auto (0: the session's shared run slots,
    racegate.harness.run.slots)."""
    if text.strip().lower() == "auto":
        return 0
    try:
        n = int(text)
    except ValueError:
        n = 0
    if n < 1:
        raise ValueError(f"--case-jobs {text!r}: give auto or a whole number ≥ 1")
    return n


@dataclass(frozen=True)
class Option:
    """One run option: its flag, its namespace key, its help (default stated in the text)."""

    flag: str
    dest: str
    help: str
    type: Callable[[str], Any] | None = None
    aliases: tuple[str, ...] = ()  # older `harness run` spellings, still accepted by the CLI
    switch: bool = False  # a store_true flag
    metavar: str = "LIST"
    default: Any = None
    action: str | None = None  # an argparse action other than storing a value ("append", ...)

    def argparse_kwargs(self) -> dict[str, Any]:
        if self.action in ("store_true", "store_false"):
            return {"action": self.action, "default": self.default, "help": self.help}
        if self.action is not None:
            kwargs = {"action": self.action, "default": self.default, "help": self.help}
            return kwargs | {"type": self.type, "metavar": self.metavar}
        if self.switch:
            return {"action": "store_true", "default": False, "help": self.help}
        return {
            "default": self.default,
            "type": self.type,
            "help": self.help,
            "metavar": self.metavar,
        }


SHARED: tuple[Option, ...] = (
    Option("--devices", "devices", "'cpu' or GPU indices '0,1' (default: every GPU, else cpu)"),
    Option(
        "--threads-per-device",
        "threads_per_device",
        "comma list of threads per device (default: 3 in the race cases, with 1 beside it on "
        "GPUs; `racegate run`: 1,2 on GPU, 2 on CPU)",
    ),
    Option(
        "--strategies",
        "strategies",
        "comma list of the workload's strategies (the built-in's: "
        f"{', '.join(Strategy)}) (default: pytest: every suite strategy the device trains; "
        "harness run: the production strategy)",
        aliases=("--strategy",),
    ),
    Option(
        "--production-strategy",
        "production_strategy",
        "the strategy your trainer ships with: never expected to fail (default: env "
        "RACEGATE_PRODUCTION_STRATEGY, [tool.racegate] production_strategy, else the workload's "
        "roles(); the built-in drafter's: warmup_locked)",
        metavar="NAME",
    ),
    Option(
        "--control-strategy",
        "control_strategy",
        "the known-bad strategy run as the positive control in every cache state and topology "
        "of the production strategy (default: env RACEGATE_CONTROL_STRATEGY, [tool.racegate] "
        "control_strategy, else the workload's roles(); the built-in drafter's: per_device)",
        metavar="NAME",
    ),
    Option(
        "--cache-states",
        "cache_states",
        f"comma list of {', '.join(CacheState)} (default: all on GPU, cold on CPU)",
        aliases=("--cache-state",),
    ),
    Option(
        "--schedule",
        "schedule",
        f"start schedule, one of {', '.join(Schedule)} (default: {Schedule.RECOMPILE})",
        metavar="NAME",
    ),
    Option(
        "--switch-interval",
        "switch_interval",
        "sys.setswitchinterval in each run: short GIL slices let steady threads call compiled "
        f"code while another thread traces (default: {SWITCH_INTERVAL_S:g})",
        type=float,
        metavar="SECONDS",
    ),
    Option(
        "--stall",
        "stall",
        "seconds every stack of a run may stay unchanged, its processes idle, before the run "
        f"is called a hang; 0: wait for the timeout (default: {STALL_S:g})",
        type=float,
        metavar="SECONDS",
    ),
    Option(
        "--preset",
        "preset",
        f"workload preset (default: {CPU_PRESET} on CPU, {GPU_PRESET} on GPU)",
        metavar="NAME",
    ),
    Option(
        "--repeat",
        "repeat",
        "isolated runs per scenario; pytest: a case fails (and stops) at its first failed run "
        "(default: 3 on GPU, where one run finds the race 40-80%% of the time; 1 on CPU)",
        type=int,
        metavar="N",
    ),
    Option(
        "--run-timeout",
        "run_timeout",
        "seconds one isolated run may take before it counts as a hang (default: pytest: 80%% "
        f"of the case's timeout, split over its runs; harness run: {CLI_RUN_TIMEOUT_S:g})",
        type=float,
        aliases=("--timeout",),
        metavar="SECONDS",
    ),
    Option(
        "--results",
        "results",
        "append every run record to this JSON Lines file (default: a new folder under "
        ".racegate/runs/, which `python -m racegate report` reads when given no records)",
        aliases=("--out",),
        metavar="PATH",
    ),
    Option(
        "--workload",
        "workload",
        "module:factory of the workload (default: env RACEGATE_WORKLOAD, [tool.racegate] "
        "workload, else the built-in model/)",
        metavar="MODULE:FACTORY",
    ),
)


_CALIBRATION = Calibration()
# The pytest plugin's own options, beside SHARED (dest gets the plugin's "racegate_" prefix).
PYTEST_ONLY: tuple[Option, ...] = (
    Option(
        "--share-gpus",
        "share_gpus",
        "under pytest-xdist, let every worker use every GPU instead of a slice of them, so race "
        "cases on all GPUs run side by side (outcomes stay valid; throughput cases skip under "
        "any -n above 1, as their timings would not be)",
        switch=True,
    ),
    Option(
        "--case-jobs",
        "case_jobs",
        "isolated runs of one race case at once (its control's runs, and the production "
        "strategy's once power is known): for outcome counts, never timing; auto: a case "
        "batches its runs into the run slots left free, one per pytest-xdist worker (sized to "
        "the host) or the pool a parent handed over (racegate upgrade's two sides), so the "
        "production strategy at its power cap takes the slots of cases that finished; a case "
        "that stops at its first failure batches too unless its runs can hang; 1 without "
        "xdist or a parent's pool (default: %(default)s)",
        type=case_jobs,
        default="auto",
        metavar="N|auto",
    ),
    Option(
        "--control-repeat",
        "control_repeat",
        "runs per control case, all run: its detection rate sets the production strategy's runs "
        "(default: %(default)s, or --repeat if higher)",
        type=int,
        default=_CALIBRATION.control_repeat,
        metavar="N",
    ),
    Option(
        "--control-max",
        "control_max",
        "most control runs per cell: where its first runs cannot give the production strategy "
        "its power (it never fired there but did in another cell, or too seldom), the "
        "production case adds control runs up to this many (default: %(default)s)",
        type=int,
        default=_CALIBRATION.control_max,
        metavar="N",
    ),
    Option(
        "--records-from",
        "records_from",
        "also judge the records in this JSON Lines file or folder (repeatable); the verdict "
        "block says how many it merged from each (default: only this session's own)",
        type=Path,
        action="append",
        default=[],
        metavar="PATH",
    ),
    Option(
        "--racegate-gate",
        "gate",
        "when race cases ran, pytest's exit status is the gate's decision: 0 SAFE, 1 UNSAFE, "
        "7 UNDECIDED (racegate explain WORD; the default)",
        action="store_true",
        default=True,
    ),
    Option(
        "--no-racegate-gate",
        "gate",
        "pytest's exit status is its own (tests passed or failed), whatever the verdict: for "
        "testing racegate itself (`bootstrap.py test`), not for gating an upgrade",
        action="store_false",
        default=True,
    ),
    Option(
        "--power-cap",
        "power_cap",
        "most runs per production case that power may ask for (default: %(default)s)",
        type=int,
        default=_CALIBRATION.cap,
        metavar="N",
    ),
    Option(
        "--decision-file",
        "decision_file",
        "where race cases ran, write the decision the verdict block ends with to this JSON file "
        "(racegate/harness/judge/decision_file.py; `racegate upgrade` reads it); a file already "
        "there is "
        "removed first (default: none written)",
        type=Path,
        metavar="PATH",
    ),
)


def pytest_flag(flag: str) -> str:
    """The pytest spelling of a table flag: `--devices` → `--racegate-devices`; a flag that
    names racegate already (`--no-racegate-gate`) is its own."""
    return flag if "racegate-" in flag else PYTEST_PREFIX + flag.removeprefix("--")


# Short flag → pytest flag, for every option of the table (not `racegate run`'s older aliases:
# `--timeout` is pytest-timeout's own option, `--out` and the singular ones were never pytest's).
PYTEST_FLAGS = {
    o.flag: pytest_flag(o.flag) for o in (*SHARED, *PYTEST_ONLY) if pytest_flag(o.flag) != o.flag
}
_SHORT_FLAG = re.compile(
    r"(?<![\w-])(" + "|".join(map(re.escape, sorted(PYTEST_FLAGS, key=len)[::-1])) + r")(?![\w-])"
)


def to_pytest(args: Sequence[str]) -> list[str]:
    """pytest arguments with racegate's short flags (`--devices 0`, `--repeat=5`) in their pytest
    spelling (`--racegate-devices 0`, `--racegate-repeat=5`); everything else as given. What
    `racegate race` and `bootstrap.py race` hand pytest."""
    out = []
    for arg in args:
        flag, eq, value = arg.partition("=")
        out.append(PYTEST_FLAGS[flag] + eq + value if flag in PYTEST_FLAGS else arg)
    return out


def pytest_words(text: str) -> str:
    """`text` (a help line or an error the table's checks wrote with short flags) as pytest's
    user reads it: every short flag in its pytest spelling."""
    return _SHORT_FLAG.sub(lambda m: PYTEST_FLAGS[m.group(1)], text)


def count_gpus() -> int:
    """GPUs visible to this process, without initialising CUDA here (children use them)."""
    if shutil.which("nvidia-smi") is None:
        return 0
    try:
        out = subprocess.run(
            ["nvidia-smi", "-L"], capture_output=True, text=True, timeout=30
        ).stdout
    except (OSError, subprocess.TimeoutExpired):
        return 0
    n = sum(1 for line in out.splitlines() if line.startswith("GPU "))
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    return min(n, len(csv(visible))) if visible is not None else n


def csv(text: str) -> list[str]:
    return [s.strip() for s in text.split(",") if s.strip()]


@dataclass(frozen=True)
class RunOptions:
    """The resolved, checked values of `SHARED` (plus the [tool.racegate] settings)."""

    devices: tuple[str, ...]
    threads_per_device: tuple[int, ...]
    strategies: tuple[str, ...]  # the built-in defaults until bound to the workload (bind_roles)
    cache_states: tuple[CacheState, ...]
    schedule: Schedule
    switch_interval: float
    stall: float
    preset: str
    repeat: int
    run_timeout: float | None
    results: Path | None
    workload: str
    production: str
    control: str = str(Strategy.PER_DEVICE)
    workload_source: str = "default"  # where `workload` came from, for error messages
    # Where production/control came from: "--production-strategy", "env ...", "pyproject
    # [tool.racegate]", or "default" (then the workload's roles() decide, in bind_roles).
    production_source: str = "default"
    control_source: str = "default"
    strategies_given: bool = False  # --strategies was given (else defaults from the workload)
    strategy_specs: Mapping[str, StrategySpec] = field(default_factory=dict)  # its own names

    @property
    def on_gpu(self) -> bool:
        return self.devices != ("cpu",)


def _choices(enum: type, text: str, flag: str, what: str) -> tuple[Any, ...]:
    values = csv(text)
    if not values:
        raise ValueError(f"{flag} is empty; choose from: {', '.join(enum)}")
    try:
        return tuple(parse_choice(enum, v, what) for v in values)
    except ValueError as exc:
        raise ValueError(f"{flag}: {exc}") from None


def _positive(value: float | None, flag: str) -> None:
    if value is not None and not value > 0:
        raise ValueError(f"{flag} must be > 0, got {value:g}")


def check_results_path(path: Path, flag: str = "--results") -> None:
    """The records file must be a writable file: made now (empty), before any run is spent.

    Opening it is the only honest check (os.access says yes to root for a read-only mount).
    """
    if path.is_dir():
        raise ValueError(f"{flag} {str(path)!r} is a folder; give a .jsonl file path")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        os.close(files.open_append(path))  # never through a link (racegate.harness.run.files)
    except OSError as exc:
        raise ValueError(f"{flag} {str(path)!r} cannot be written: {exc.strerror}") from None


@dataclass(frozen=True)
class RoleSetting:
    """A production or control strategy name and where it came from ("default": the
    workload's roles() decide)."""

    name: str
    where: str


def project_settings(
    workload_flag: str | None, production_flag: str | None = None, control_flag: str | None = None
) -> tuple[str, str, RoleSetting, RoleSetting]:
    """(workload, where it came from, production, control): flag > env > [tool.racegate] >
    default, each checked for type; an error names where the bad value came from. Role names
    are checked against the workload's strategies once it is loaded (bind_roles)."""
    try:
        workload, where = settings.setting("workload", workload_flag)
        roles = [
            settings.setting("production_strategy", production_flag),
            settings.setting("control_strategy", control_flag),
        ]
    except ValueError as exc:  # unknown [tool.racegate] key, or pyproject.toml is not TOML
        raise ValueError(str(exc)) from None
    where = "--workload" if where == "option" else where
    if not isinstance(workload, str) or ":" not in workload:
        raise ValueError(
            f"workload {workload!r} (from {where}) is not an import path; expected a string "
            "'package.module:factory'"
        )
    out = []
    for key, (value, v_where) in zip(("production", "control"), roles, strict=True):
        v_where = f"--{key}-strategy" if v_where == "option" else v_where
        if not isinstance(value, str) or not value.strip():
            raise ValueError(
                f"{key}_strategy {value!r} (from {v_where}) is not a strategy name; "
                f"choose from the workload's strategies (the built-in's: {', '.join(Strategy)})"
            )
        out.append(RoleSetting(value.strip(), v_where))
    return workload, where, out[0], out[1]


def bind_roles(opts: RunOptions, workload: Workload, *, for_cli: bool) -> RunOptions:
    """The options bound to the loaded workload: its production strategy and positive control
    (the settings' where given, else its roles()), its own strategies' specs, and the strategies
    to run (given, or by default: harness run the production strategy, pytest every suite
    strategy the device trains). A role or a given strategy the workload lacks is a ValueError
    of one line naming the strategies it has."""
    roles = roles_of(workload, opts.workload)
    has = has_strategies(workload)
    own = dict(roles.strategies)
    name = workload.name

    declared = getattr(workload, "roles", None) is not None

    def pick(setting: str, source: str, role: str, what: str) -> str:
        if source != "default":
            chosen, where = setting, source
        elif declared:
            chosen, where = role, f"workload {name!r} roles()"
        else:  # no roles(): the built-in's, checked only where a strategy to run is named
            return role
        if chosen not in has:
            raise ValueError(
                f"{what} {chosen!r} (from {where}) is not a strategy of workload {name!r}; "
                f"it has: {', '.join(has)}"
            )
        return chosen

    production = pick(
        opts.production, opts.production_source, roles.production, "production strategy"
    )
    control = pick(opts.control, opts.control_source, roles.control, "control strategy")
    if production == control:
        raise ValueError(
            f"the production strategy and the positive control are both {production!r}; the "
            f"control is the known-bad one (workload {name!r} has: {', '.join(has)})"
        )
    if opts.strategies_given:
        missing = [s for s in opts.strategies if s not in has]
        if missing:
            raise ValueError(
                f"--strategies: strategy {missing[0]!r} is not a strategy of workload {name!r}; "
                f"it has: {', '.join(has)}"
            )
        strategies = opts.strategies
    elif for_cli:
        if production not in has:
            raise ValueError(
                f"no --strategies, and the production strategy {production!r} (the built-in "
                f"default: workload {name!r} has no roles()) is not a strategy of it; give "
                f"--strategies or --production-strategy; it has: {', '.join(has)}"
            )
        strategies = (production,)
    else:
        wanted = {"in_suite": True} if opts.on_gpu else {"in_suite": True, "trains_on_cpu": True}
        strategies = tuple(
            s for s in has
            if all(getattr(spec_of(s, own), k) == v for k, v in wanted.items())
        )  # fmt: skip
    return replace(
        opts, production=production, control=control, strategies=strategies,
        strategy_specs=own,
    )  # fmt: skip


def roles_to_json(bound: Any) -> dict[str, Any]:
    """The bound roles and strategies of a RunOptions (or the plugin's config, which has the
    same fields), for a process that loads no workload (an xdist worker)."""
    return {
        "production": bound.production,
        "control": bound.control,
        "strategies": list(bound.strategies),
        "specs": {name: asdict(spec) for name, spec in bound.strategy_specs.items()},
    }


def roles_from_json(opts: RunOptions, data: Mapping[str, Any]) -> RunOptions:
    """`opts` bound as another process bound them (roles_to_json)."""
    return replace(
        opts,
        production=data["production"],
        control=data["control"],
        strategies=tuple(data["strategies"]),
        strategy_specs={n: StrategySpec(**spec) for n, spec in data["specs"].items()},
    )


def check_workload(
    workload: str, preset: str, where: str = "--workload", extra: Mapping[str, Any] | None = None
) -> Workload:
    """The workload, imported and checked: it fits the interface and knows `preset` (imports
    torch). Errors name the option they came from."""
    try:
        return load_workload(WorkloadSpec(workload, {**(extra or {}), "preset": preset}))
    except WorkloadError as exc:
        if isinstance(exc.__context__, ValueError) and "preset" in str(exc.__context__):
            # The factory's own check of the preset: name the option, not the factory call.
            raise ValueError(f"--preset {preset!r}: {exc.__context__}") from None
        raise WorkloadError(f"{exc} (from {where})") from None


def _devices(given: str | None, gpus: int) -> tuple[str, ...]:
    """--devices checked (default: every GPU, else cpu)."""
    devices_text = given or (",".join(map(str, range(gpus))) or "cpu")
    try:
        devices = parse_devices(devices_text)
    except ValueError as exc:
        raise ValueError(f"--devices: {exc}") from None
    if not devices:
        raise ValueError("--devices is empty; give 'cpu' or GPU indices like '0,1'")
    on_gpu = devices != ("cpu",)
    if "cpu" in devices and on_gpu:
        raise ValueError(f"--devices {devices_text!r} mixes cpu and GPUs; choose one kind")
    if on_gpu and gpus == 0:
        raise ValueError(f"--devices {devices_text!r} names GPUs but this machine has none")
    return devices


def resolve(values: Mapping[str, Any], *, gpus: int, for_cli: bool, prefix: str = "") -> RunOptions:
    """Check and default the `SHARED` option values (namespace keys `prefix + dest`)."""
    v = {o.dest: values.get(prefix + o.dest) for o in SHARED}
    # [tool.racegate] first: all runs
    workload, workload_source, production, control = project_settings(
        v["workload"], v["production_strategy"], v["control_strategy"]
    )
    devices = _devices(v["devices"], gpus)
    on_gpu = devices != ("cpu",)
    # The race cases run 3 threads a device (`racegate run` keeps what a run is asked: 1,2 on a
    # GPU, 2 on a CPU). On a CPU with 2, a run's steady thread called a compiled function in
    # another's FX trace (~29 ms) in 5 of 31 windows, its calls ~134 ms apart while the other
    # compiled, and the control fired in 12 of 20 race-case runs (60%; a 2-core box, torch
    # 2.12.1); with 3, two steady threads beside each window: 8 of 8. On one H100 (torch 2.11,
    # the main command twice in one call): at 1x3 the control fired 12 of 12 (warm 4 of 4), the
    # production cells asked 7 runs each and the command said SAFE in 265 s; at 1x2 the warm
    # control fired 2 of 6 and its production cell was at run 17 of 30 when it was stopped at
    # 195 s (results/control-every-time, results/one-gpu-command-times).
    race_default = "1,3" if on_gpu else "3"
    cli_default = "1,2" if on_gpu else "2"
    tpd_text = v["threads_per_device"] or (cli_default if for_cli else race_default)
    if not all(t.isdigit() and int(t) > 0 for t in csv(tpd_text)) or not csv(tpd_text):
        raise ValueError(
            f"--threads-per-device {tpd_text!r}: expected positive integers like '1,2'"
        )
    # Checked against the workload's strategies once it is loaded (bind_roles); until then the
    # built-in defaults stand in (pytest --help, which loads no workload).
    if v["strategies"] is not None and not csv(v["strategies"]):
        raise ValueError("--strategies is empty; give the workload's strategy names")
    default_strategies = (
        [production.name] if for_cli else (GPU_STRATEGIES if on_gpu else CPU_STRATEGIES)
    )
    strategies = csv(v["strategies"] or ",".join(default_strategies))
    cache_default = ",".join(CacheState) if on_gpu else str(CacheState.COLD)
    cache_states = _choices(
        CacheState, v["cache_states"] or cache_default, "--cache-states", "cache state"
    )
    (schedule, *more) = _choices(
        Schedule, v["schedule"] or str(Schedule.RECOMPILE), "--schedule", "schedule"
    )
    if more:
        raise ValueError(f"--schedule takes one value, got {v['schedule']!r}")
    switch_interval = SWITCH_INTERVAL_S if v["switch_interval"] is None else v["switch_interval"]
    if not 0 < switch_interval <= SWITCH_INTERVAL_MAX_S:  # False for nan too
        raise ValueError(
            f"--switch-interval must be > 0 and ≤ {SWITCH_INTERVAL_MAX_S:g} (seconds), "
            f"got {switch_interval:g}"
        )
    stall = STALL_S if v["stall"] is None else v["stall"]
    if not math.isfinite(stall) or stall < 0:
        raise ValueError(f"--stall must be ≥ 0 seconds (0: off), got {stall!r}")
    run_timeout = v["run_timeout"]
    if run_timeout is None and for_cli:
        run_timeout = CLI_RUN_TIMEOUT_S
    _positive(run_timeout, "--run-timeout")
    repeat = (3 if on_gpu else 1) if v["repeat"] is None else v["repeat"]
    if repeat < 1:
        raise ValueError(f"--repeat must be ≥ 1, got {repeat}")
    results = Path(v["results"]) if v["results"] else None
    if results is not None:
        check_results_path(results)
    return RunOptions(
        devices=devices,
        threads_per_device=tuple(int(t) for t in csv(tpd_text)),
        strategies=tuple(dict.fromkeys(strategies)),
        cache_states=tuple(dict.fromkeys(cache_states)),
        schedule=schedule,
        switch_interval=switch_interval,
        stall=stall,
        preset=v["preset"] or (GPU_PRESET if on_gpu else CPU_PRESET),
        repeat=repeat,
        run_timeout=run_timeout,
        results=results,
        workload=workload,
        production=production.name,
        control=control.name,
        workload_source=workload_source,
        production_source=production.where,
        control_source=control.where,
        strategies_given=v["strategies"] is not None,
    )
