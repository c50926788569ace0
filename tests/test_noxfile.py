"""noxfile.py: the matrix cells nox lists, single-sourced versions, and what each cell installs
and runs (with a recording stand-in for nox.Session, so nothing is installed).
"""

from __future__ import annotations

import ast
import importlib.util
import json
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent
NOXFILE = ROOT / "noxfile.py"


@pytest.fixture(scope="module")
def noxfile() -> ModuleType:
    spec = importlib.util.spec_from_file_location("racegate_noxfile", NOXFILE)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def listed() -> list[dict[str, Any]]:
    """`nox -l --json` for every session: what nox itself makes of the noxfile."""
    out = subprocess.run(
        [sys.executable, "-m", "nox", "-f", str(NOXFILE), "-l", "--json", "-s",
         "tests", "race", "gpu_matrix", "cpu_matrix", "report"],
        capture_output=True, text=True, check=True, cwd=ROOT,
    )  # fmt: skip
    return json.loads(out.stdout)


def test_matrix_cells_are_named_torch_then_transformers(
    noxfile: ModuleType, listed: list[dict[str, Any]]
) -> None:
    for name, torches, tfs in (
        ("gpu_matrix", noxfile.GPU_TORCH, noxfile.GPU_TRANSFORMERS),
        ("cpu_matrix", noxfile.CPU_TORCH, noxfile.CPU_TRANSFORMERS),
    ):
        cells = [s for s in listed if s["name"] == name]
        expected = {f"{name}(torch={t!r}, transformers={tf!r})" for t in torches for tf in tfs}
        assert {s["session"] for s in cells} == expected
        assert len(cells) == len(torches) * len(tfs)
        for s in cells:
            assert s["session"] == (
                f"{name}(torch={s['call_spec']['torch']!r}, "
                f"transformers={s['call_spec']['transformers']!r})"
            )
    sessions = {s["session"] for s in listed}
    assert "gpu_matrix(torch='system', transformers='5.8.1')" in sessions
    assert "gpu_matrix(torch='2.11.0', transformers='5.6.0')" in sessions
    assert "cpu_matrix(torch='2.14.1', transformers='5.8.1')" in sessions
    assert not any("torch='system'" in s for s in sessions if s.startswith("cpu_matrix"))
    assert {"tests", "race", "report"} <= sessions


def test_every_session_has_a_one_line_docstring(listed: list[dict[str, Any]]) -> None:
    for s in listed:
        assert s["description"] and "\n" not in s["description"], s["session"]


def test_versions_are_named_once(noxfile: ModuleType) -> None:
    """Each version string is written in exactly one place; the lists are built from it."""
    constants = [
        n.value
        for n in ast.walk(ast.parse(NOXFILE.read_text()))
        if isinstance(n, ast.Constant) and isinstance(n.value, str)
    ]
    versions = set(noxfile.GPU_TORCH + noxfile.CPU_TORCH)
    versions |= set(noxfile.GPU_TRANSFORMERS + noxfile.CPU_TRANSFORMERS)
    assert {"2.10.0", "2.15.0", "5.6.0", "5.8.1", noxfile.LATEST_TRANSFORMERS} <= versions
    for v in versions:
        assert constants.count(v) == 1, f"{v!r} is written {constants.count(v)} times"
    assert set(noxfile.CPU_TORCH) < set(noxfile.GPU_TORCH)
    assert noxfile.GPU_TORCH[0] == noxfile.SYSTEM


def test_sessions_are_typed_and_forward_posargs() -> None:
    tree = ast.parse(NOXFILE.read_text())
    sessions = [
        f
        for f in tree.body
        if isinstance(f, ast.FunctionDef)
        and any("nox.session" in ast.unparse(d) for d in f.decorator_list)
    ]
    assert {f.name for f in sessions} == {"tests", "race", "gpu_matrix", "cpu_matrix", "report"}
    for f in sessions:
        assert ast.unparse(f.args.args[0].annotation) == "nox.Session", f.name
        assert ast.unparse(f.returns) == "None", f.name
        body = ast.unparse(f)
        assert "session.posargs" in body or "run_suite(" in body, f.name
        assert "return" not in body.replace("-> None", ""), f"{f.name}: skip, don't return"


class Skip(Exception):
    pass


class FakeSession:
    """Records installs and runs; answers the noxfile's probes like a GPU machine would."""

    def __init__(self, name: str, posargs: list[str] | None = None, gpus: int = 2) -> None:
        self.name, self.posargs, self.gpus = name, posargs or [], gpus
        self.installs: list[tuple[str, ...]] = []
        self.runs: list[tuple[tuple[str, ...], dict[str, Any]]] = []
        self.torch = "2.11.0+cu130"
        self.venv_backend = "virtualenv"

    def install(self, *args: str) -> None:
        self.installs.append(args)
        for a in args:
            if a.startswith("torch=="):
                self.torch = a.removeprefix("torch==")

    def run(self, *args: str, **kwargs: Any) -> str | None:
        self.runs.append((args, kwargs))
        code = args[-1] if args[:2] == ("python", "-c") else ""
        if "find_spec('torch')" in code:
            return "True\n"
        if "transformers as t" in code:
            tf = next(a for i in self.installs for a in i if a.startswith("transformers=="))
            return f"{self.torch} {tf.removeprefix('transformers==')}\n"
        if "device_count" in code:
            return f"{self.gpus}\n"
        return None

    def skip(self, reason: str) -> None:
        raise Skip(reason)

    def error(self, reason: str) -> None:
        raise AssertionError(reason)


def _pytest_run(session: FakeSession) -> tuple[tuple[str, ...], dict[str, Any]]:
    return next(r for r in session.runs if r[0][:3] == ("python", "-m", "pytest"))


def test_gpu_cell_system_torch_old_transformers(
    noxfile: ModuleType, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(noxfile, "RESULTS_DIR", tmp_path)
    monkeypatch.setattr(noxfile.shutil, "which", lambda _: "/usr/bin/nvidia-smi")
    monkeypatch.setenv("RACEGATE_WORKLOAD", "examples.llama_workload:make_workload")
    monkeypatch.delenv("RACEGATE_WHEELHOUSE", raising=False)
    s = FakeSession("gpu_matrix(torch='system', transformers='5.6.0')", ["--repeat", "3"])
    noxfile.gpu_matrix(s, torch="system", transformers="5.6.0")
    installed = [a for args in s.installs for a in args]
    assert not any(a.startswith("torch") for a in installed)  # the image's torch is reused
    assert "transformers==5.6.0" in installed and noxfile.OLD_TOKENIZERS in installed
    args, kwargs = _pytest_run(s)
    cell = tmp_path / "gpu_matrix-torch-system-transformers-5.6.0"
    assert f"--results={cell / 'records.jsonl'}" in args
    assert f"--junitxml={cell / 'junit.xml'}" in args
    assert args[-2:] == ("--repeat", "3") and cell.is_dir()
    assert kwargs["env"] == {"RACEGATE_WORKLOAD": "examples.llama_workload:make_workload"}


def test_cpu_cell_pins_torch_and_goes_offline_with_a_wheelhouse(
    noxfile: ModuleType, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(noxfile, "RESULTS_DIR", tmp_path / "results")
    monkeypatch.setenv("RACEGATE_WHEELHOUSE", str(tmp_path))
    s = FakeSession("cpu_matrix(torch='2.12.1', transformers='5.24.0')", gpus=0)
    noxfile.cpu_matrix(s, torch="2.12.1", transformers=noxfile.LATEST_TRANSFORMERS)
    assert s.installs and all(
        i[:3] == ("--no-index", "--find-links", str(tmp_path)) for i in s.installs
    )
    installed = [a for args in s.installs for a in args]
    assert "torch==2.12.1" in installed and noxfile.OLD_TOKENIZERS not in installed
    args, _ = _pytest_run(s)
    assert args[4:6] == ("-k", "race") and "--devices" in args


def test_gpu_matrix_skips_without_a_gpu(
    noxfile: ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(noxfile.shutil, "which", lambda _: None)
    with pytest.raises(Skip, match="nvidia-smi"):
        noxfile.gpu_matrix(FakeSession("gpu"), torch="2.11.0", transformers="5.8.1")
    monkeypatch.setattr(noxfile.shutil, "which", lambda _: "/usr/bin/nvidia-smi")
    monkeypatch.delenv("RACEGATE_WHEELHOUSE", raising=False)
    with pytest.raises(Skip, match="sees no GPU"):
        noxfile.gpu_matrix(FakeSession("gpu", gpus=0), torch="2.11.0", transformers="5.8.1")


def test_report_session_reads_the_results_dir(
    noxfile: ModuleType, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(noxfile, "RESULTS_DIR", tmp_path / "none")
    with pytest.raises(Skip, match="no results"):
        noxfile.report(FakeSession("report"))
    monkeypatch.setattr(noxfile, "RESULTS_DIR", tmp_path)
    monkeypatch.delenv("RACEGATE_WHEELHOUSE", raising=False)
    s = FakeSession("report")
    noxfile.report(s)
    args = s.runs[-1][0]
    assert args[:4] == ("python", "-m", "harness", "report") and str(tmp_path) in args
    assert str(tmp_path / "report") in args
