"""Project settings from `[tool.racegate]` in pyproject.toml, with one precedence rule.

Precedence, highest first: explicit value (CLI option / pytest option / marker) >
environment variable (RACEGATE_<NAME>) > pyproject `[tool.racegate]` > built-in default.
"""

from __future__ import annotations

import math
import os
import tomllib
from pathlib import Path
from typing import Any

from racegate.harness.scenario import env_names
from racegate.harness.scenario.vocab import Strategy, parse_choice
from racegate.harness.scenario.workload_api import DEFAULT_WORKLOAD

# production_strategy / control_strategy: set here they override the workload's own roles()
# (racegate.harness.scenario.workload_api.WorkloadRoles); their defaults are the built-in drafter's.
DEFAULTS: dict[str, Any] = {
    "production_strategy": str(Strategy.WARMUP_LOCKED),
    "control_strategy": str(Strategy.PER_DEVICE),
    "workload": DEFAULT_WORKLOAD,
    # The folder of throughput floors, relative to the project root
    # (racegate.harness.judge.baselines).
    "baselines": "baselines",
}


def find_pyproject(start: Path | None = None) -> Path | None:
    here = (start or Path.cwd()).resolve()
    for folder in (here, *here.parents):
        candidate = folder / "pyproject.toml"
        if candidate.is_file():
            return candidate
    return None


def load_table(pyproject: Path | None) -> dict[str, Any]:
    if pyproject is None:
        return {}
    try:
        with pyproject.open("rb") as fh:
            data = tomllib.load(fh)
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise ValueError(f"{pyproject}: cannot read [tool.racegate]: {exc}") from None
    table = data.get("tool", {}).get("racegate", {})
    if not isinstance(table, dict):
        raise ValueError(f"{pyproject}: [tool.racegate] is {table!r}; expected a table")
    unknown = set(table) - set(DEFAULTS)
    if unknown:
        raise ValueError(
            f"unknown [tool.racegate] key(s) {sorted(unknown)} in {pyproject}; "
            f"known: {sorted(DEFAULTS)}"
        )
    for name, value in table.items():
        if not isinstance(value, str):
            raise ValueError(
                f"{pyproject}: [tool.racegate] {name} is {value!r}; expected a string like "
                f"{DEFAULTS[name]!r}"
            )
    return table


def setting(name: str, explicit: Any = None, *, pyproject: Path | None = None) -> tuple[Any, str]:
    """(value, where it came from) for setting `name` under the precedence rule above."""
    if explicit is not None:
        return explicit, "option"
    env_name = env_names.SETTING[name]
    if os.environ.get(env_name):
        return os.environ[env_name], f"env {env_name}"
    table = load_table(pyproject if pyproject is not None else find_pyproject())
    if name in table:
        return table[name], "pyproject [tool.racegate]"
    return DEFAULTS[name], "default"


def production_strategy(explicit: str | None = None) -> Strategy:
    value, where = setting("production_strategy", explicit)
    try:
        return parse_choice(Strategy, str(value), "production strategy")
    except ValueError as exc:
        raise ValueError(f"{exc} (from {where})") from None


# The values a user may give the variables racegate's runs read (env_names); "gpu" in
# RACEGATE_PID_NAMESPACE is the runner's own, for runs on a GPU, and never the user's.
PID_NAMESPACE_VALUES = {"": "unset: each run's processes in a PID namespace of their own",
                        "0": "no PID namespace (the records say so)"}  # fmt: skip
# RACEGATE_LAUNCHER: how each run's worker starts (racegate.harness.run.launcher).
LAUNCHER_VALUES = {
    "fork": "forked from a launcher that imported torch once (the default)",
    "fresh": "a new interpreter for every run (seconds of imports each)",
}
SHOWN_CHARS = 60  # of a bad value echoed in its error line


def shown(value: str) -> str:
    """`value` as an error line echoes it: repr'd, cut to SHOWN_CHARS (a 100,000-digit value
    is no 100 KB line)."""
    if len(value) <= SHOWN_CHARS:
        return repr(value)
    return f"{value[:SHOWN_CHARS]!r}… ({len(value):,} characters)"


def check_environment(env: dict[str, str] | os._Environ[str] | None = None) -> None:
    """The environment variables racegate's runs read, checked before any run: ValueError,
    one line naming the variable, its value and the allowed ones."""
    env = os.environ if env is None else env
    for name, values in ((env_names.PID_NAMESPACE, PID_NAMESPACE_VALUES),
                         (env_names.LAUNCHER, LAUNCHER_VALUES)):  # fmt: skip
        value = env.get(name)
        if value is not None and value not in values:
            allowed = "; ".join(f"{v!r}: {why}" for v, why in values.items())
            raise ValueError(
                f"{name}={shown(value)} (from the environment) is not a value racegate "
                f"takes; allowed: {allowed}"
            )
    slowdown = env.get(env_names.TEST_SLOWDOWN)
    if slowdown is not None and slowdown.strip():
        try:
            ok = math.isfinite(float(slowdown)) and float(slowdown) >= 0
        except ValueError:
            ok = False
        if not ok:
            raise ValueError(
                f"{env_names.TEST_SLOWDOWN}={shown(slowdown)} (from the environment) is not a "
                "number ≥ 0 (e.g. 0.05); unset it for real runs"
            )
