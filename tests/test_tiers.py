"""The test tiers (tests/conftest.py): a unit test that starts a child process fails, naming the
tier it belongs to, even where the code under test swallows the refusal; a marked test runs."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest_plugins = ["pytester"]
pytestmark = pytest.mark.process  # its pytester session is a child process

ROOT = Path(__file__).resolve().parent.parent


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
