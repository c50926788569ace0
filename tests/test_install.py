"""racegate installed into a fresh venv that already has torch, editable and from a wheel: its
pytest11 entry point loads the plugin in another project, whose `pytest -k race` collects the
suite (racegate/cases/) and whose plain `pytest` collects none of it; the `racegate` console
command is there, and a wheel carries racegate's own tables (racegate/harness/expectations/) while
the project's throughput floors are the project's own (none: said so)."""

from __future__ import annotations

import os
import shutil
import site
import subprocess
import sys
import venv
from pathlib import Path

import pytest

pytestmark = pytest.mark.process  # installs into a fresh venv, runs pytest in it

ROOT = Path(__file__).resolve().parent.parent
PROJECT = """[project]
name = "someone-elses"
version = "0"

[tool.racegate]
workload = "racegate.model.workload:make_workload"
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


def _project_env() -> dict[str, str]:
    """This environment less racegate's and pytest's variables and PYTHONPATH (which could
    reach the checkout): the project sees only what is installed."""
    drop = ("RACEGATE_", "PYTEST_", "PYTHONPATH")
    return {k: v for k, v in os.environ.items() if not k.startswith(drop)}


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
    env = _project_env()

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


def test_a_wheel_carries_its_tables_and_runs_in_another_project(tmp_path: Path) -> None:
    """`pip wheel` of the package alone (pyproject.toml, racegate/: no checkout around
    it), installed into a fresh venv: from another folder the console command runs a probe
    against the table the wheel carries, `pytest -k race` collects the suite, and the project's
    missing baselines/ means no floors, said so. Before the tables moved into harness/ and
    became package data, the probe stopped at 'cannot read the probe table' and pytest at
    'cannot read the race table' (site-packages/expectations/... did not exist)."""
    source = tmp_path / "source"
    source.mkdir()
    shutil.copy(ROOT / "pyproject.toml", source / "pyproject.toml")
    for package in ("racegate",):
        shutil.copytree(
            ROOT / package, source / package, ignore=shutil.ignore_patterns("__pycache__")
        )
    wheels = tmp_path / "wheels"
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-index",
         "--no-build-isolation", "-w", str(wheels), str(source)],
        check=True, capture_output=True, cwd=tmp_path,
    )  # fmt: skip
    (wheel,) = wheels.glob("racegate-*.whl")
    python = _venv_over_this_python(tmp_path / "venv")
    subprocess.run(
        [python, "-m", "pip", "install", "--quiet", "--no-index", "--no-deps", str(wheel)],
        check=True, capture_output=True,
    )  # fmt: skip
    shutil.rmtree(source)  # the installed copy is all there is
    project = tmp_path / "project"
    project.mkdir()
    (project / "pyproject.toml").write_text(PROJECT)
    env = _project_env()

    def run(*cmd: str | Path) -> subprocess.CompletedProcess[str]:
        return subprocess.run(cmd, cwd=project, env=env, capture_output=True, text=True)

    # Installed: harness from the venv, and its children get no PYTHONPATH entry for it (that
    # site-packages first on another python's path would shadow that python's transformers).
    code = (
        "import racegate.harness.run.code_root as c; "
        "print(c.ROOT, c.INSTALLED, repr(c.pythonpath()))"
    )
    where = run(python, "-c", code)
    assert where.stdout.startswith(str(tmp_path / "venv")), where.stdout + where.stderr
    assert where.stdout.split()[1:] == ["True", "''"], where.stdout
    racegate = tmp_path / "venv" / "bin" / "racegate"
    helped = run(racegate, "--help")
    assert helped.returncode == 0 and "upgrade" in helped.stdout, helped.stderr
    assert helped.stdout.startswith("usage: racegate "), helped.stdout[:200]  # its own name
    probe = run(racegate, "probe", "--only", "is_compiling_leak", "--timeout", "60")
    assert probe.returncode == 0, probe.stdout + probe.stderr
    assert "1 of 1 probes match racegate's probes.toml" in probe.stdout, probe.stdout
    floors = run(racegate, "baseline")
    assert floors.returncode == 0, floors.stderr
    assert floors.stdout.startswith(f"no baselines in {project / 'baselines'};"), floors.stdout
    cmd = [python, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", "-k", "race"]
    selected = run(*cmd)
    assert selected.returncode == 0, selected.stdout + selected.stderr
    assert "test_race.py::test_race[per_device-cold-cpux2]" in selected.stdout, selected.stdout
    assert "test_race_probes.py::test_race_probe[" in selected.stdout, selected.stdout
