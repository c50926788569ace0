"""The names a workload author imports, `from racegate import …`: every one the docs and
examples import resolves, to its one definition, and `import racegate` imports no torch."""

from __future__ import annotations

import importlib
import re
import subprocess
import sys
from pathlib import Path

import pytest

import racegate

ROOT = Path(__file__).resolve().parent.parent
# `from racegate import A, B` or `from racegate import (A,\n B,\n)`, in code blocks and sources.
IMPORT = re.compile(r"^\s*from racegate import (\([^)]*\)|[^\n(]+)", re.MULTILINE)
WRITTEN = [
    *sorted((ROOT / "docs").glob("*.md")),
    ROOT / "README.md",
    *sorted((ROOT / "examples").glob("*.py")),
]


def imported_names(text: str) -> set[str]:
    """The names `text` imports from racegate itself."""
    names = set()
    for match in IMPORT.finditer(text):
        for part in match.group(1).strip("()").replace("\n", ",").split(","):
            name = part.split("#")[0].strip().split(" as ")[0].strip()
            if name:
                names.add(name)
    return names


def test_every_name_the_docs_and_examples_import_resolves() -> None:
    seen: dict[str, set[str]] = {}
    for path in WRITTEN:
        for name in imported_names(path.read_text()):
            seen.setdefault(name, set()).add(path.relative_to(ROOT).as_posix())
    assert {"Workload", "Replica", "StepResult", "WorkloadRoles", "StrategySpec"} <= set(seen)
    for name, where in seen.items():
        assert name in racegate.__all__, f"{sorted(where)} import {name!r}, which racegate lacks"
        assert getattr(racegate, name) is not None


def test_each_public_name_is_its_one_definition() -> None:
    assert sorted(racegate.__all__) == sorted(racegate.PUBLIC)
    for name, module in racegate.PUBLIC.items():
        assert getattr(racegate, name) is getattr(importlib.import_module(module), name), name
    with pytest.raises(AttributeError, match="no attribute 'workload_api'"):
        racegate.workload_api  # noqa: B018  (the old path is gone, said in docs/workload.md)


def test_docs_say_what_the_old_paths_became() -> None:
    text = (ROOT / "docs" / "workload.md").read_text()
    assert "harness.workload_api" in text and "harness.scenario.workload_api" in text
    assert "from racegate import" in text


def test_the_parser_reads_both_forms() -> None:
    text = "from racegate import A, B as C  # x\n    from racegate import (\n    D,\n    E,\n)\n"
    assert imported_names(text) == {"A", "B", "D", "E"}


@pytest.mark.process  # a fresh interpreter: what importing racegate loads
def test_importing_the_package_and_its_names_imports_no_torch() -> None:
    code = (
        "import sys, racegate\n"
        "from racegate import Workload, Replica, StepResult, WorkloadRoles, StrategySpec\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] == 'torch'))\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True
    )
    assert proc.stdout.strip() == "[]", proc.stdout
