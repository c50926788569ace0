"""noxfile.py: the matrix cells nox lists, single-sourced versions, and what each cell installs
and runs (with a recording stand-in for nox.Session, so nothing is installed).
"""

from __future__ import annotations

import ast
import importlib.util
import json
import os
import re
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from types import MappingProxyType, ModuleType
from typing import Any

import pytest

from racegate.harness.doors import sizing
from racegate.harness.judge.gate import EXIT_INTERRUPTED, EXIT_SAFE, EXIT_UNSAFE
from racegate.harness.scenario import matrix_plan

ROOT = Path(__file__).resolve().parent.parent
NOXFILE = ROOT / "noxfile.py"
SUPPORT = ROOT / "nox_support.py"  # what the noxfile's sessions call
MATRIX = matrix_plan.load()  # racegate/harness/expectations/versions.toml
PROCESS_FIXTURES = ("listed",)  # runs nox: its tests are in the process tier (tests/conftest.py)


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
         "tests", "race", "gpu_matrix", "cpu_matrix", "report", "gpu_ab"],
        capture_output=True, text=True, check=True, cwd=ROOT,
    )  # fmt: skip
    return json.loads(out.stdout)


def test_matrix_cells_are_named_torch_then_transformers(
    noxfile: ModuleType, listed: list[dict[str, Any]]
) -> None:
    for name, torches, tfs in (
        ("gpu_matrix", MATRIX.gpu_torch, MATRIX.gpu_transformers),
        ("cpu_matrix", MATRIX.cpu_torch, MATRIX.cpu_transformers),
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


def test_versions_are_written_only_in_the_data_file(noxfile: ModuleType) -> None:
    """Every version is written once, in racegate/harness/expectations/versions.toml; the noxfile,
    its helpers, the nightly's plan script and workflow only read the lists built from it."""
    matrix = noxfile.support.MATRIX
    assert matrix == MATRIX
    versions = {*matrix.gpu_torch, *matrix.cpu_torch, *matrix.gpu_transformers}
    versions |= set(matrix.cpu_transformers)
    assert {"2.10.0", "2.15.0", "5.6.0", "5.8.1", matrix.latest_transformers} <= versions
    releases = versions - {matrix_plan.SYSTEM}  # the runner image's torch has no version
    data = matrix_plan.VERSIONS_FILE.read_text()
    for v in releases:
        assert data.count(f'"{v}"') == 1, f"{v!r} is written {data.count(v)} times"
    readers = [
        NOXFILE,
        SUPPORT,
        ROOT / "racegate/harness/scenario/matrix_plan.py",
        ROOT / "scripts/nightly_plan.py",
    ]
    for path in readers:
        constants = {
            n.value
            for n in ast.walk(ast.parse(path.read_text()))
            if isinstance(n, ast.Constant) and isinstance(n.value, str)
        }
        assert not constants & releases, path
    workflow = (ROOT / ".github" / "workflows" / "nightly-gpu.yml").read_text()
    assert not [v for v in releases if re.search(rf"\b{re.escape(v)}\b", workflow)]
    assert set(matrix.cpu_torch) < set(matrix.gpu_torch)
    assert matrix.gpu_torch[0] == matrix_plan.SYSTEM == noxfile.support.SYSTEM


def test_sessions_are_typed_and_forward_posargs() -> None:
    tree = ast.parse(NOXFILE.read_text())
    sessions = [
        f
        for f in tree.body
        if isinstance(f, ast.FunctionDef)
        and any("nox.session" in ast.unparse(d) for d in f.decorator_list)
    ]
    assert {f.name for f in sessions} == {
        "tests", "race", "gpu_matrix", "cpu_matrix", "report", "gpu_ab"
    }  # fmt: skip
    for f in sessions:
        assert ast.unparse(f.args.args[0].annotation) == "nox.Session", f.name
        assert ast.unparse(f.returns) == "None", f.name
        body = ast.unparse(f)
        assert "session.posargs" in body or "run_suite(" in body, f.name
        assert "return" not in body.replace("-> None", ""), f"{f.name}: skip, don't return"


class Skip(Exception):
    pass


class FakeSession:
    """Records installs and runs; answers the noxfile's probes like a GPU machine would.

    With `purelib` (a folder standing for the venv's site-packages) it also keeps state like a
    real venv: a pinned `name==version` install writes that distribution's metadata into the
    venv, or into the `--target` folder; the version probe reads torch and transformers back
    from the venv and the folders its .pth files append, as Python's import would.
    """

    def __init__(
        self,
        name: str,
        posargs: list[str] | None = None,
        gpus: int = 2,
        purelib: Path | None = None,
        gpu_bytes: int = 150_000_000_000,  # what torch reports for an H200
    ) -> None:
        self.name, self.posargs, self.gpus, self.purelib = name, posargs or [], gpus, purelib
        self.gpu_bytes = gpu_bytes
        self.logs: list[str] = []
        self.installs: list[tuple[str, ...]] = []
        self.runs: list[tuple[tuple[str, ...], dict[str, Any]]] = []
        self.torch = "2.11.0+cu130"
        self.venv_backend = "virtualenv"

    def install(self, *args: str, **kwargs: Any) -> None:
        self.installs.append(args)
        target = Path(args[args.index("--target") + 1]) if "--target" in args else self.purelib
        for a in args:
            if a.startswith("torch=="):
                self.torch = a.removeprefix("torch==")
            if target is not None and "==" in a and not a.startswith("-"):
                name, version = a.split("==")
                meta = target / f"{name}-{version}.dist-info"
                meta.mkdir(parents=True, exist_ok=True)
                (meta / "METADATA").write_text(f"Name: {name}\nVersion: {version}\n")

    def _installed(self, name: str) -> str | None:
        assert self.purelib is not None
        folders = [self.purelib] + [
            Path(line.strip())
            for pth in sorted(self.purelib.glob("*.pth"))
            for line in pth.read_text().splitlines()
        ]
        for folder in folders:
            for meta in sorted(folder.glob(f"{name}-*.dist-info")):
                return meta.name.removeprefix(f"{name}-").removesuffix(".dist-info")
        return None

    def run(self, *args: str, **kwargs: Any) -> str | None:
        self.runs.append((args, kwargs))
        code = args[-1] if args[:2] == ("python", "-c") else ""
        if "find_spec('torch')" in code:
            return "True\n"
        if args[:3] == ("python", "-m", "racegate.harness.scenario.versions"):
            if self.purelib is not None:
                found = {"torch": self._installed("torch"), "tf": self._installed("transformers")}
            else:
                tf = next(a for i in self.installs for a in i if a.startswith("transformers=="))
                found = {"torch": self.torch, "tf": tf.removeprefix("transformers==")}
            return json.dumps({"torch": found["torch"], "transformers": found["tf"]}) + "\n"
        if "device_count" in code:
            return f"{self.gpus} {self.gpu_bytes if self.gpus else 0}\n"
        if "purelib" in code and self.purelib is not None:
            return f"{self.purelib}\n"
        return None

    def log(self, message: str) -> None:
        self.logs.append(message)

    def skip(self, reason: str) -> None:
        raise Skip(reason)

    def error(self, reason: str) -> None:
        raise AssertionError(reason)


def _pytest_run(session: FakeSession) -> tuple[tuple[str, ...], dict[str, Any]]:
    return next(r for r in session.runs if r[0][:3] == ("python", "-m", "pytest"))


def test_gpu_cell_system_torch_old_transformers(
    noxfile: ModuleType, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(noxfile.support, "RESULTS_DIR", tmp_path)
    monkeypatch.setattr(noxfile.shutil, "which", lambda _: "/usr/bin/nvidia-smi")
    monkeypatch.setenv("RACEGATE_WORKLOAD", "examples.llama_workload:make_workload")
    monkeypatch.setenv("RACEGATE_RACE_WORKERS", "1")  # one case at a time: no pytest-xdist
    monkeypatch.delenv("RACEGATE_WHEELHOUSE", raising=False)
    s = FakeSession("gpu_matrix(torch='system', transformers='5.6.0')", ["--racegate-repeat", "3"])
    noxfile.gpu_matrix(s, torch="system", transformers="5.6.0")
    installed = [a for args in s.installs for a in args]
    assert not any(a.startswith("torch") for a in installed)  # the image's torch is reused
    assert "transformers==5.6.0" in installed and MATRIX.incident_tokenizers in installed
    args, kwargs = _pytest_run(s)
    cell = tmp_path / "gpu_matrix-torch-system-transformers-5.6.0"
    assert f"--racegate-results={cell / 'records.jsonl'}" in args
    assert f"--junitxml={cell / 'junit.xml'}" in args
    assert args[-2:] == ("--racegate-repeat", "3") and cell.is_dir() and "-n" not in args
    assert kwargs["env"] == {
        "RACEGATE_WORKLOAD": "examples.llama_workload:make_workload",
        "PYTEST_ADDOPTS": "-p no:benchmark",  # a runner image's pytest-benchmark stays off
    }


def test_cpu_cell_pins_torch_and_goes_offline_with_a_wheelhouse(
    noxfile: ModuleType, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(noxfile.support, "RESULTS_DIR", tmp_path / "results")
    monkeypatch.setattr(noxfile.support, "TORCH_DIR", tmp_path / "_torch")
    monkeypatch.setenv("RACEGATE_WHEELHOUSE", str(tmp_path))
    s = FakeSession("cpu_matrix(torch='2.12.1', transformers='5.24.0')", gpus=0)
    noxfile.cpu_matrix(s, torch="2.12.1", transformers=MATRIX.latest_transformers)
    assert s.installs and all(
        i[:3] == ("--no-index", "--find-links", str(tmp_path)) for i in s.installs
    )
    installed = [a for args in s.installs for a in args]
    assert "torch==2.12.1" in installed and MATRIX.incident_tokenizers not in installed
    args, _ = _pytest_run(s)
    assert args[4:6] == ("-k", "race") and "--racegate-devices" in args


def test_undecided_exit_is_the_gates(noxfile: ModuleType) -> None:
    """nox_support.py imports no judge (nox's interpreter has only nox), so it spells
    UNDECIDED's exit itself: the gate's."""
    from racegate.harness.judge.gate import EXIT_CODES, Word

    assert noxfile.support.UNDECIDED_EXIT == EXIT_CODES[Word.UNDECIDED] == 7
    assert (EXIT_CODES[Word.SAFE], EXIT_CODES[Word.UNDECIDED]) == noxfile.support.CELL_OK_CODES


def test_a_cell_judges_and_reports_only_its_own_invocation(
    noxfile: ModuleType, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A rerun of a cell starts a fresh records file: the earlier run's file is kept beside
    it under a name neither the verdict nor the report reads (`*.jsonl` only), so a rerun's
    report never says per_device "UNSAFE 1/8" from the run before."""
    from racegate.harness.judge.inputs import record_files

    monkeypatch.setattr(noxfile.support, "RESULTS_DIR", tmp_path / "results")
    monkeypatch.setattr(noxfile.support, "TORCH_DIR", tmp_path / "_torch")
    monkeypatch.setenv("RACEGATE_WHEELHOUSE", str(tmp_path))
    name = "cpu_matrix(torch='2.12.1', transformers='5.24.0')"
    cell = tmp_path / "results" / "cpu_matrix-torch-2.12.1-transformers-5.24.0"
    cell.mkdir(parents=True)
    (cell / "records.jsonl").write_text('{"an": "earlier run"}\n')
    s = FakeSession(name, gpus=0)
    noxfile.cpu_matrix(s, torch="2.12.1", transformers=MATRIX.latest_transformers)
    assert not (cell / "records.jsonl").exists()
    (kept,) = cell.glob("records-*.jsonl.prev")
    assert kept.read_text() == '{"an": "earlier run"}\n' and record_files([cell]) == []
    assert any("earlier run's records kept" in line for line in s.logs)
    args, kw = _pytest_run(s)
    assert kw["success_codes"] == [0, 7] and f"--racegate-results={cell / 'records.jsonl'}" in args


def _cpu_cell(noxfile: ModuleType, purelib: Path, torch: str, tf: str) -> FakeSession:
    s = FakeSession(f"cpu_matrix(torch={torch!r}, transformers={tf!r})", gpus=0, purelib=purelib)
    noxfile.cpu_matrix(s, torch=torch, transformers=tf)
    return s


def _torch_installs(s: FakeSession) -> list[tuple[str, ...]]:
    return [i for i in s.installs if any(a.startswith("torch") for a in i)]


@pytest.fixture
def shared(noxfile: ModuleType, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The shared torch folder of a fresh runner: results and torch under tmp, online."""
    monkeypatch.setattr(noxfile.support, "RESULTS_DIR", tmp_path / "results")
    monkeypatch.setattr(noxfile.support, "TORCH_DIR", tmp_path / "_torch")
    monkeypatch.delenv("RACEGATE_WHEELHOUSE", raising=False)
    monkeypatch.delenv("RACEGATE_TORCH_INDEX_URL", raising=False)
    return tmp_path / "_torch"


def test_cpu_matrix_installs_each_torch_once_and_reruns_install_nothing(
    noxfile: ModuleType, shared: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RACEGATE_TORCH_INDEX_URL", "https://download.pytorch.org/whl/cpu")
    old, latest = MATRIX.incident_transformers[0], MATRIX.latest_transformers
    folder = noxfile.support.shared_torch_folder("2.12.1", "https://download.pytorch.org/whl/cpu")
    # Another index's build of the same release (CPU wheels vs PyPI's CUDA) has its own folder.
    assert folder.parent == shared and folder != noxfile.support.shared_torch_folder("2.12.1", None)

    first = _cpu_cell(noxfile, tmp_path / "venv-old", "2.12.1", old)
    assert _torch_installs(first) == [
        ("--index-url", "https://download.pytorch.org/whl/cpu",
         "--target", str(folder.with_name(folder.name + ".partial")), "torch==2.12.1"),
    ]  # fmt: skip
    assert noxfile.support.torch_release_in(folder) == "2.12.1"
    assert not folder.with_name(folder.name + ".partial").exists()
    cell_installs = [i for i in first.installs if i not in _torch_installs(first)]
    assert len(cell_installs) == 1 and "--index-url" not in cell_installs[0]
    assert {f"transformers=={old}", MATRIX.incident_tokenizers} <= set(cell_installs[0])
    pth = tmp_path / "venv-old" / "racegate-torch.pth"
    assert pth.read_text() == f"{folder.absolute()}\n"
    _pytest_run(first)

    # Another transformers on the same torch: its own venv, the shared torch, no torch install.
    second = _cpu_cell(noxfile, tmp_path / "venv-latest", "2.12.1", latest)
    assert _torch_installs(second) == [] and len(second.installs) == 1
    assert (tmp_path / "venv-latest" / "racegate-torch.pth").read_text() == pth.read_text()

    # A rerun of a cell whose venv nox kept: nothing installed, the suite still runs.
    rerun = _cpu_cell(noxfile, tmp_path / "venv-old", "2.12.1", old)
    assert rerun.installs == []
    _pytest_run(rerun)

    # The same venv asked for other packages (here: offline from a wheelhouse) installs again.
    monkeypatch.setenv("RACEGATE_WHEELHOUSE", str(tmp_path))
    changed = _cpu_cell(noxfile, tmp_path / "venv-old", "2.12.1", old)
    assert len(changed.installs) == 1 and changed.installs[0][0] == "--no-index"


def test_cpu_matrix_shared_torch_is_checked_and_never_half_installed(
    noxfile: ModuleType, shared: Path, tmp_path: Path
) -> None:
    tf = MATRIX.latest_transformers

    # A folder named 2.14.1 that holds another torch is an error, not reused or overwritten.
    FakeSession("seed").install("--target", str(shared / "2.14.1"), "torch==2.13.0")
    with pytest.raises(AssertionError, match=r"holds torch 2\.13\.0, not 2\.14\.1"):
        _cpu_cell(noxfile, tmp_path / "venv", "2.14.1", tf)

    # A leftover of an interrupted install is removed and the install redone.
    leftover = shared / "2.10.0.partial"
    FakeSession("seed").install("--target", str(leftover), "torch==2.10.0")
    (leftover / "half-written").write_text("")
    s = _cpu_cell(noxfile, tmp_path / "venv", "2.10.0", tf)
    assert _torch_installs(s) == [("--target", str(leftover), "torch==2.10.0")]
    assert not (shared / "2.10.0" / "half-written").exists() and not leftover.exists()

    # An install that leaves no torch behind (`nox --no-install`, a pip that did nothing).
    class NoInstall(FakeSession):
        def install(self, *args: str, **kwargs: Any) -> None:
            self.installs.append(args)

    with pytest.raises(AssertionError, match="left torch nothing"):
        noxfile.cpu_matrix(
            NoInstall("cpu", gpus=0, purelib=tmp_path / "v2"), torch="2.11.0", transformers=tf
        )
    assert not (shared / "2.11.0").exists()

    # pip refusing (this CPU image's pip constraint caps torch at 2.14.1) names the way out.
    class Capped(FakeSession):
        def install(self, *args: str, **kwargs: Any) -> None:
            if "torch==2.15.0" in args:
                raise noxfile.nox.command.CommandFailed("ResolutionImpossible")
            super().install(*args, **kwargs)

    with pytest.raises(AssertionError, match="PIP_CONSTRAINT=/dev/null"):
        noxfile.cpu_matrix(
            Capped("cpu", gpus=0, purelib=tmp_path / "v3"), torch="2.15.0", transformers=tf
        )
    assert not (shared / "2.15.0").exists()

    # The cell's Python must import the torch it asked for: a torch that landed in the venv
    # itself (pulled in by some dependency) shadows the shared one, and fails the cell.
    FakeSession("dep", purelib=tmp_path / "venv").install("torch==2.9.0")
    with pytest.raises(AssertionError, match=r"asked torch 2\.10\.0.*got 2\.9\.0"):
        _cpu_cell(noxfile, tmp_path / "venv", "2.10.0", tf)


def test_gpu_matrix_stops_without_a_gpu(
    noxfile: ModuleType, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    """A host without a GPU: the cell stops the whole nox run (exit 2, one line) instead of
    skipping (28 skipped cells and exit 0); a torch that sees no GPU fails its cell."""
    monkeypatch.setattr(noxfile.shutil, "which", lambda _: None)
    with pytest.raises(SystemExit) as stopped:
        noxfile.gpu_matrix(FakeSession("gpu"), torch="2.11.0", transformers="5.8.1")
    assert stopped.value.code == 2
    err = capsys.readouterr().err
    assert "needs an NVIDIA GPU" in err and "nvidia-smi not found" in err
    assert len(err.strip().splitlines()) == 1, err
    monkeypatch.setattr(noxfile.shutil, "which", lambda _: "/usr/bin/nvidia-smi")
    monkeypatch.delenv("RACEGATE_WHEELHOUSE", raising=False)
    with pytest.raises(AssertionError, match="sees no GPU"):  # FakeSession.error
        noxfile.gpu_matrix(FakeSession("gpu", gpus=0), torch="2.11.0", transformers="5.8.1")


@pytest.mark.process
def test_nox_gpu_matrix_without_a_gpu_exits_2_and_makes_no_venv(tmp_path: Path) -> None:
    """The real nox, with no nvidia-smi on PATH: it stops at the first cell, before any venv."""
    envdir = tmp_path / "nox-envs"
    proc = subprocess.run(
        [sys.executable, "-m", "nox", "-f", str(NOXFILE), "--envdir", str(envdir),
         "-s", "gpu_matrix"],
        capture_output=True, text=True, timeout=120,
        env={**os.environ, "PATH": str(Path(sys.executable).parent)},
    )  # fmt: skip
    assert proc.returncode == 2, proc.stdout + proc.stderr
    ours = [line for line in proc.stderr.splitlines() if line.startswith("racegate:")]
    assert len(ours) == 1 and "needs an NVIDIA GPU" in ours[0], proc.stderr
    assert proc.stderr.count("Running session") == 1, proc.stderr  # no second cell
    assert not envdir.exists()


@pytest.mark.parametrize(
    "var",
    ["RACEGATE_RACE_WORKERS", "RACEGATE_CASE_JOBS", "RACEGATE_CONTROL_REPEAT"],
    ids=["workers", "case-jobs", "control-repeat"],  # no "race" in an id (test_plugin)
)
def test_a_bad_cell_setting_stops_the_cell_before_it_installs_or_skips(
    noxfile: ModuleType, var: str, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    """Read first: on the xdist path they were read after the install and the throughput part
    had run, so a typo cost a cell's install and its throughput cases first."""
    monkeypatch.setenv(var, "eight")
    monkeypatch.setattr(noxfile.shutil, "which", lambda _: None)  # would skip: no GPU
    session = FakeSession("gpu")
    with pytest.raises(SystemExit) as exc:
        noxfile.gpu_matrix(session, torch="2.11.0", transformers="5.8.1")
    assert exc.value.code == 2 and f"{var}='eight'" in capsys.readouterr().err
    assert session.installs == [] and session.runs == []


def test_report_session_reads_the_results_dir(
    noxfile: ModuleType, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(noxfile.support, "RESULTS_DIR", tmp_path / "none")
    with pytest.raises(Skip, match="no results"):
        noxfile.report(FakeSession("report"))
    monkeypatch.setattr(noxfile.support, "RESULTS_DIR", tmp_path)
    monkeypatch.delenv("RACEGATE_WHEELHOUSE", raising=False)
    s = FakeSession("report")
    noxfile.report(s)
    args = s.runs[-1][0]
    assert args[:4] == ("python", "-m", "racegate", "report") and str(tmp_path) in args
    assert str(tmp_path / "report") in args


@pytest.mark.parametrize(
    ("var", "minimum"),
    [("RACEGATE_RACE_WORKERS", 1), ("RACEGATE_CASE_JOBS", 1), ("RACEGATE_CONTROL_REPEAT", 1),
     ("RACEGATE_AB_RUNS", 2)],
    # Ids without "race": `pytest -k race` must select the race cases only (test_plugin).
    ids=["workers", "case-jobs", "control-repeat", "ab-runs"],
)  # fmt: skip
def test_every_integer_setting_is_read_by_one_reader(
    noxfile: ModuleType,
    var: str,
    minimum: int,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Each RACEGATE_* integer of the noxfile goes through env_int: a bad value is one line
    naming the variable, its value and what is allowed, and exit 2."""
    source = NOXFILE.read_text() + SUPPORT.read_text()
    assert f'"{var}"' in source and f'os.environ.get("{var}"' not in source  # no reader of its own
    for bad in ("x", "-1", "1.5", "²", str(minimum - 1)):
        monkeypatch.setenv(var, bad)
        with pytest.raises(SystemExit) as exc:
            noxfile.support.env_int(var, 5, minimum=minimum, what="a count")
        assert exc.value.code == 2
        err = capsys.readouterr().err.strip()
        assert err == f"nox: error: {var}={bad!r}: expected a count, an integer ≥ {minimum}"
    monkeypatch.setenv(var, f" {minimum} ")
    assert noxfile.support.env_int(var, 5, minimum=minimum, what="a count") == minimum
    monkeypatch.setenv(var, "")
    assert noxfile.support.env_int(var, 5, minimum=minimum, what="a count") == 5


class JUnitWritingSession(FakeSession):
    """pytest's stand-in also writes its --junitxml, with `failures` failed cases (None: none
    written, as when pytest-timeout ends pytest with os._exit)."""

    failures: int | None = 0
    # Per JUnit file name, over `failures` (read-only here: a test sets its own).
    failures_in: Mapping[str, int | None] = MappingProxyType({})

    def run(self, *args: str, **kwargs: Any) -> str | None:
        junit = next((a.split("=", 1)[1] for a in args if a.startswith("--junitxml=")), None)
        failures = self.failures_in.get(Path(junit).name, self.failures) if junit else None
        if junit and failures is not None:
            Path(junit).write_text(
                f'<testsuites><testsuite name="pytest" failures="{failures}" errors="0"/>'
                "</testsuites>"
            )
        return super().run(*args, **kwargs)


def test_gpu_cell_with_workers_runs_throughput_alone_then_the_rest_side_by_side(
    noxfile: ModuleType, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(noxfile.support, "RESULTS_DIR", tmp_path)
    monkeypatch.setattr(noxfile.shutil, "which", lambda _: "/usr/bin/nvidia-smi")
    monkeypatch.delenv("RACEGATE_WHEELHOUSE", raising=False)
    monkeypatch.setenv("RACEGATE_RACE_WORKERS", "16")
    name = "gpu_matrix(torch='system', transformers='5.8.1')"
    s = JUnitWritingSession(name, ["--racegate-repeat", "3"])
    noxfile.gpu_matrix(s, torch="system", transformers="5.8.1")
    runs = [r for r in s.runs if r[0][:3] == ("python", "-m", "pytest")]
    (tp, tp_kw), (race, race_kw) = runs
    assert tp[3:6] == ("racegate/cases", "-m", "throughput") and "-n" not in tp
    assert tp_kw["success_codes"] == [0, 1, 5]  # a throughput failure must not skip the races
    # The race cases in one pytest, the production strategy's among them (its case follows
    # the control's rate as the control's runs land), judging the records it writes itself;
    # UNDECIDED (7) is evidence for the report, not a failed cell.
    assert race[3:9] == (
        "racegate/cases",
        "-m",
        "not throughput",
        "-n",
        "16",
        "--racegate-share-gpus",
    )
    assert not any(a.startswith("--records-from") for a in race)
    assert race_kw["success_codes"] == [0, 1, 5, 7]
    cell = tmp_path / "gpu_matrix-torch-system-transformers-5.8.1"
    assert f"--junitxml={cell / 'junit-throughput.xml'}" in tp
    assert f"--junitxml={cell / 'junit-race.xml'}" in race
    # A failed throughput case fails the cell, after the race part has run.
    s = JUnitWritingSession(name, ["--racegate-repeat", "3"])
    s.failures = 1
    with pytest.raises(AssertionError, match="1 race case"):
        noxfile.gpu_matrix(s, torch="system", transformers="5.8.1")
    assert len([r for r in s.runs if r[0][:3] == ("python", "-m", "pytest")]) == 2
    # The throughput half alone failed: the cell fails for it, after the race cases ran.
    s = JUnitWritingSession(name, ["--racegate-repeat", "3"])
    s.failures_in = {"junit-throughput.xml": 1}
    with pytest.raises(AssertionError, match="1 throughput case"):
        noxfile.gpu_matrix(s, torch="system", transformers="5.8.1")
    assert len([r for r in s.runs if r[0][:3] == ("python", "-m", "pytest")]) == 2
    # pytest died without a JUnit file: a failure, never a pass read from an old file.
    s = JUnitWritingSession(name, ["--racegate-repeat", "3"])
    s.failures = None
    with pytest.raises(AssertionError, match="wrote no readable"):
        noxfile.gpu_matrix(s, torch="system", transformers="5.8.1")
    for bad in ("sixteen", "0"):
        monkeypatch.setenv("RACEGATE_RACE_WORKERS", bad)
        with pytest.raises(SystemExit) as exc:
            noxfile.gpu_matrix(FakeSession("gpu"), torch="system", transformers="5.8.1")
        assert exc.value.code == 2
    # A user's -m narrows both halves instead of replacing the split.
    monkeypatch.setenv("RACEGATE_RACE_WORKERS", "4")
    for marker_args in (["-m", "not slow"], ["-m=not slow"], ["-mnot slow"]):
        s = JUnitWritingSession("gpu", [*marker_args, "--racegate-repeat", "1"])
        noxfile.gpu_matrix(s, torch="system", transformers="5.8.1")
        (tp, _), (race, _) = [r for r in s.runs if r[0][:3] == ("python", "-m", "pytest")]
        assert tp[4:6] == ("-m", "(not slow) and throughput") and tp[-2:] == (
            "--racegate-repeat",
            "1",
        )
        assert race[4:6] == ("-m", "(not slow) and not throughput")
        assert not any("not slow" in a for a in race[6:])


def test_a_cell_leaves_to_pytest_whether_its_marker_selects_a_throughput_case(
    noxfile: ModuleType, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`-m "not throughput"` selects no throughput case: pytest, which owns the -m grammar,
    finds none and exits 5, which the cell accepts; the race part still runs and the cell
    passes on its JUnit files."""
    monkeypatch.setattr(noxfile.support, "RESULTS_DIR", tmp_path)
    monkeypatch.setattr(noxfile.shutil, "which", lambda _: "/usr/bin/nvidia-smi")
    monkeypatch.delenv("RACEGATE_WHEELHOUSE", raising=False)
    monkeypatch.setenv("RACEGATE_RACE_WORKERS", "8")
    s = JUnitWritingSession("gpu", ["-m", "not throughput", "--racegate-repeat", "3"])
    noxfile.gpu_matrix(s, torch="system", transformers="5.8.1")
    (tp, tp_kw), (race, _) = [r for r in s.runs if r[0][:3] == ("python", "-m", "pytest")]
    assert tp[4:6] == ("-m", "(not throughput) and throughput") and 5 in tp_kw["success_codes"]
    assert race[4:6] == ("-m", "(not throughput) and not throughput")


@pytest.mark.process
def test_cells_are_picked_by_their_tags() -> None:
    """`-k` keywords must be identifiers: the tags make a single cell selectable."""
    out = subprocess.run(
        [sys.executable, "-m", "nox", "-f", str(NOXFILE), "-l", "--json",
         "-k", "torch_system and transformers_5_8_1"],
        capture_output=True, text=True, check=True, cwd=ROOT,
    )  # fmt: skip
    picked = [s["session"] for s in json.loads(out.stdout)]
    assert picked == ["gpu_matrix(torch='system', transformers='5.8.1')"]


def test_xdist_workers_default_to_the_host_and_the_env_var_overrides(
    noxfile: ModuleType, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    gib = 2**30
    rule = noxfile.support.host_race_workers
    assert rule is sizing.host_race_workers  # one rule: the nox cells size as bootstrap.py does
    assert rule(32, 2, 150_000_000_000) == 12  # 2xH200, 32 cores: the cores bound
    assert rule(16, 1, 150_000_000_000) == 6  # one H200, 16 cores
    assert rule(64, 1, 24 * gib) == 2  # a 24 GiB GPU holds two cases
    assert rule(64, 2, 0) == 24  # memory unknown: the cores bound alone
    assert rule(1, 1, 8 * gib) == 1  # never below one
    monkeypatch.setattr(noxfile.support, "RESULTS_DIR", tmp_path)
    monkeypatch.setattr(noxfile.shutil, "which", lambda _: "/usr/bin/nvidia-smi")
    monkeypatch.delenv("RACEGATE_WHEELHOUSE", raising=False)
    monkeypatch.delenv("RACEGATE_RACE_WORKERS", raising=False)

    def xdist_args(cores: int, **session: Any) -> list[tuple[str, ...]]:
        monkeypatch.setattr(noxfile.os, "sched_getaffinity", lambda _: set(range(cores)))
        s = JUnitWritingSession("gpu", ["--racegate-repeat", "1"], **session)
        noxfile.gpu_matrix(s, torch="system", transformers="5.8.1")
        runs = [r[0] for r in s.runs if r[0][:3] == ("python", "-m", "pytest")]
        return [r[r.index("-n") : r.index("-n") + 2] for r in runs if "-n" in r]

    assert xdist_args(32, gpus=2) == [("-n", "12")]  # the race cases
    assert xdist_args(64, gpus=1, gpu_bytes=24 * gib) == [("-n", "2")]
    assert xdist_args(4, gpus=1, gpu_bytes=8 * gib) == []  # one worker: cases one by one
    monkeypatch.setenv("RACEGATE_RACE_WORKERS", "3")
    assert xdist_args(32, gpus=2) == [("-n", "3")]


@pytest.mark.process
def test_runs_write_under_the_state_folder_unless_told_otherwise(tmp_path: Path) -> None:
    def results_dir(**env: str) -> Path:
        code = f"import runpy; print(runpy.run_path({str(NOXFILE)!r})['support'].RESULTS_DIR)"
        environ = {k: v for k, v in os.environ.items() if k != "RACEGATE_RESULTS_DIR"}
        out = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, check=True,
            cwd=tmp_path, env={**environ, **env},
        )  # fmt: skip
        return Path(out.stdout.strip())

    default = results_dir()
    assert default.parent == ROOT / ".racegate" / "results"
    assert not default.is_relative_to(ROOT / "results")  # results/ gets only what is committed
    assert tmp_path / "mine" == results_dir(RACEGATE_RESULTS_DIR=str(tmp_path / "mine"))


@pytest.mark.process
def test_no_uv_noise_where_uv_is_absent(noxfile: ModuleType, tmp_path: Path) -> None:
    """nox probes for uv whenever it makes a venv; without uv that logged "uv binary not found"."""
    assert noxfile.nox.options.default_venv_backend == "virtualenv"
    assert "uv" not in noxfile.support.SYSTEM_SITE["venv_backend"]
    code = (
        "import io, logging, runpy, sys; runpy.run_path(sys.argv[1]); "
        "out = io.StringIO(); log = logging.getLogger('nox'); "
        "log.addHandler(logging.StreamHandler(out)); log.setLevel(logging.DEBUG); "
        "import nox.virtualenv as v; v._optional_venvs(); print(repr(out.getvalue()))"
    )
    env = {"PATH": str(Path(sys.executable).parent), "HOME": str(tmp_path)}  # no uv on it
    out = subprocess.run(
        [sys.executable, "-c", code, str(NOXFILE)],
        capture_output=True, text=True, check=True, cwd=tmp_path, env=env,
    )  # fmt: skip
    assert out.stdout.strip() == "''", out.stdout


@pytest.mark.process
def test_the_noxfile_loads_on_an_interpreter_with_nox_alone(tmp_path: Path) -> None:
    """The nightly's jobs run nox on the runner's own python3, which has nox and nothing of
    racegate's dependencies: the noxfile and nox_support.py import none of them."""
    code = (
        "import runpy, sys; runpy.run_path(sys.argv[1]); "
        "print(sorted({m.split('.')[0] for m in sys.modules} & set(sys.argv[2:])))"
    )
    heavy = ["torch", "transformers", "pytest", "numpy", "rich", "matplotlib", "yaml"]
    out = subprocess.run(
        [sys.executable, "-c", code, str(NOXFILE), *heavy],
        capture_output=True, text=True, check=True, cwd=tmp_path,
    )  # fmt: skip
    assert out.stdout.strip() == "[]", out.stdout


@pytest.mark.process
def test_report_path_imports_no_torch(tmp_path: Path) -> None:
    """`nox -s report` installs no torch, so `python -m racegate report` must not import it."""
    from racegate.harness.run.record import (
        Hardware,
        RunRecord,
        ThreadRecord,
        Versions,
        append_jsonl,
    )
    from racegate.harness.scenario.spec import Scenario

    scenario = Scenario(preset="tiny", threads_per_device=2)
    done = scenario.warmup_steps + scenario.steps
    threads = [ThreadRecord(i, "cpu", "ok", steps_done=done) for i in range(2)]
    append_jsonl(
        tmp_path / "records.jsonl",
        RunRecord(
            scenario=scenario, outcome="ok", outcome_counts={"ok": 2}, threads=threads,
            threads_asked=2, threads_concurrent=2,
            versions=Versions(torch="2.13.0", transformers="5.17.0"), hardware=Hardware(),
        ),
    )  # fmt: skip
    code = (
        "import sys; from racegate.harness.doors.cli import main; "
        f"rc = main(['report', {str(tmp_path)!r}, '--out-dir', {str(tmp_path / 'out')!r}]); "
        "print(rc, sorted({m.split('.')[0] for m in sys.modules} & {'torch', 'transformers'}))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT
    )
    rc, imported = out.stdout.strip().splitlines()[-1].split(" ", 1)
    # One clean run and no control: UNDECIDED, the report's exit its code.
    assert (tmp_path / "out" / "gate.json").is_file() and rc == "7"
    assert imported == "[]", f"the report path imported {imported}"


def test_gpu_ab_cells_mirror_gpu_matrix_and_stay_out_of_its_selections(
    noxfile: ModuleType, listed: list[dict[str, Any]], monkeypatch: pytest.MonkeyPatch
) -> None:
    cells = [s for s in listed if s["name"] == "gpu_ab"]
    matrix = [s for s in listed if s["name"] == "gpu_matrix"]
    assert {(s["call_spec"]["torch"], s["call_spec"]["transformers"]) for s in cells} == {
        (s["call_spec"]["torch"], s["call_spec"]["transformers"]) for s in matrix
    }
    one = next(s for s in cells if s["session"] == "gpu_ab(torch='system', transformers='5.8.1')")
    assert one["tags"] == ["ab_system", "ab_5_8_1"]
    # No gpu_matrix keyword is a substring of an A/B tag (nox -k matches substrings), so a
    # gpu_matrix selection never runs an A/B, and the A/B tags pick the A/B cell alone.
    for cell in cells:
        for tag in cell["tags"]:
            assert not any(t in tag for m in matrix for t in m["tags"]), tag
    out = subprocess.run(
        [sys.executable, "-m", "nox", "-f", str(NOXFILE), "-l", "--json",
         "-k", "ab_system and ab_5_8_1"],
        capture_output=True, text=True, check=True, cwd=ROOT,
    )  # fmt: skip
    assert [s["session"] for s in json.loads(out.stdout)] == [one["session"]]
    assert "gpu_ab" not in noxfile.nox.options.sessions  # never a default session
    # The nightly fans out gpu_matrix cells only: its plan has no A/B cell in it.
    spec = importlib.util.spec_from_file_location("nightly_plan", ROOT / "scripts/nightly_plan.py")
    assert spec and spec.loader
    plan = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, "nightly_plan", plan)  # its dataclasses look it up
    spec.loader.exec_module(plan)
    assert {c.session for c in plan.list_cells()} == {s["session"] for s in matrix}


class ABSession(JUnitWritingSession):
    """A gpu_ab cell's stand-in: installs into the reference venv go through its pip (recorded
    apart), its probes answer from those installs, and `racegate.harness.ab compare` writes `answer`
    as the ab.json it is asked for (None: writes nothing)."""

    def __init__(self, name: str, bin_dir: Path, answer: dict[str, Any] | None) -> None:
        super().__init__(name)
        self.bin, self.answer = str(bin_dir), answer
        self.ref_installs: list[tuple[str, ...]] = []
        self.ref_transformers: str | None = None  # what its probe reports (None: what it got)

    def run(self, *args: str, **kwargs: Any) -> str | None:
        if args[:2] == ("python", "-m") and args[2] == "racegate.harness.ab":
            self.runs.append((args, kwargs))
            if self.answer is not None:
                Path(args[args.index("--out") + 1]).write_text(json.dumps(self.answer))
            return None
        if args[0] != "python" and args[0].endswith("/bin/python"):  # the reference venv
            self.runs.append((args, kwargs))
            if args[1:4] == ("-m", "pip", "install"):
                self.ref_installs.append(args[4:])
            elif args[1:3] == (
                "-m",
                "racegate.harness.scenario.versions",
            ):  # check_versions of the reference
                tf = next(a for i in self.ref_installs for a in i if a.startswith("transformers"))
                got = self.ref_transformers or tf.removeprefix("transformers==")
                found = {"torch": "2.11.0+cu130", "transformers": got}
                return json.dumps(found) + "\n"
            elif "find_spec('torch')" in args[-1]:
                return "True\n"
            return None
        return super().run(*args, **kwargs)


def _ab_answer(
    change: str = "no significant change", failure: str | None = None, interrupted: bool = False
) -> Any:
    comp = {"ratio": 0.9 if change == "lower" else 1.0, "low": 0.88, "high": 0.92}
    throughput = {**comp, "change": change}
    return {
        "failure": failure,
        "throughput": throughput,
        "memory": None,
        "interrupted": interrupted,
    }


def test_gpu_ab_builds_both_sides_and_fails_only_on_a_regression(
    noxfile: ModuleType, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(noxfile.support, "RESULTS_DIR", tmp_path / "results")
    monkeypatch.setattr(noxfile.shutil, "which", lambda _: "/usr/bin/nvidia-smi")
    for var in ("RACEGATE_WHEELHOUSE", "RACEGATE_AB_REFERENCE", "RACEGATE_AB_RUNS"):
        monkeypatch.delenv(var, raising=False)
    name = "gpu_ab(torch='system', transformers='5.8.1')"
    cand_bin = tmp_path / ".nox" / "gpu_ab-torch-system-transformers-5-8-1" / "bin"
    s = ABSession(name, cand_bin, _ab_answer())
    noxfile.gpu_ab(s, torch="system", transformers="5.8.1")
    # The candidate: the cell's own venv, as gpu_matrix builds it.
    assert "transformers==5.8.1" in [a for args in s.installs for a in args]
    # The reference: a venv of its own beside the cell's, with the production pins.
    ref = tmp_path / ".nox" / "gpu_ab-reference-system-5.6.0"
    made = next(r[0] for r in s.runs if "virtualenv" in r[0])
    assert made[-2:] == ("--system-site-packages", str(ref))
    ref_pins = [a for args in s.ref_installs for a in args]
    assert "transformers==5.6.0" in ref_pins and MATRIX.incident_tokenizers in ref_pins
    assert not any(a.startswith("torch") for a in ref_pins)  # torch 'system': the image's
    # The reference's versions are checked through its own Python, as a cell's are.
    probes = [r[0] for r in s.runs if r[0][1:3] == ("-m", "racegate.harness.scenario.versions")]
    assert [p[0] for p in probes] == ["python", str(ref / "bin" / "python")]
    wrong = ABSession(name, cand_bin, _ab_answer())
    wrong.ref_transformers = "5.8.1"  # the reference venv imports another transformers
    got = r"asked torch system, transformers 5\.6\.0; got 2\.11\.0\+cu130 5\.8\.1"
    with pytest.raises(AssertionError, match=got):
        noxfile.gpu_ab(wrong, torch="system", transformers="5.8.1")
    (cmd, kw), *_ = [r for r in s.runs if r[0][:3] == ("python", "-m", "racegate.harness.ab")]
    assert cmd[3:6] == ("compare", "--reference", str(ref / "bin" / "python"))
    assert cmd[cmd.index("--candidate") + 1] == str(cand_bin / "python")
    cell = tmp_path / "results" / "gpu_ab-torch-system-transformers-5.8.1"
    assert cmd[cmd.index("--out") + 1] == str(cell / "ab.json")
    assert cmd[cmd.index("--records") + 1] == str(cell / "ab-records")
    assert cmd[cmd.index("--runs") + 1] == "5"
    assert cmd[cmd.index("--") + 1 :] == noxfile.support.AB_RUN_ARGS
    # exit 1, and 130 (interrupted before its call), are read from ab.json, with their reason
    assert kw["success_codes"] == [0, 1, 130] == [EXIT_SAFE, EXIT_UNSAFE, EXIT_INTERRUPTED]
    # An interrupt leaves racegate.harness.ab time to stop and write ab.json (nox's default is 0.3
    # s).
    assert kw["interrupt_timeout"] >= 30
    # Faster is no failure; slower, a failed run, or no result fails the cell, saying why.
    noxfile.gpu_ab(ABSession(name, cand_bin, _ab_answer("higher")), "system", "5.8.1")
    for answer, message in (
        (_ab_answer("lower"), r"candidate slower: 0\.900x \[0\.880, 0\.920\]"),
        (_ab_answer(failure="candidate run 2 of 5: outcome hang"), "A/B failed.*run 2 of 5"),
        (
            _ab_answer(failure="interrupted after 4 of 10 runs", interrupted=True),
            r"A/B interrupted before its call \(no decision\): interrupted after 4 of 10",
        ),
        (None, "wrote no readable"),
    ):
        with pytest.raises(AssertionError, match=message):
            noxfile.gpu_ab(ABSession(name, cand_bin, answer), "system", "5.8.1")
    # posargs replace the default run options; the environment picks the reference and runs.
    monkeypatch.setenv("RACEGATE_AB_REFERENCE", "2.11.0,5.17.0")
    monkeypatch.setenv("RACEGATE_AB_RUNS", "9")
    s = ABSession(name, cand_bin, _ab_answer())
    s.posargs = ["--preset", "qwen3-8b-drafter", "--steps", "3"]
    noxfile.gpu_ab(s, torch="system", transformers="5.8.1")
    (cmd, _), *_ = [r for r in s.runs if r[0][:3] == ("python", "-m", "racegate.harness.ab")]
    assert cmd[cmd.index("--") + 1 :] == ("--preset", "qwen3-8b-drafter", "--steps", "3")
    assert cmd[cmd.index("--runs") + 1] == "9"
    assert "gpu_ab-reference-2.11.0-5.17.0" in cmd[cmd.index("--reference") + 1]
    assert "torch==2.11.0" in [a for args in s.ref_installs for a in args]
    monkeypatch.setenv("RACEGATE_AB_REFERENCE", "5.6.0")
    with pytest.raises(AssertionError, match="expected '<torch>,<transformers>'"):
        noxfile.gpu_ab(ABSession(name, cand_bin, _ab_answer()), "system", "5.8.1")
    monkeypatch.delenv("RACEGATE_AB_REFERENCE")
    monkeypatch.setenv("RACEGATE_AB_RUNS", "1")
    s = ABSession(name, cand_bin, _ab_answer())
    with pytest.raises(SystemExit):  # a usage error (exit 2), before anything is installed
        noxfile.gpu_ab(s, "system", "5.8.1")
    assert s.installs == [] and s.runs == []
    monkeypatch.delenv("RACEGATE_AB_RUNS")
    monkeypatch.setattr(noxfile.shutil, "which", lambda _: None)
    with pytest.raises(Skip, match="nvidia-smi"):
        noxfile.gpu_ab(ABSession(name, cand_bin, _ab_answer()), "system", "5.8.1")
