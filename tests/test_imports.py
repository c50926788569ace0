"""What racegate's shipped modules import: nothing dev-only (nox, ruff: pyproject's `dev`
extra), nothing beyond its declared dependencies; and bootstrap.py, which runs before anything
is installed, reaches only the standard library (it imports racegate.harness.doors.options for
the pytest spelling of racegate's options, and that module's own imports)."""

from __future__ import annotations

import ast
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "racegate"
# The import names of pyproject's dependencies (distribution → what it installs).
DECLARED = {"torch", "transformers", "pytest", "_pytest", "xdist", "pytest_timeout", "rich"}
DECLARED |= {"packaging"}
DECLARED |= {"matplotlib", "numpy"}  # matplotlib's own dependency, as racegate's report uses it
DEV_ONLY = {"nox", "ruff", "actionlint"}


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(tree: ast.AST, module: str, *, top_level_only: bool) -> set[str]:
    """Absolute module names `tree` imports (relative ones resolved against `module`); with
    top_level_only, only what runs at import (not inside functions or `if TYPE_CHECKING`)."""
    found: set[str] = set()
    nodes = ast.iter_child_nodes(tree) if top_level_only else ast.walk(tree)
    for node in nodes:
        if (
            top_level_only
            and isinstance(node, ast.If)
            and "TYPE_CHECKING" in ast.unparse(node.test)
        ):
            continue
        if top_level_only and isinstance(node, ast.If | ast.Try):
            found |= _imports(ast.Module(body=[*node.body, *getattr(node, "orelse", [])],
                                         type_ignores=[]), module, top_level_only=True)  # fmt: skip
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join([*module.split(".")[: -node.level], *([base] if base else [])])
            found.add(base)
            found |= {f"{base}.{alias.name}" for alias in node.names}
    return found


def test_no_shipped_module_imports_a_dev_only_or_undeclared_package() -> None:
    dependencies = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert not any(d.split(">")[0].split("=")[0] in DEV_ONLY for d in dependencies["dependencies"])
    wrong = []
    for path in sorted(PACKAGE.rglob("*.py")):
        module = _module_name(path)
        for name in _imports(ast.parse(path.read_text()), module, top_level_only=False):
            top = name.split(".")[0]
            if top in DEV_ONLY or (
                top not in sys.stdlib_module_names and top not in DECLARED and top != "racegate"
            ):
                wrong.append(f"{path.relative_to(ROOT)}: {name}")
    assert wrong == []


def test_the_scan_sees_imports_inside_functions() -> None:
    tree = ast.parse("def f():\n    import nox\n")
    assert "nox" in _imports(tree, "racegate.x", top_level_only=False)
    assert "nox" not in _imports(tree, "racegate.x", top_level_only=True)


def test_bootstrap_reaches_only_the_standard_library() -> None:
    """What importing bootstrap.py imports, racegate's modules followed: no third party."""
    seen: set[str] = set()
    todo = sorted(_imports(ast.parse((ROOT / "bootstrap.py").read_text()), "bootstrap",
                           top_level_only=True))  # fmt: skip
    third_party = []
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        top = name.split(".")[0]
        if top != "racegate":
            if top not in sys.stdlib_module_names and top != "__future__":
                third_party.append(name)
            continue
        path = ROOT.joinpath(*name.split("."))
        file = path / "__init__.py" if path.is_dir() else path.with_suffix(".py")
        if file.is_file():  # not a name imported from a module
            todo += _imports(ast.parse(file.read_text()), name, top_level_only=True)
    assert "racegate.harness.doors.options" in seen and third_party == []
