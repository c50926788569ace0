"""`--workload` loading: a broken user module or factory is one line (WorkloadError), no traceback.

A module with a syntax error, an import error inside it and a factory that
raised each ended in a traceback; a factory returning the wrong thing got past the checks.
"""

from __future__ import annotations

import itertools
import textwrap
from pathlib import Path

import pytest

from racegate.harness.doors import cli
from racegate.harness.scenario.workload_api import WorkloadError, WorkloadSpec, load_workload

GOOD = """
class W:
    name = "w"
    def strategies(self): return ["eager"]
    def shapes(self): return [0, 1]
    def make_replica(self, device, strategy, *, seed): return None
    def flops_per_step(self, shape): return None
"""
_names = itertools.count()


def module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, body: str) -> str:
    """A fresh module on sys.path holding `body`; its import name."""
    name = f"user_workload_{next(_names)}"
    (tmp_path / f"{name}.py").write_text(textwrap.dedent(body))
    monkeypatch.syspath_prepend(str(tmp_path))
    return name


@pytest.mark.parametrize(
    ("body", "needle"),
    [
        ("def make(preset=''):\n    return (\n", "importing '{m}' failed: SyntaxError: "),
        ("import no_such_package_xyz\n", "failed: ModuleNotFoundError: No module named 'no_such"),
        ("from os import no_such_name\n", "failed: ImportError: cannot import name 'no_such_name'"),
        ("raise RuntimeError('top-level boom')\n", "failed: RuntimeError: top-level boom"),
        ("def make(preset=''):\n    raise RuntimeError('no GPU here')\n",
         "factory make(preset='cpu') raised RuntimeError: no GPU here"),
        ("def make(preset=''):\n    return None\n", "returned NoneType, which has no attribute"),
        ("def make(preset=''):\n    return 'w'\n", "returned str, which has no attribute 'name'"),
        (GOOD.replace("return [0, 1]", "return 3") + "def make(preset=''): return W()\n",
         "shapes() returned 3; expected a list of bucket ids"),
        (GOOD.replace("return [0, 1]", "return []") + "def make(preset=''): return W()\n",
         "shapes() returned no bucket"),
        (GOOD.replace("return [0, 1]", "return 1 / 0") + "def make(preset=''): return W()\n",
         "shapes() raised ZeroDivisionError: division by zero"),
        (GOOD.replace('return ["eager"]', 'return "eager"') + "def make(preset=''): return W()\n",
         "strategies() returned 'eager'; expected a non-empty list of strategy names"),
        (GOOD.replace(", *, seed", "") + "def make(preset=''): return W()\n",
         "make_replica() must accept a 'seed' keyword"),
    ],
)  # fmt: skip
def test_broken_workloads_are_one_line_errors(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, body: str, needle: str
) -> None:
    name = module(tmp_path, monkeypatch, body)
    with pytest.raises(WorkloadError) as info:
        load_workload(WorkloadSpec(f"{name}:make", {"preset": "cpu"}))
    message = str(info.value)
    assert needle.format(m=name) in message and "\n" not in message
    exc = info.value  # no chained traceback behind the line
    assert exc.__cause__ is None and (exc.__context__ is None or exc.__suppress_context__)


def test_a_syntax_error_names_its_file_and_line(tmp_path: Path, monkeypatch) -> None:
    name = module(tmp_path, monkeypatch, "x = 1\ndef make(preset=''):\n    return (\n")
    with pytest.raises(WorkloadError, match=rf"{name}\.py, line 3\)"):
        load_workload(WorkloadSpec(f"{name}:make", {}))


def test_the_good_module_loads(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    name = module(tmp_path, monkeypatch, GOOD + "def make(preset=''): return W()\n")
    assert load_workload(WorkloadSpec(f"{name}:make", {"preset": "x"})).name == "w"


def test_the_cli_says_one_line_and_exits_2(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    name = module(tmp_path, monkeypatch, "def make(preset=''):\n    raise KeyError('tiny')\n")
    assert cli.main(["run", "--workload", f"{name}:make", "--devices", "cpu"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert "raised KeyError: 'tiny'" in err
