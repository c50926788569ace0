"""racegate installed into a fresh venv that already has torch, editable and from a wheel: its
pytest11 entry point loads the plugin in another project, whose `pytest -k race` collects the
suite (racegate/cases/) and gates, and whose plain `pytest` racegate leaves alone (its own
model/, harness/, cases/ packages and --devices option, its TMPDIR, no torch, no folder); the
wheel adds one import package, `racegate`, which someone else's `model/` distribution leaves
whole; the `racegate` console command is there, and a wheel carries racegate's own tables
(racegate/harness/expectations/) while the project's throughput floors are the project's own
(none: said so)."""

from __future__ import annotations

import os
import re
import shutil
import site
import subprocess
import sys
import venv
import zipfile
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
    assert "test_race.py::test_race[per_device-cold-cpux3]" in selected.stdout
    assert "test_race_probes.py::test_race_probe[" in selected.stdout
    plain = pytest()
    assert plain.returncode == 5 and "test_race" not in plain.stdout, plain.stdout
    console = subprocess.run(
        [tmp_path / "venv" / "bin" / "racegate", "--help"], capture_output=True, text=True
    )
    assert console.returncode == 0 and "race" in console.stdout, console.stderr


@pytest.fixture(scope="module")
def wheel_python(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """`pip wheel` of the package alone (pyproject.toml, racegate/: no checkout around it),
    installed into a fresh venv over this python; the source copy is removed, so the installed
    one is all there is. Built once for the tests below."""
    tmp = tmp_path_factory.mktemp("wheel")
    source = tmp / "source"
    source.mkdir()
    shutil.copy(ROOT / "pyproject.toml", source / "pyproject.toml")
    shutil.copytree(
        ROOT / "racegate", source / "racegate", ignore=shutil.ignore_patterns("__pycache__")
    )
    wheels = tmp / "wheels"
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-index",
         "--no-build-isolation", "-w", str(wheels), str(source)],
        check=True, capture_output=True, cwd=tmp,
    )  # fmt: skip
    (wheel,) = wheels.glob("racegate-*.whl")
    # One import package: the wheel adds `racegate` and its metadata, nothing else at the top.
    tops = {name.split("/")[0] for name in zipfile.ZipFile(wheel).namelist()}
    assert {top for top in tops if not top.endswith(".dist-info")} == {"racegate"}, tops
    python = _venv_over_this_python(tmp / "venv")
    subprocess.run(
        [python, "-m", "pip", "install", "--quiet", "--no-index", "--no-deps", str(wheel)],
        check=True, capture_output=True,
    )  # fmt: skip
    shutil.rmtree(source)
    return python


def test_a_wheel_carries_its_tables_and_runs_in_another_project(
    wheel_python: Path, tmp_path: Path
) -> None:
    """From another folder the console command runs a probe against the table the wheel
    carries, `pytest -k race` collects the suite, and the project's missing baselines/ means no
    floors, said so. Before the tables moved into harness/ and became package data, the probe
    stopped at 'cannot read the probe table' and pytest at 'cannot read the race table'
    (site-packages/expectations/... did not exist)."""
    python = wheel_python
    project = tmp_path / "project"
    project.mkdir()
    (project / "pyproject.toml").write_text(PROJECT)
    env = _project_env()

    def run(*cmd: str | Path) -> subprocess.CompletedProcess[str]:
        return subprocess.run(cmd, cwd=project, env=env, capture_output=True, text=True)

    # Installed: racegate from the venv, and its children get no PYTHONPATH entry for it (that
    # site-packages first on another python's path would shadow that python's transformers).
    code = (
        "import racegate.harness.run.code_root as c; "
        "print(c.ROOT, c.INSTALLED, repr(c.pythonpath()))"
    )
    where = run(python, "-c", code)
    assert where.stdout.startswith(str(python.parent.parent)), where.stdout + where.stderr
    assert where.stdout.split()[1:] == ["True", "''"], where.stdout
    racegate = python.parent / "racegate"
    helped = run(racegate, "--help")
    assert helped.returncode == 0 and "upgrade" in helped.stdout, helped.stderr
    assert helped.stdout.startswith("usage: racegate "), helped.stdout[:200]  # its own name
    explained = run(racegate, "explain", "UNDECIDED")  # the words ship with the package
    assert explained.returncode == 0 and explained.stdout.startswith("UNDECIDED (exit 7)")
    probe = run(racegate, "probe", "--only", "is_compiling_leak", "--timeout", "60")
    assert probe.returncode == 0, probe.stdout + probe.stderr
    assert "1 of 1 probes match racegate's probes.toml" in probe.stdout, probe.stdout
    floors = run(racegate, "baseline")
    assert floors.returncode == 0, floors.stderr
    assert floors.stdout.startswith(f"no baselines in {project / 'baselines'};"), floors.stdout
    cmd = [python, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", "-k", "race"]
    selected = run(*cmd)
    assert selected.returncode == 0, selected.stdout + selected.stderr
    assert "test_race.py::test_race[per_device-cold-cpux3]" in selected.stdout, selected.stdout
    assert "test_race_probes.py::test_race_probe[" in selected.stdout, selected.stdout
    assert not (project / ".racegate").exists()  # collecting makes no run folder


# A user's project with packages of the generic names racegate once installed at the top level
# (model/, harness/) and its own cases/ and tests/, and a conftest that defines --devices (as
# racegate's option was once spelled). Its tests look at their own session from inside it.
GUEST_CONFTEST = """
def pytest_addoption(parser):
    parser.addoption("--devices", default="mine")
"""
GUEST_TEST = """
import os
import sys

import cases
import harness
import model


def test_its_own_packages_and_its_environment():
    assert (model.WHOSE, harness.WHOSE, cases.WHOSE) == ("the project's",) * 3
    assert os.environ["TMPDIR"] == os.environ["GIVEN_TMPDIR"]
    assert not [k for k in os.environ if k.startswith("RACEGATE_")]
    assert "torch" not in sys.modules


def test_its_own_devices_option(pytestconfig):
    assert pytestconfig.getoption("--devices") == "mine"
"""
# The verdict block's last line ends so (racegate.harness.judge.gate.Decision.line).
DECISION = re.compile(r"\(exit (\d+); racegate explain (SAFE|UNSAFE|UNDECIDED)\)")


def _guest_project(where: Path) -> Path:
    where.mkdir()
    (where / "pyproject.toml").write_text(PROJECT)
    (where / "conftest.py").write_text(GUEST_CONFTEST)
    for package in ("model", "harness", "cases", "tests"):
        (where / package).mkdir()
        (where / package / "__init__.py").write_text('WHOSE = "the project\'s"\n')
    (where / "tests" / "test_own.py").write_text(GUEST_TEST)
    return where


def test_a_guest_in_a_project_with_its_own_packages(wheel_python: Path, tmp_path: Path) -> None:
    """The project's plain pytest passes as if racegate were not installed (its TMPDIR
    unchanged, no torch imported, no folder made, nothing printed of racegate's), and its
    `pytest -k race` still gates: the verdict block, and an exit that is its word's."""
    project = _guest_project(tmp_path / "project")
    given_tmp = tmp_path / "user-tmp"
    given_tmp.mkdir()
    env = _project_env() | {"TMPDIR": str(given_tmp), "GIVEN_TMPDIR": str(given_tmp)}

    def pytest(*args: str) -> subprocess.CompletedProcess[str]:
        cmd = [wheel_python, "-m", "pytest", "-p", "no:cacheprovider", *args]
        return subprocess.run(cmd, cwd=project, env=env, capture_output=True, text=True)

    plain = pytest()
    assert plain.returncode == 0, plain.stdout[-3000:] + plain.stderr
    assert "2 passed" in plain.stdout, plain.stdout
    assert "racegate:" not in plain.stdout + plain.stderr, plain.stdout
    assert not (project / ".racegate").exists() and list(given_tmp.iterdir()) == []

    # The race suite, narrowed to the production strategy and one control run (the control's
    # case runs beside it: its cell needs one), about a minute on 2 CPU cores.
    gated = pytest(
        "-k", "race", "--racegate-strategies", "warmup_locked",
        "--racegate-control-repeat", "1", "--devices", "theirs",
    )  # fmt: skip
    out = gated.stdout
    assert " racegate verdict " in out, out[-3000:] + gated.stderr
    block = " ".join(out[out.index(" racegate verdict ") :].split())  # its lines unwrapped
    (found,) = DECISION.findall(block)
    code, word = int(found[0]), found[1]
    assert f" {word}: " in block, block
    assert gated.returncode == code == {"SAFE": 0, "UNSAFE": 1, "UNDECIDED": 7}[word], out[-3000:]
    assert list(given_tmp.iterdir()) == []  # its private root went at exit


def test_a_distribution_that_ships_model_leaves_the_package_whole(
    wheel_python: Path, tmp_path: Path
) -> None:
    """Installing, then uninstalling, someone's distribution with a top-level `model/` leaves
    racegate.model importable (racegate's own model/ was once overwritten, then deleted)."""
    source = tmp_path / "their-model"
    (source / "model").mkdir(parents=True)
    (source / "model" / "__init__.py").write_text('WHOSE = "theirs"\n')
    (source / "pyproject.toml").write_text(
        '[build-system]\nrequires = ["setuptools>=64"]\nbuild-backend = "setuptools.build_meta"'
        '\n\n[project]\nname = "their-model"\nversion = "0"\n\n[tool.setuptools]\n'
        'packages = ["model"]\n'
    )
    pip = [wheel_python, "-m", "pip", "--disable-pip-version-check"]
    subprocess.run(
        [*pip, "install", "--quiet", "--no-index", "--no-deps", "--no-build-isolation",
         str(source)],
        check=True, capture_output=True, cwd=tmp_path,
    )  # fmt: skip
    check = (
        "import importlib.util, racegate.model; "
        "assert importlib.util.find_spec('racegate.model.workload'); print('racegate.model ok')"
    )

    def importable() -> str:
        done = subprocess.run(
            [wheel_python, "-c", check], cwd=tmp_path, capture_output=True, text=True
        )
        return done.stdout + done.stderr

    theirs = subprocess.run(
        [wheel_python, "-c", "import model; print(model.WHOSE)"],
        cwd=tmp_path, capture_output=True, text=True,
    )  # fmt: skip
    assert theirs.stdout.strip() == "theirs", theirs.stderr
    assert importable().strip() == "racegate.model ok"
    subprocess.run([*pip, "uninstall", "--quiet", "-y", "their-model"], check=True)
    assert importable().strip() == "racegate.model ok"
