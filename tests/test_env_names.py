"""racegate.harness.scenario.env_names names every RACEGATE_ environment variable the repository
reads or sets."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from racegate.harness.scenario import env_names

pytestmark = pytest.mark.process  # they read the repository with git ls-files

ROOT = Path(__file__).resolve().parents[1]
NAME = re.compile(r"RACEGATE_[A-Z0-9_]*[A-Z0-9]")
SKIP = ("results/",)  # measurement records and logs quote names, they do not read them


def tracked_text() -> dict[str, str]:
    out = subprocess.run(
        ["git", "ls-files", "-co", "--exclude-standard"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    texts = {}
    for rel in out:
        path = ROOT / rel
        if rel.startswith(SKIP) or not path.is_file() or path.stat().st_size > 1_000_000:
            continue
        try:
            texts[rel] = path.read_text()
        except UnicodeDecodeError:
            continue
    return texts


def test_every_env_name_in_the_repository_is_in_the_module() -> None:
    unnamed = {
        f"{name} ({rel})"
        for rel, text in tracked_text().items()
        if rel != "racegate/harness/scenario/env_names.py"
        for name in NAME.findall(text)
        if name not in env_names.NAMES
    }
    assert not unnamed, f"add to racegate/harness/scenario/env_names.NAMES: {sorted(unnamed)}"


def test_no_code_builds_an_env_name_from_parts() -> None:
    """A name made as f"RACEGATE_{x}" hides from the check above: harness code imports it."""
    built = [
        rel
        for rel, text in tracked_text().items()
        if rel.endswith(".py")
        and rel != "tests/test_env_names.py"
        and re.search(r"""f["']RACEGATE_\{""", text)
    ]
    assert not built, (
        f"built RACEGATE_ names in {built}; name them in racegate/harness/scenario/env_names.py"
    )


def test_every_named_variable_has_a_meaning_and_is_used() -> None:
    texts = tracked_text()
    elsewhere = "\n".join(
        t for rel, t in texts.items() if rel != "racegate/harness/scenario/env_names.py"
    )
    for name, meaning in env_names.NAMES.items():
        assert NAME.fullmatch(name) and meaning.strip(), name
        assert name in elsewhere or name in vars(env_names).values(), f"{name} is used nowhere"
    assert set(env_names.SETTING.values()) <= set(env_names.NAMES)


def test_the_entry_script_spells_only_known_names() -> None:
    """bootstrap.py runs before install (stdlib only): it keeps literal names, checked here."""
    names = set(NAME.findall((ROOT / "bootstrap.py").read_text()))
    assert names and names <= set(env_names.NAMES)
