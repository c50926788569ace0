"""The harness's test tiers: a test is unit unless marked `process` or `fault`, and a unit test
that starts a child process or runs past UNIT_TIME_LIMIT_S fails, naming the marker it needs.

unit (the default, `python3 bootstrap.py test --fast`): no child process, no real compile race;
process (`-m process`): starts child processes (isolated runs, the CLI, nox) or compiles for real;
fault (`-m fault`): injects real faults into real runs (crashes, hangs, orphans, stalls).
A module marks its tier with `pytestmark`, or names its fixtures that start child processes in
`PROCESS_FIXTURES` (every test using one is then process); the guard below makes an unmarked test
that spawns fail in every run, the whole suite's too, so a slow test cannot slip into the fast
tier unseen.
"""

from __future__ import annotations

import multiprocessing.util
import os
import signal
import subprocess
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import pytest

from racegate.harness.run import private_root

# racegate's own tests run in a private root, as a session that asks for racegate does (the
# plugin stays inert in one that does not, as the unit tier's): torch, which tests here import,
# makes its caches there and not under the user's TMPDIR and ~; their children inherit it.
private_root.enter()

TIER_MARKERS = ("process", "fault")
# The most one unit test may take (pytest-timeout). The slowest unit test took 15-20 s on the
# 2-core box (tests/test_model_train.py, 20 steps of training); the limit leaves room for a box
# loaded by the other tiers running beside it, and stops a test of minutes.
UNIT_TIME_LIMIT_S = 60.0
TESTS_DIR = Path(__file__).resolve().parent
_spawned = pytest.StashKey[list[str]]()


def pytest_configure(config: pytest.Config) -> None:
    """Give the suite's children their Ctrl-C back where this process was started without one.

    The fault and process tests stop real runners with a real SIGINT and expect Python's
    KeyboardInterrupt there. A process started with SIGINT ignored (a background job of a
    non-interactive shell, `cmd &` in a script; nohup) hands SIG_IGN down through every fork
    and exec, and Python keeps an inherited SIG_IGN, so those runners ignored the test's SIGINT
    (test_children_die_with_the_runner[SIGINT-*] failed in every run of the suite started so,
    and passed under `timeout`, which resets it). A Python handler is reset to the default at a
    child's exec, so each child python installs its KeyboardInterrupt again, as from a shell.
    """
    if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


def is_unit(item: pytest.Item) -> bool:
    return not any(item.get_closest_marker(m) for m in TIER_MARKERS)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if not item.path.is_relative_to(TESTS_DIR):
            continue
        spawning = getattr(getattr(item, "module", None), "PROCESS_FIXTURES", ())
        if is_unit(item) and set(spawning) & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.process)
        if is_unit(item) and item.get_closest_marker("timeout") is None:
            item.add_marker(pytest.mark.timeout(UNIT_TIME_LIMIT_S))


class ChildProcessInUnitTest(BaseException):
    """Raised where a unit test starts a child process (BaseException: no `except Exception`
    in the code under test hides it; the report fails the test even if something does)."""


# Children no test asks for: matplotlib's first import in a process asks fontconfig for the fonts.
INCIDENTAL_CHILDREN = frozenset({"fc-list"})


def _refuse(item: pytest.Item, what: str, original: Callable[..., Any]) -> Callable[..., Any]:
    def refuse(*args: object, **kwargs: object) -> Any:
        argv = args[1] if what.endswith("_execute_child") and len(args) > 1 else None
        program = Path(str(argv[0])).name if isinstance(argv, list | tuple) and argv else None
        if program in INCIDENTAL_CHILDREN:
            return original(*args, **kwargs)
        item.stash.setdefault(_spawned, []).append(what)
        raise ChildProcessInUnitTest(
            f"{item.nodeid} is a unit test but calls {what}: a test that starts child "
            "processes (a real compile does: inductor runs the C++ compiler) belongs to the "
            "process tier (pytestmark = pytest.mark.process)"
        )

    return refuse


# Every way this Python starts a child: subprocess (and asyncio, os.popen through it),
# multiprocessing's spawn and forkserver, fork, posix_spawn, system.
_SPAWNERS: list[tuple[Any, str]] = [
    (subprocess.Popen, "_execute_child"),
    (multiprocessing.util, "spawnv_passfds"),
    *((os, name) for name in ("fork", "forkpty", "posix_spawn", "posix_spawnp", "system")),
]


@contextmanager
def _no_children(item: pytest.Item) -> Iterator[None]:
    with ExitStack() as stack:
        for owner, name in _SPAWNERS:
            if hasattr(owner, name):
                original = getattr(owner, name)
                what = f"{getattr(owner, '__name__', owner)}.{name}"
                setattr(owner, name, _refuse(item, what, original))
                stack.callback(setattr, owner, name, original)
        yield


@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item: pytest.Item) -> Iterator[None]:
    with _no_children(item) if is_unit(item) else ExitStack():
        return (yield)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Iterator[None]:
    with _no_children(item) if is_unit(item) else ExitStack():
        return (yield)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item: pytest.Item) -> Iterator[None]:
    with _no_children(item) if is_unit(item) else ExitStack():
        return (yield)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    report = yield
    spawned = item.stash.get(_spawned, [])
    if spawned:
        del item.stash[_spawned]  # told once, in the phase that spawned
    if spawned and report.passed:  # the code under test caught the refusal: still a failure
        report.outcome = "failed"
        report.longrepr = f"{item.nodeid} is a unit test but called {', '.join(spawned)}"
    return report
