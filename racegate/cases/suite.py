"""Where racegate's race suite lies, and whether a selection or a path reaches it.

Defined once for the plugin (which decides whether a session asks for racegate) and the active
session's hooks (which add the suite to what a project collects).
"""

from __future__ import annotations

import re
from pathlib import Path

from racegate.harness.run import code_root

# The race suite racegate ships (race, probe and throughput cases): this folder.
CASES = Path(__file__).resolve().parent
NAMES_RACE = re.compile(r"(?<!not )\brace\b")  # `-k race`, `-m "race and gpu"`; not `not race`


def reaches_cases(path: Path) -> bool:
    """A path to collect that is racegate's race suite or inside it, or (in racegate's own
    checkout, where pytest collects racegate/ as any folder) holds it. An installed suite sits
    in a venv's site-packages, which pytest never collects from a folder above it."""
    path = path.resolve()
    return path.is_relative_to(CASES) or (not code_root.INSTALLED and CASES.is_relative_to(path))
