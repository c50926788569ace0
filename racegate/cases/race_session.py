"""An active racegate pytest session: its settings resolved once, its run slots shared, the
race suite added to what it collects, and its hooks (this module's, racegate.cases.terminal's,
racegate.cases.progress's) registered.

Imported by racegate.cases.plugin only in a session that asked for racegate (plugin.asked_for):
any other session of a project never loads it, nor anything it imports.
"""

from __future__ import annotations

import dataclasses
import itertools
import os
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest

from racegate.cases import progress, terminal
from racegate.cases.plan import planned_runs
from racegate.cases.session import RacegateConfig, racegate_key
from racegate.cases.suite import CASES, NAMES_RACE, reaches_cases
from racegate.harness.doors import options
from racegate.harness.judge import baselines, race_expectations
from racegate.harness.judge.verdict import Calibration
from racegate.harness.run import state
from racegate.harness.run.record import RunRecord
from racegate.harness.run.runner import SharedPrimes
from racegate.harness.run.slots import SlotPool
from racegate.harness.scenario import env_names, versions

PLUGIN_NAME = "racegate-session"
# The run folder this process made under .racegate/runs/ (not a worker's, not --results).
_own_run_key = pytest.StashKey[Path]()
slots_key = pytest.StashKey[SlotPool]()
# The positive control's priming runs in this process (control_primes).
_control_primes_key = pytest.StashKey[SharedPrimes]()
# pytest's spelling of the path options (racegate.harness.doors.options.PATH_FLAGS).
PATH_FLAGS = tuple(options.PYTEST_FLAGS[f] for f in options.PATH_FLAGS if f in options.PYTEST_FLAGS)


def _usage(exc: Exception) -> pytest.UsageError:
    """A bad value's one line, its flags in pytest's spelling."""
    return pytest.UsageError(f"racegate: {options.pytest_words(str(exc))}")


def _xdist_workers(config: pytest.Config) -> int:
    """How many pytest-xdist workers run this session (1 without xdist)."""
    worker = getattr(config, "workerinput", None)
    if worker is not None:
        return int(worker["workercount"])
    n = config.getoption("numprocesses", None) if config.pluginmanager.has_plugin("xdist") else None
    return n if isinstance(n, int) and n > 1 else 1


def _assign_worker_gpus(config: pytest.Config, gpus: int) -> int:
    """Under pytest-xdist each worker gets its own slice of GPUs through CUDA_VISIBLE_DEVICES,
    unless --racegate-share-gpus lets them all use every GPU."""
    worker = getattr(config, "workerinput", None)
    if worker is None or gpus == 0 or config.getoption("racegate_share_gpus"):
        return gpus
    n_workers = int(worker["workercount"])
    idx = int(worker["workerid"].removeprefix("gw"))
    per = max(1, gpus // n_workers)
    visible = options.csv(os.environ.get("CUDA_VISIBLE_DEVICES", ",".join(map(str, range(gpus)))))
    mine = visible[(idx * per) % len(visible) :][:per]
    os.environ["CUDA_VISIBLE_DEVICES"] = ",".join(mine)
    return len(mine)


def _is_worker(config: pytest.Config) -> bool:
    return hasattr(config, "workerinput")


def _records_path(config: pytest.Config, given: Path | None) -> Path | None:
    """--racegate-results, else the path the xdist controller chose, else a new run in the
    state folder; None where no case will run (--collect-only: nothing is made)."""
    if given is not None:
        return given
    if _is_worker(config):
        return Path(p) if (p := config.workerinput["racegate_records"]) else None
    if config.option.collectonly:
        return None
    path = state.new_run(config.rootpath)
    config.stash[_own_run_key] = path  # removed again at exit if no record lands in it
    return path


def _resolve(config: pytest.Config) -> RacegateConfig:
    gpus = _assign_worker_gpus(config, options.count_gpus())
    try:
        opts = options.resolve(vars(config.option), gpus=gpus, for_cli=False, prefix="racegate_")
        if not _is_worker(config) and not config.option.help:
            # Imports the workload (and torch) once, in the controller: a workload that does
            # not import, fit the interface or know the preset fails here, not in every case.
            workload = options.check_workload(opts.workload, opts.preset, opts.workload_source)
            # Its production strategy, positive control and strategies: a role it lacks is a
            # usage error here, naming the strategies it has.
            opts = options.bind_roles(opts, workload, for_cli=False)
        elif _is_worker(config):  # the controller bound them, having loaded the workload
            opts = options.roles_from_json(opts, config.workerinput["racegate_roles"])
        expectations = race_expectations.load()  # bad table: usage
        floors = baselines.project_folder()  # a named folder that is missing: usage
        terminal.check_calibration(config)
        results = _records_path(config, opts.results)
    except (ValueError, tomllib.TOMLDecodeError) as exc:
        raise _usage(exc) from None
    except OSError as exc:  # the state folder cannot be made (a read-only checkout)
        raise _usage(
            ValueError(
                f"cannot make a run folder under {config.rootpath / state.STATE_DIR}: "
                f"{exc.strerror}; give --results FILE"
            )
        ) from None
    run_options = {f.name: getattr(opts, f.name) for f in dataclasses.fields(opts)}
    return RacegateConfig(
        **(run_options | {"results": results}),
        gpus=gpus,
        expectations=expectations,
        versions=versions.software(),  # imports nothing: metadata for what is not loaded
        # runs from here overlap other workers' runs, or another session's in a parent's pool
        overlapping=_xdist_workers(config) > 1 or env_names.SLOTS in os.environ,
        case_jobs=config.option.racegate_case_jobs,
        baselines=floors,
    )


def _add_race_suite(config: pytest.Config) -> None:
    """`pytest -k race` (or `-m race`) in any project collects the race suite: where its
    collection does not reach racegate/cases/ already (racegate's own checkout does), the folder
    is added to what pytest collects. Without such a selection nothing is added: a project's
    plain `pytest` runs no race case; nor where the command line names what to collect
    (`pytest -m race tests/test_mine.py` collects that file only, as pytest always does)."""
    selection = f"{config.option.keyword or ''} {config.option.markexpr or ''}"
    if not NAMES_RACE.search(selection) or config.args_source is pytest.Config.ArgsSource.ARGS:
        return
    for arg in config.args:
        if reaches_cases(Path(config.invocation_params.dir, arg.split("::")[0])):
            return
    config.args.append(str(CASES))


def _rootdir_from_an_option(config: pytest.Config) -> str | None:
    """The path option (`--results PATH`, two words) whose existing PATH pytest took for a test
    path, making its folder the rootdir (before any plugin's options are known); None if none."""
    args = [str(a) for a in config.invocation_params.args]
    here, root = config.invocation_params.dir, config.rootpath
    for flag, value in itertools.pairwise(args):
        path = (here / value).resolve()
        if flag not in PATH_FLAGS or not path.exists():
            continue
        folder = path if path.is_dir() else path.parent
        # The rootdir came from the value (it holds it), and not from a config file that the
        # invocation folder reaches as well (a results file inside the project is harmless).
        if (root == folder or root in folder.parents) and (
            root != here and (config.inipath is None or root not in here.parents)
        ):
            return f"{flag} {value}"
    return None


def configure(config: pytest.Config) -> None:
    """racegate.cases.plugin's pytest_configure, in a session that asked for racegate."""
    if (given := _rootdir_from_an_option(config)) is not None and not _is_worker(config):
        flag, value = given.split(" ", 1)
        raise pytest.UsageError(
            f"racegate: {given}: pytest took {value} for a test path and its folder for the "
            f"rootdir before racegate's options were known; write {flag}={value}"
        )
    config.stash[racegate_key] = _resolve(config)
    _share_slots(config)
    _add_race_suite(config)
    # This module's hooks, then the verdict block and its calibration, once the settings they
    # read are stashed.
    config.pluginmanager.register(sys.modules[__name__], PLUGIN_NAME)
    config.pluginmanager.register(terminal, "racegate.cases.terminal")
    rc = config.stash[racegate_key]
    if not _is_worker(config) and rc.results is not None and config.get_verbosity() >= 0:
        says = progress.ProgressPlugin(
            config,
            rc.results,
            lambda: terminal.session_records(config),
            lambda record, records: planned_runs(record, rc, calibration(config), records),
        )
        config.pluginmanager.register(says, progress.PLUGIN_NAME)


def _share_slots(config: pytest.Config) -> None:
    """--case-jobs auto: the run slots every worker's race cases share. The pool a parent
    handed over in env_names.SLOTS (shared with its other sessions: racegate upgrade's two
    sides), else under pytest-xdist one slot per worker (racegate.harness.doors.sizing sized the
    workers to the host), made by the controller. A worker takes the controller's."""
    if config.stash[racegate_key].case_jobs != 0:
        return
    try:
        if _is_worker(config):
            if (given := config.workerinput.get("racegate_slots")) is not None:
                shared = bool(config.workerinput.get("racegate_slots_from_parent"))
                where = "the pytest-xdist controller's run slots"
                config.stash[slots_key] = SlotPool.from_handoff(given, where, from_parent=shared)
        elif (given := os.environ.get(env_names.SLOTS)) is not None:
            where = f"environment variable {env_names.SLOTS}"
            config.stash[slots_key] = SlotPool.from_handoff(given, where, from_parent=True)
        elif _xdist_workers(config) > 1:
            config.stash[slots_key] = SlotPool.make(_xdist_workers(config))
    except ValueError as exc:
        raise _usage(exc) from None


def slot_pool(config: pytest.Config) -> SlotPool | None:
    """The session's shared run slots; None where a case's runs at once are fixed (--case-jobs
    N, or no pytest-xdist and no parent's pool: one at a time)."""
    return config.stash.get(slots_key, None)


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node: Any) -> None:
    """pytest-xdist: every worker appends to the controller's records file and shares its
    run slots."""
    rc = node.config.stash[racegate_key]
    node.workerinput["racegate_records"] = "" if rc.results is None else str(rc.results)
    node.workerinput["racegate_roles"] = options.roles_to_json(rc)
    if (pool := slot_pool(node.config)) is not None:
        node.workerinput["racegate_slots"] = pool.handoff()
        node.workerinput["racegate_slots_from_parent"] = pool.from_parent


def control_primes(config: pytest.Config) -> SharedPrimes:
    """This process's priming runs of the positive control's warm/deleted scenarios, one per
    scenario, kept until the session ends: its case and the production case that adds control
    runs in the same cell (racegate.cases.test_race) copy one cache. One H200 at 9621b56: the
    warm production case primed the control again (19 s) before its 2 added control runs, on
    the chain the session's wall time hangs on."""
    if (primes := config.stash.get(_control_primes_key, None)) is None:
        primes = config.stash[_control_primes_key] = SharedPrimes()
    return primes


def pytest_unconfigure(config: pytest.Config) -> None:
    if (primes := config.stash.get(_control_primes_key, None)) is not None:
        primes.close()
    own = config.stash.get(_own_run_key, None)
    if own is not None:
        state.discard_if_empty(own)
    pool = slot_pool(config)
    if pool is not None and not _is_worker(config) and not pool.from_parent:
        pool.remove()  # a parent's pool is the parent's to remove


def pytest_report_header(config: pytest.Config) -> list[str]:
    rc = config.stash[racegate_key]
    return [
        f"racegate: torch {rc.versions['torch']}, transformers {rc.versions['transformers']}, "
        f"{rc.gpus} GPU(s), devices {','.join(rc.devices)}, preset {rc.preset}, "
        f"production strategy {rc.production}, positive control {rc.control}, "
        f"schedule {rc.schedule}, switch interval {rc.switch_interval:g} s, workload {rc.workload}"
    ]


def _selected_by_its_own_names(config: pytest.Config, items: list[pytest.Item]) -> None:
    """`-k race` matches "racegate", the package's name, in every node chain of racegate's
    suite (its throughput cases too): a case of the suite stays only where the -k expression
    selects it by its own names (module, case, parameters, markers), as a project's test is.
    pytest has no public API for its -k grammar: without that module nothing changes."""
    keyword = (config.option.keyword or "").strip()
    if not keyword:
        return
    try:
        from _pytest.mark.expression import Expression

        expr = Expression.compile(keyword)
    except (ImportError, AttributeError, SyntaxError):
        return
    kept, dropped = [], []
    for item in items:
        chain = item.listchain()
        names = {n.name for n in chain if not isinstance(n, pytest.Session | pytest.Directory)}
        names |= {*item.listextrakeywords(), *(m.name for m in item.iter_markers())}

        def matches(sub: str, /, **kwargs: object) -> bool:
            return not kwargs and any(sub.lower() in name.lower() for name in names)  # noqa: B023

        ours = item.path.is_relative_to(CASES)
        (dropped if ours and not expr.evaluate(matches) else kept).append(item)
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = kept


@pytest.hookimpl(trylast=True)  # after pytest's own -k and -m
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    _selected_by_its_own_names(config, items)
    rc = config.stash[racegate_key]
    gpus, chosen = rc.gpus, 0 if rc.devices == ("cpu",) else len(rc.devices)
    for item in items:
        if item.get_closest_marker("multi_gpu") and gpus < 2:
            reason = f"needs ≥ 2 CUDA GPUs; this machine has {gpus}"
        elif item.get_closest_marker("gpu") and gpus < 1:
            reason = "needs a CUDA GPU; this machine has none"
        elif item.get_closest_marker("multi_gpu") and chosen < 2:
            reason = f"needs ≥ 2 CUDA GPUs; --racegate-devices chose {chosen}"
        elif item.get_closest_marker("gpu") and chosen < 1:
            reason = "needs a CUDA GPU; --racegate-devices chose cpu"
        elif item.get_closest_marker("throughput") and rc.overlapping:
            reason = "pytest-xdist runs other cases on this host at the same time (or another "
            reason += "session does, in a parent's run slots), so timings are invalid (a "
            reason += "host-bound step slows with them); run throughput cases without -n, alone"
        else:
            continue
        item.add_marker(pytest.mark.skip(reason=reason))


def calibration(config: pytest.Config) -> Calibration:
    """The session's calibration: its positive control, the control's runs, the power cap."""
    return config.stash[terminal.calibration_key]


def session_records(config: pytest.Config) -> list[RunRecord]:
    """The records this session appended to its results file so far ([] without one)."""
    return terminal.session_records(config)
