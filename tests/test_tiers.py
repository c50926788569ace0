"""The test tiers (tests/conftest.py): a unit test that starts a child process fails, naming the
tier it belongs to, even where the code under test swallows the refusal; a marked test runs;
`bootstrap.py test --fast` runs the unit tier."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import SimpleNamespace

import pytest

pytest_plugins = ["pytester"]

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.process  # its pytester session is a child process
def test_a_unit_test_that_starts_a_child_process_fails_and_names_its_tier(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PYTHONPATH", str(ROOT))
    pytester.makeconftest("pytest_plugins = ['tests.conftest']")
    pytester.makepyfile(
        """
        import multiprocessing
        import subprocess

        import pytest

        def test_spawns():
            subprocess.run(["true"], check=True)

        def test_swallows_the_refusal():
            try:
                subprocess.run(["true"])
            except BaseException:
                pass

        def test_starts_a_multiprocessing_child():
            ctx = multiprocessing.get_context("spawn")
            ctx.Process(target=print).start()

        @pytest.mark.process
        def test_marked():
            subprocess.run(["true"], check=True)

        def test_pure():
            assert sum(range(4)) == 6
        """
    )
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-p", "no:xdist")
    result.assert_outcomes(passed=2, failed=3)
    result.stdout.fnmatch_lines(
        [
            "*test_spawns is a unit test but calls Popen._execute_child*",
            "*test_swallows_the_refusal is a unit test but called Popen._execute_child*",
        ]
    )
    assert "pytest.mark.process" in result.stdout.str()


def test_entry_script_test_fast_runs_the_unit_tier(monkeypatch: pytest.MonkeyPatch) -> None:
    spec = importlib.util.spec_from_file_location("bootstrap_entry", ROOT / "bootstrap.py")
    assert spec and spec.loader
    entry = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(entry)
    commands: list[list[str]] = []

    def run(command: list[str], cwd: Path | None = None, **probe: object) -> SimpleNamespace:
        if probe:  # the line saying which torch it tests (capture_output): not a step
            return SimpleNamespace(returncode=0, stdout="torch ?", stderr="")
        commands.append(command)
        return SimpleNamespace(returncode=0)

    monkeypatch.setattr(entry, "ensure_env", lambda *_: Path("/venv/bin/python"))
    monkeypatch.setattr(entry, "_run", run)  # its subprocess.run, children dying with it
    assert entry.main(["test", "--fast", "-x"]) == 0
    assert entry.main(["test", "-x"]) == 0
    fast, every = commands
    assert every == ["/venv/bin/python", *entry.COMMANDS["test"][0], "-x"]
    assert fast == [*every[:-1], "tests", "-m", "not process and not fault", "-n", "0", "-x"]
