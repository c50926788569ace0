"""racegate installed into a fresh venv that already has torch: its pytest11 entry point loads
the plugin in another project, whose `pytest -k race` collects the suite (harness/cases/) and
whose plain `pytest` collects none of it; the `racegate` console command is there."""

from __future__ import annotations

import os
import site
import subprocess
import venv
from pathlib import Path

import pytest

pytestmark = pytest.mark.process  # installs into a fresh venv, runs pytest in it

ROOT = Path(__file__).resolve().parent.parent
PROJECT = """[project]
name = "someone-elses"
version = "0"

[tool.racegate]
workload = "model.workload:make_workload"
"""


def _venv_over_this_python(where: Path) -> Path:
    """A venv that sees this python's packages (torch, transformers, pytest, pip, setuptools)
    through a .pth: `--system-site-packages` would see only the base interpreter's, not a
    venv's. No pip of its own: this python's pip and setuptools install into it, offline."""
    venv.create(where, with_pip=False)
    python = where / "bin" / "python"
    purelib = subprocess.run(
        [python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip
    (Path(purelib) / "host.pth").write_text("\n".join(site.getsitepackages()) + "\n")
    return python


def test_installed_plugin_collects_the_suite_in_another_project(tmp_path: Path) -> None:
    python = _venv_over_this_python(tmp_path / "venv")
    subprocess.run(
        [python, "-m", "pip", "install", "--quiet", "--no-index", "--no-deps",
         "--no-build-isolation", "-e", str(ROOT)],
        check=True, capture_output=True,
    )  # fmt: skip
    project = tmp_path / "project"
    project.mkdir()
    (project / "pyproject.toml").write_text(PROJECT)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RACEGATE_", "PYTEST_"))}

    def pytest(*args: str) -> subprocess.CompletedProcess[str]:
        cmd = [python, "-m", "pytest", "--co", "-q", "-p", "no:cacheprovider", *args]
        return subprocess.run(cmd, cwd=project, env=env, capture_output=True, text=True)

    selected = pytest("-k", "race")
    assert selected.returncode == 0, selected.stdout + selected.stderr
    assert "test_race.py::test_race[per_device-cold-cpux2]" in selected.stdout
    assert "test_race_probes.py::test_race_probe[" in selected.stdout
    plain = pytest()
    assert plain.returncode == 5 and "test_race" not in plain.stdout, plain.stdout
    console = subprocess.run(
        [tmp_path / "venv" / "bin" / "racegate", "--help"], capture_output=True, text=True
    )
    assert console.returncode == 0 and "race" in console.stdout, console.stderr
