"""racegate's pytest plugin, its entry point: options, markers, and whether a session asks for it.

Loaded by the `pytest11` entry point where racegate is installed (in racegate's own checkout,
by its conftest.py where it is not), and inert until asked: a session acts only where it selects
race cases (`-k`/`-m` naming race, or paths into racegate/cases/) or passes one of racegate's
options (all `--racegate-…`, racegate/harness/doors/options.py's table). Any other session of
the project gets racegate's options and markers listed and nothing else: no torch, no workload,
no environment variable, no file, no line printed. An active session enters the private root
before any conftest can import torch, adds the race suite to what the project collects, and
checks every value (flags, env, [tool.racegate], the workload and its preset) in
`pytest_configure`, so a bad one is a `pytest.UsageError` naming it before anything is
collected; its hooks (racegate.cases.race_session: GPU discovery and skips, xdist hand-over;
racegate.cases.terminal: the verdict) are registered only then, as
pytest-xdist registers its session only in distribution mode. Records go to
--racegate-results or to a new private run folder under .racegate/runs/; plugin state lives in
`config.stash`.
"""

from __future__ import annotations

import glob
from pathlib import Path
from typing import Any

import pytest

from racegate.cases.session import RacegateConfig, racegate_key
from racegate.cases.suite import NAMES_RACE, reaches_cases
from racegate.harness.doors import options

MARKERS = {
    "race": "race(): a cross-thread tracing race case (what `-m race` and `-k race` select)",
    "gpu": "gpu(): needs at least one CUDA GPU; skipped with a reason otherwise",
    "multi_gpu": "multi_gpu(): needs at least two CUDA GPUs; skipped with a reason otherwise",
    "throughput": "throughput(): gates tokens/s against the project's baselines/<hardware>.json",
    "slow": "slow(): takes minutes; deselect with -m 'not slow'",
    "production": "production(): a race case of the production strategy (its runs follow the "
    "control's measured rate, as the control's runs land)",
}
# Whether this session acts (asked_for): decided before the initial conftests load, so that the
# private root is entered before any of them imports torch.
active_key = pytest.StashKey[bool]()
DEST = "racegate_"  # every option's namespace key: DEST + the table's dest


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("racegate", "racegate: cross-thread compile race gate")
    for opt in (*options.SHARED, *options.PYTEST_ONLY):  # SHARED: the table `racegate run` reads
        kwargs = opt.argparse_kwargs() | {"help": options.pytest_words(opt.help)}
        group.addoption(options.pytest_flag(opt.flag), dest=DEST + opt.dest, **kwargs)


def _given_option(namespace: Any, args: list[str]) -> str | None:
    """The first racegate option the session was given: named in `args` (even at its default),
    or a value that differs from the default (the command line, PYTEST_ADDOPTS or addopts
    alike); None if none."""
    for arg in args:
        if arg.startswith(("--racegate-", "--no-racegate-")):
            return arg.partition("=")[0]
    for opt in (*options.SHARED, *options.PYTEST_ONLY):
        default = False if opt.switch else opt.default
        if isinstance(default, str) and opt.type is not None:
            default = opt.type(default)  # as argparse types a default given as text
        if getattr(namespace, DEST + opt.dest, default) != default:
            return options.pytest_flag(opt.flag)
    return None


def _collected_paths(config: pytest.Config, args: list[str]) -> list[Path]:
    """The paths this session collects, as pytest will decide them: the command line's, else
    testpaths (from the rootdir), else the invocation folder."""
    here = config.invocation_params.dir
    given = [a.split("::")[0] for a in args if not a.startswith("-")]
    if given:
        return [here / a for a in given]
    if here == config.rootpath:
        found = [Path(p) for t in config.getini("testpaths") for p in glob.glob(str(here / t))]
        if found:
            return found
    return [here]


def asked_for(
    config: pytest.Config, args: list[str], namespace: Any, given: list[str] | None = None
) -> bool:
    """Racegate acts in this session: it selects race cases (`-k`/`-m` naming race, paths
    into racegate/cases/ among `args`), or it was given a racegate option (in `given`, the
    command line as pytest read it, or by value), or (an xdist worker) its controller acts."""
    workerinput = getattr(config, "workerinput", None)
    if workerinput is not None and "racegate_records" in workerinput:
        return True
    selection = f"{getattr(namespace, 'keyword', '') or ''} {getattr(namespace, 'markexpr', '')}"
    if NAMES_RACE.search(selection) or _given_option(namespace, given or []) is not None:
        return True
    return any(reaches_cases(p) for p in _collected_paths(config, args))


@pytest.hookimpl(tryfirst=True)
def pytest_load_initial_conftests(
    early_config: pytest.Config, parser: pytest.Parser, args: list[str]
) -> None:
    """An active session enters its private root before the project's conftests load (one may
    import torch, which makes its caches under TMPDIR and ~ on import)."""
    namespace = early_config.known_args_namespace
    positional = [str(a) for a in getattr(namespace, "file_or_dir", None) or []]
    if asked_for(early_config, positional, namespace, [str(a) for a in args]):
        early_config.stash[active_key] = True
        _enter_private_root()


def _enter_private_root() -> None:
    from racegate.harness.run import private_root  # imports no torch

    try:
        private_root.enter()
    except ValueError as exc:
        raise pytest.UsageError(f"racegate: {exc}") from None


def pytest_configure(config: pytest.Config) -> None:
    for text in MARKERS.values():
        config.addinivalue_line("markers", text)
    # Decided before the initial conftests where this plugin came early enough (the pytest11
    # entry point, -p); where a conftest loaded it (racegate's own checkout), now.
    if active_key not in config.stash:
        given = [str(a) for a in config.invocation_params.args]
        config.stash[active_key] = asked_for(config, config.args, config.option, given)
        if config.stash[active_key]:
            _enter_private_root()
    if config.stash[active_key]:
        from racegate.cases import race_session  # only where racegate is asked for

        race_session.configure(config)


@pytest.fixture(scope="session")
def racegate_config(pytestconfig: pytest.Config) -> RacegateConfig:
    """The session's resolved racegate settings (a race case's)."""
    if racegate_key not in pytestconfig.stash:
        pytest.fail("racegate is not active in this session: select race cases (-k race)")
    return pytestconfig.stash[racegate_key]
