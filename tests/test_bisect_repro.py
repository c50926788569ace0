"""`python -m racegate repro`'s reproducers (racegate.harness.doors.bisection.repro) and the
bisect/repro command lines: standalone, short, and they exit as the torch in hand says; bad input
exits 2."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from packaging.version import Version

from racegate.harness.doors.bisection import repro
from racegate.harness.doors.bisection.evidence import Runner
from racegate.harness.doors.cli import main
from racegate.harness.judge.gate import EXIT_USAGE
from racegate.harness.run import envs

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.process
@pytest.mark.parametrize("probe", sorted(repro.TEMPLATES))
def test_each_reproducer_is_standalone_and_short(probe: str) -> None:
    text = repro.render(probe, "  (results)", "r.py")
    assert len(text.splitlines()) <= repro.MAX_LINES
    tree = ast.parse(text)
    imported = {
        (n.module or "") if isinstance(n, ast.ImportFrom) else a.name
        for n in ast.walk(tree)
        if isinstance(n, ast.Import | ast.ImportFrom)
        for a in n.names
    }
    assert all(m.split(".")[0] in {"sys", "threading", "torch", "gc"} for m in imported), imported
    assert ast.get_docstring(tree)


@pytest.mark.process
def test_the_nested_fx_reproducer_exits_as_this_torch_says() -> None:
    here = Runner(envs.current())
    code, last = repro.run_text(repro.render("compiled_call_during_make_fx", ""), here)
    thread_local_flag = Version(torch.__version__).release >= (2, 14)
    assert code == (repro.EXIT_CLEAN if thread_local_flag else repro.EXIT_HAZARD), last
    assert torch.__version__ in last


@pytest.mark.process
def test_verified_refuses_a_pair_that_does_not_differ() -> None:
    here = Runner(envs.current())
    ok, _, report = repro.verified("compiled_call_during_make_fx", here, here)
    assert not ok and "want 0" in report and "want 1" in report


@pytest.mark.parametrize(
    "argv",
    [
        ["bisect", "--torch", "2.10"],
        ["bisect", "--torch", "2.10..2.15", "--transformers", "5.6.0..5.8.1"],
        ["bisect", "--torch", "2.15..2.10", "--releases", "2.10.0,2.15.0"],
        ["bisect", "--torch", "2.10..2.15", "--releases", "2.13.0"],
        ["bisect", "--torch", "2.10..2.15", "--probe", "nope", "--releases", "2.10.0,2.11.0"],
        ["repro", "--probe", "nope", "--bad", "2.13.0", "--good", "2.14.0", "--out", "r.py"],
    ],
)
def test_bad_bisect_and_repro_input_exits_2(argv: list[str], capsys) -> None:
    assert main(argv) == EXIT_USAGE
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("racegate: error:")


@pytest.mark.process
def test_bisect_help_runs() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "racegate", "bisect", "--help"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0 and "--probes-only" in done.stdout
