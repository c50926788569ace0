"""racegate/harness/scenario/matrix_plan.py: the version matrix read from
racegate/harness/expectations/versions.toml, each bad value named with its file and key, and every
count of cells derived from the file, so adding a torch release is one line of data (nox, the
nightly's plan and its tests follow)."""

from __future__ import annotations

import importlib.util
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from racegate.harness.scenario import matrix_plan

ROOT = Path(__file__).resolve().parent.parent


def test_the_committed_matrix_and_what_it_derives() -> None:
    m = matrix_plan.load()
    assert m.gpu_torch == (matrix_plan.SYSTEM, *m.torch_releases)
    assert m.cpu_torch == m.torch_releases
    assert m.gpu_transformers[-2:] == (m.image_transformers, m.latest_transformers)
    assert m.image_transformers not in m.cpu_transformers
    assert m.gpu_cells == len(m.gpu_torch) * len(m.gpu_transformers)
    assert m.cpu_cells == len(m.cpu_torch) * len(m.cpu_transformers)
    old = m.incident_transformers[0]
    assert m.cell_pins(old) == [f"transformers=={old}", m.incident_tokenizers]
    assert m.cell_pins(m.latest_transformers) == [f"transformers=={m.latest_transformers}"]
    assert matrix_plan.tag("torch", "2.11.0") == "torch_2_11_0"
    assert matrix_plan.tag("ab", matrix_plan.SYSTEM) == "ab_system"


def _with(tmp_path: Path, old: str, new: str) -> Path:
    text = matrix_plan.VERSIONS_FILE.read_text()
    assert old in text
    path = tmp_path / "versions.toml"
    path.write_text(text.replace(old, new, 1))
    return path


def test_one_more_torch_release_is_one_more_row_of_cells(tmp_path: Path) -> None:
    m = matrix_plan.load()
    last = m.torch_releases[-1]
    grown = matrix_plan.load(_with(tmp_path, f'"{last}"]', f'"{last}", "9.9.0"]'))
    assert grown.torch_releases == (*m.torch_releases, "9.9.0")
    assert grown.gpu_cells == m.gpu_cells + len(m.gpu_transformers)
    assert grown.cpu_cells == m.cpu_cells + len(m.cpu_transformers)


@pytest.mark.parametrize(
    ("old", "new", "named"),
    [
        ('releases = ["', 'releases = ["two.ten", "', "releases = ['two.ten'"),
        ('image = "5.17.0"', 'image = ["5.17.0"]', "image"),
        ('latest = "', 'latest_typo = "', "latest = None"),
        ('incident = ["5.6.0", ', 'incident = ["5.6.0", "5.6.0", ', "listed twice"),
        ('image = "5.17.0"', 'image = "5.6.0"', "repeats a version"),
        ('incident_tokenizers = "', 'incident_tokenizers = "tokenisers', "incident_tokenizers"),
        ("[torch]", "[torch", "versions.toml"),  # not TOML at all
    ],
    ids=["not-a-release", "a-list-for-one", "missing", "twice", "gpu-repeat", "pin", "toml"],
)
def test_a_bad_versions_file_is_one_error_naming_its_file_and_key(
    tmp_path: Path, old: str, new: str, named: str
) -> None:
    path = _with(tmp_path, old, new)
    with pytest.raises(ValueError) as exc:
        matrix_plan.load(path)
    text = str(exc.value)
    assert named in text and "\n" not in text, text
    assert str(path) in text or "Expected" in text or "line" in text, text


# The files the noxfile imports (standard library and nox besides): a copy of them is the
# checkout's nox side.
NOX_SIDE = (
    "noxfile.py", "pyproject.toml", "nox_support.py", "racegate/__init__.py",
    "racegate/harness/__init__.py", "racegate/harness/scenario/matrix_plan.py",
    "racegate/harness/doors/sizing.py", "racegate/harness/ab/__init__.py",
    "racegate/harness/ab/defaults.py",
)  # fmt: skip


@pytest.mark.process
def test_adding_a_torch_release_changes_the_data_file_only(tmp_path: Path) -> None:
    """A copy of the checkout's nox side with one more release in its versions.toml: nox lists
    the new cells, tagged, and the nightly's plan (which the workflow reads) holds them all."""
    for rel in (*NOX_SIDE, "racegate/harness/expectations/versions.toml"):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / rel, tmp_path / rel)
    m = matrix_plan.load()
    last = m.torch_releases[-1]
    versions = tmp_path / "racegate" / "harness" / "expectations" / "versions.toml"
    versions.write_text(versions.read_text().replace(f'"{last}"]', f'"{last}", "9.9.0"]', 1))
    out = subprocess.run(
        [sys.executable, "-m", "nox", "-f", str(tmp_path / "noxfile.py"), "-l", "--json",
         "-s", "gpu_matrix", "cpu_matrix"],
        capture_output=True, text=True, check=True, cwd=tmp_path,
    )  # fmt: skip
    listed = json.loads(out.stdout)
    gpu = [s for s in listed if s["name"] == "gpu_matrix"]
    assert len(gpu) == m.gpu_cells + len(m.gpu_transformers)
    assert len(listed) - len(gpu) == m.cpu_cells + len(m.cpu_transformers)
    assert sum("torch_9_9_0" in s["tags"] for s in gpu) == len(m.gpu_transformers)
    spec = importlib.util.spec_from_file_location("nightly_plan", ROOT / "scripts/nightly_plan.py")
    assert spec and spec.loader
    plan = importlib.util.module_from_spec(spec)
    sys.modules["nightly_plan"] = plan  # its dataclasses look their module up there
    try:
        spec.loader.exec_module(plan)
        cells = plan.list_cells(noxfile=tmp_path / "noxfile.py")
    finally:
        del sys.modules["nightly_plan"]
    assert {c.session for c in cells} == {s["session"] for s in gpu}


@pytest.mark.process
def test_nox_stops_on_a_bad_versions_file_with_one_line(tmp_path: Path) -> None:
    for rel in NOX_SIDE:
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / rel, tmp_path / rel)
    bad = matrix_plan.VERSIONS_FILE.read_text().replace('image = "5.17.0"', 'image = "five"')
    (tmp_path / "racegate" / "harness" / "expectations").mkdir()
    (tmp_path / "racegate" / "harness" / "expectations" / "versions.toml").write_text(bad)
    out = subprocess.run(
        [sys.executable, "-m", "nox", "-f", str(tmp_path / "noxfile.py"), "-l"],
        capture_output=True, text=True, cwd=tmp_path,
    )  # fmt: skip
    assert out.returncode == 2, out.stdout + out.stderr
    (line,) = out.stderr.strip().splitlines()
    assert line.startswith("nox: error: ") and "image = 'five'" in line, line
