"""Project settings from `[tool.racegate]` in pyproject.toml, with one precedence rule.

Precedence, highest first: explicit value (CLI option / pytest option / marker) >
environment variable (RACEGATE_<NAME>) > pyproject `[tool.racegate]` > built-in default.
"""

from __future__ import annotations

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
