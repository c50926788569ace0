"""The exit of a gating race selection (`racegate race`, `bootstrap.py race`): pytest's, unless
it decided nothing.

pytest exits with the gate's decision only where race cases ran; a session that selected none
(`--collect-only`, a `-m`/`-k` that leaves none, the gate turned off) exits 0 with no decision.
A gating command must not: each front door asks pytest for --decision-file and exits UNDECIDED
where pytest exited 0 without a SAFE decision there. Standard library only: bootstrap.py imports
it before any environment exists.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path

# pytest's spelling of --decision-file (racegate.harness.doors.options.PYTEST_FLAGS; the front
# doors hand pytest the user's arguments in that spelling: options.to_pytest).
FLAG = "--racegate-decision-file"
# pytest options that only print (its version, help, markers, fixtures) and run nothing to
# gate: the command's exit stays pytest's.
PRINTS_ONLY = ("--version", "-V", "--help", "-h", "--markers", "--fixtures")
# racegate.harness.judge.gate's exit code of UNDECIDED (tests/test_gate_decision.py checks they
# agree).
EXIT_UNDECIDED = 7
# The exits of a decision other than SAFE (UNSAFE's, UNDECIDED's): where pytest exited 0 but
# wrote one of these, the command exits with it.
DECIDED_NOT_SAFE = (1, EXIT_UNDECIDED)


def given_path(args: Sequence[str]) -> Path | None:
    """The --racegate-decision-file the user gave themselves (in pytest's arguments), if any:
    the last one, as pytest takes it."""
    found = None
    for i, arg in enumerate(args):
        if arg.startswith(f"{FLAG}="):
            found = Path(arg.partition("=")[2])
        elif arg == FLAG and i + 1 < len(args):
            found = Path(args[i + 1])
    return found


@contextlib.contextmanager
def deciding(args: Sequence[str], cwd: Path) -> Iterator[tuple[list[str], Path]]:
    """(the option to add to pytest's arguments, the decision file to read after) for one
    gating run of pytest in `cwd`: the --decision-file the user gave (nothing added; taken from
    `cwd` where relative, and removed first, as pytest removes it, so that no older file can
    answer for this run), else one in a new 0700 folder of a random name (tempfile.mkdtemp),
    removed after."""
    given = given_path(args)
    if given is not None:
        given = cwd / given  # an absolute path stays itself
        given.unlink(missing_ok=True)
        yield [], given
        return
    folder = Path(tempfile.mkdtemp(prefix="racegate-race-"))
    try:
        yield [f"{FLAG}={folder / 'decision.json'}"], folder / "decision.json"
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def gated(
    pytest_exit: int, decision_file: Path, args: Sequence[str] = ()
) -> tuple[int, str | None]:
    """(the command's exit, a line saying why where it is not pytest's): where pytest exited 0,
    the decision it wrote must be SAFE (its exit_code 0, racegate.harness.judge.decision_file); one
    it wrote otherwise gives its own exit, none UNDECIDED's; pytest's own exit where `args` (the
    user's) only ask it to print (PRINTS_ONLY)."""
    if pytest_exit != 0 or any(a in PRINTS_ONLY for a in args):
        return pytest_exit, None
    try:
        code = json.loads(decision_file.read_text())["exit_code"]
    except FileNotFoundError:  # pytest writes it once a race case ran
        code, why = None, "no race case ran"
    except (OSError, ValueError, KeyError, TypeError) as exc:
        code, why = None, f"the decision file {decision_file} is unreadable ({exc!r:.80})"
    if code == 0:
        return 0, None
    if code in DECIDED_NOT_SAFE:  # pytest's own exit (--no-racegate-gate): the decision's
        return code, f"pytest exited 0, but the decision it wrote exits {code}"
    if code is not None:
        why = f"the decision file {decision_file} says exit {code!r}, not a decision's"
    return EXIT_UNDECIDED, f"UNDECIDED: {why}, so nothing is decided (exit {EXIT_UNDECIDED})"
