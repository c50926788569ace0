"""benchmarks/ and scripts/ import nothing from tests/: the tests' helpers change with the
tests, and a tool that imports them breaks silently when they do."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TOOLS = sorted([*ROOT.glob("benchmarks/*.py"), *ROOT.glob("scripts/*.py")])


def imported_modules(path: Path) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            found.add(node.module)
    return found


def test_no_tool_imports_from_tests() -> None:
    # One test over all tools, not one per file: some file names hold words `-k` selects on.
    assert len(TOOLS) > 5, TOOLS
    found = {
        str(tool.relative_to(ROOT)): sorted(
            m for m in imported_modules(tool) if m.split(".")[0] == "tests"
        )
        for tool in TOOLS
    }
    assert not {k: v for k, v in found.items() if v}, found
