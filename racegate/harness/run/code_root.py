"""Where racegate's own code lives, for the child processes it starts (path and working folder).

Run from a checkout (`python -m racegate` there, or an editable install), the folder above
harness/ is the checkout: a child gets it first on its PYTHONPATH and runs in it, so it imports
this harness even when started by another environment's python (a candidate venv, a bisect
step). Installed from a wheel, that folder is an environment's site-packages, which also holds
its torch and transformers: put first on another python's path it would shadow that python's own
versions (a candidate venv would import the current env's transformers), and as the working
folder it would be `sys.path[0]` of a `python -m` child. An installed racegate is importable
by every python that sees the environment it is installed in, so its children get neither: no
PYTHONPATH entry, and the folder they were started from (the user's project) as their own.
"""

from __future__ import annotations

import os
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]  # the checkout, or the site-packages holding racegate
INSTALLED = ROOT.name in ("site-packages", "dist-packages")


def own_checkout(rootdir: Path) -> bool:
    """The project under test is racegate's own checkout (its maintainers' session, where its
    tables are theirs to edit): racegate is not installed, and `rootdir` is the checkout."""
    return not INSTALLED and rootdir.resolve() == ROOT


def pythonpath(*first: str, current: str | None = None) -> str:
    """A child's PYTHONPATH: `first`, then the checkout (not an installed racegate's
    site-packages), then `current` (the variable as the parent has it)."""
    own = [] if INSTALLED else [str(ROOT)]
    return os.pathsep.join(filter(None, [*first, *own, current]))


def child_cwd() -> Path:
    """The working folder of a child: the checkout, or where racegate was started (installed)."""
    return Path.cwd() if INSTALLED else ROOT
