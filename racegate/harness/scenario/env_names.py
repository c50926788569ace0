"""Every environment variable racegate reads or sets, each named once with its meaning.

Code imports the names from here; bootstrap.py (stdlib-only, runs before install), the noxfile,
shell scripts, the workflow and tests may spell them literally, and tests/test_env_names.py
fails when a RACEGATE_ name appears anywhere in the repository but not in NAMES.
"""

from __future__ import annotations

# --- settings (racegate.harness.scenario.settings: option > env > pyproject [tool.racegate] >
# default)
PRODUCTION_STRATEGY = "RACEGATE_PRODUCTION_STRATEGY"
CONTROL_STRATEGY = "RACEGATE_CONTROL_STRATEGY"
WORKLOAD = "RACEGATE_WORKLOAD"
BASELINES = "RACEGATE_BASELINES"
# --- set by the runner for its children
RUNNER_PID = "RACEGATE_RUNNER_PID"
RUN_ID = "RACEGATE_RUN_ID"
PRIVATE_ROOT = "RACEGATE_PRIVATE_ROOT"
USER_ENV = "RACEGATE_USER_ENV"
PID_NAMESPACE = "RACEGATE_PID_NAMESPACE"
LAUNCHER = "RACEGATE_LAUNCHER"
TEST_SLOWDOWN = "RACEGATE_TEST_SLOWDOWN"
SLOTS = "RACEGATE_SLOTS"

NAMES: dict[str, str] = {
    PRODUCTION_STRATEGY: "the strategy the verdict is about (setting production_strategy)",
    CONTROL_STRATEGY: "the positive control's strategy (setting control_strategy)",
    WORKLOAD: "module:factory of the workload under test (setting workload)",
    BASELINES: "the folder of throughput floors, from the project root (setting baselines)",
    RUNNER_PID: "set for a child: its runner's pid, so the child dies with its runner",
    RUN_ID: "set for a child: the run's id, the marker lifeline finds a run's processes by",
    PRIVATE_ROOT: "set for a child: the run's private 0700 root (run.private_root)",
    USER_ENV: "set for a child: JSON of the user's values of the variables the root replaced",
    PID_NAMESPACE: '"0": run children without their own PID namespace (the record says so)',
    LAUNCHER: '"fresh": start each run\'s worker as a new interpreter, not forked from a launcher '
    "that imported torch once (default fork: racegate.harness.run.launcher)",
    TEST_SLOWDOWN: "seconds of sleep per step, a deliberate slowdown for A/B and report tests",
    SLOTS: "set for a pytest: SIZE:FOLDER, run slots its parent shares with other sessions "
    "(racegate.harness.run.slots; racegate upgrade's two sides)",
    "RACEGATE_VENV": "bootstrap.py / .ci/run: the virtual environment to make or reuse",
    "RACEGATE_CI_VENV": ".ci/run: the CI venv used when RACEGATE_VENV is unset",
    "RACEGATE_WHEELHOUSE": "nox: a folder of wheels, installs offline from it",
    "RACEGATE_TORCH_INDEX_URL": "nox: the wheel index torch is installed from",
    "RACEGATE_TORCH_DIR": "nox: where the per-version torch installs are kept",
    "RACEGATE_RESULTS_DIR": "nox: where a session's records and report are written",
    "RACEGATE_RACE_WORKERS": "nox/pytest: race cases run at once (default from cores and GPUs)",
    "RACEGATE_CASE_JOBS": "nox: runs of one case at once",
    "RACEGATE_CONTROL_REPEAT": "nox: the positive control's runs per case",
    "RACEGATE_AB_REFERENCE": 'nox ab: the reference side, "<torch>,<transformers>"',
    "RACEGATE_AB_RUNS": "nox ab: runs per side",
    "RACEGATE_AB_SLOWDOWN": "benchmarks/ab_power_gpu.sh: the slowdown given the candidate side",
    "RACEGATE_CELLS": "nightly workflow (repository variable): the matrix cells to run",
    "RACEGATE_MAX_PARALLEL": "nightly workflow (repository variable): cells at once",
    "RACEGATE_LIGHT_RUNNER": "nightly workflow (repository variable): the runner for light jobs",
    "RACEGATE_PYTEST_ARGS": "nightly workflow: extra pytest arguments for the GPU cells",
    "RACEGATE_PRP_DEVICES": "scripts/prp_case.py: the devices the case runs on",
    "RACEGATE_PRP_PRESET": "scripts/prp_case.py: the preset the case runs",
    "RACEGATE_TEST_MARK": "tests: a marker put in a child's environment to find it by",
    "RACEGATE_TEST_ORPHAN_MARKER": "tests: argv[0] of the orphan a fault test leaves behind",
}

# The setting each of racegate.harness.scenario.settings.DEFAULTS reads from the environment.
SETTING: dict[str, str] = {
    "production_strategy": PRODUCTION_STRATEGY,
    "control_strategy": CONTROL_STRATEGY,
    "workload": WORKLOAD,
    "baselines": BASELINES,
}
