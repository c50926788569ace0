"""The root conftest as a plugin, exercised with pytester: options, markers, skips, bad input,
where records land."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from racegate.cases.session import RacegateConfig
from racegate.harness.scenario import env_names
from racegate.harness.scenario.vocab import Schedule, Strategy

# Every test here starts child processes: the process tier (tests/conftest.py).
pytestmark = pytest.mark.process

pytest_plugins = ["pytester"]
ROOT = Path(__file__).resolve().parent.parent


# A workload that fits the interface without importing torch, so each pytester session starts
# in a second (the plugin imports the workload at start-up to check it and its preset).
LIGHT_WORKLOAD = """
class Light:
    name = "light"
    def strategies(self): return ["per_device", "warmup", "warmup_locked", "sdpa_dense"]
    def shapes(self): return [1, 2]
    def make_replica(self, device, strategy, *, seed): raise NotImplementedError
    def flops_per_step(self, shape): return None

def make_workload(preset="tiny"):
    if preset not in ("tiny", "small"):
        raise ValueError(f"unknown preset {preset!r}; choose from: tiny, small")
    return Light()
"""


def _plugin(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    """The root conftest in a pytester folder, with the light workload."""
    pytester.makeconftest((ROOT / "conftest.py").read_text())
    pytester.makepyfile(light_workload=LIGHT_WORKLOAD)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    monkeypatch.setenv("RACEGATE_WORKLOAD", "light_workload:make_workload")


@pytest.fixture
def suite(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> pytest.Pytester:
    """A project that asks for racegate in every session (its addopts name a racegate option:
    the plugin acts), on a CPU-only machine."""
    _plugin(pytester, monkeypatch)
    pytester.makeini("[pytest]\naddopts = --racegate-devices=cpu\n")
    monkeypatch.setenv("PATH", "/nonexistent")  # no nvidia-smi: a CPU-only machine
    pytester.makepyfile(
        """
        import pytest

        @pytest.mark.gpu
        def test_needs_gpu():
            assert False, "must never run without a GPU"

        @pytest.mark.multi_gpu
        def test_needs_two():
            assert False

        def test_cpu(racegate_config):
            assert racegate_config.devices == ("cpu",)
            assert racegate_config.repeat == 1 and racegate_config.preset == "tiny"
        """
    )
    return pytester


def test_gpu_cases_skip_with_a_reason(suite: pytest.Pytester) -> None:
    result = suite.runpytest_subprocess("-rs", "--strict-markers", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=1, skipped=2)
    result.stdout.fnmatch_lines(["*needs a CUDA GPU; this machine has none*"])
    result.stdout.fnmatch_lines(["*needs ≥ 2 CUDA GPUs; this machine has 0*"])


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ["--racegate-strategies", "fast"],
            "strategy 'fast' is not a strategy of workload 'light'; it has",
        ),
        (["--racegate-cache-states", "hot"], "unknown cache state 'hot'"),
        (["--racegate-schedule", "random"], "unknown schedule 'random'"),
        (["--racegate-threads-per-device", "two"], "expected positive integers"),
        (["--racegate-devices", "0"], "names GPUs but this machine has none"),
        (["--racegate-repeat", "0"], "--racegate-repeat must be ≥ 1"),
        (
            ["--racegate-control-max", "2"],
            "--racegate-control-max 2 is below --racegate-control-repeat 4",
        ),
        (["--racegate-power-cap", "0"], "--racegate-power-cap must be ≥ 1, got 0"),
        (["--racegate-switch-interval", "0"], "--racegate-switch-interval must be > 0"),
        (["--racegate-run-timeout", "-5"], "--racegate-run-timeout must be > 0"),
        (["--racegate-workload", "nowhere.at_all:make"], "cannot import 'nowhere.at_all'"),
        (["--racegate-workload", "tests.fault_workloads:make_incomplete"], "missing method"),
        (
            ["--racegate-workload", "no_colon"],
            "workload 'no_colon' (from --racegate-workload) is not an import",
        ),
        (
            ["--racegate-preset", "huge"],
            "--racegate-preset 'huge': unknown preset 'huge'; choose from: tiny, small",
        ),
        (
            ["--racegate-results", "."],
            "--racegate-results '.' is a folder; give a .jsonl file path",
        ),
        (
            ["--racegate-results", "/proc/no/such.jsonl"],
            "--racegate-results '/proc/no/such.jsonl' cannot be written",
        ),
    ],
    # no "race" in an id (test_keyword_selection_of_the_main_job_is_exact)
    ids=lambda v: v[0].removeprefix("--racegate-") if isinstance(v, list) else "",
)
def test_bad_options_are_usage_errors(
    suite: pytest.Pytester, args: list[str], message: str
) -> None:
    result = suite.runpytest_subprocess(*args, "-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"ERROR: racegate: *{message}*"])
    assert "Traceback" not in result.stderr.str()
    assert not (suite.path / ".racegate").exists()  # nothing ran, nothing was made


def test_a_bad_workload_names_where_it_came_from(
    suite: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RACEGATE_WORKLOAD", "nowhere.at_all:make")
    result = suite.runpytest_subprocess("-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["ERROR: racegate: *cannot import*(from env RACEGATE_WORKLOAD)"])


@pytest.mark.parametrize(
    ("table", "message"),
    [
        (
            "workload = 3",
            "[tool.racegate] workload is 3; expected a string like 'racegate.model.workload:",
        ),
        (
            'production_strategy = "fast"',
            "production strategy 'fast' (from pyproject [tool.racegate]) is not a strategy of",
        ),
        ("production_strategy = 5", "[tool.racegate] production_strategy is 5; expected a string"),
        ("colour = 'red'", "unknown [tool.racegate] key(s) ['colour']"),
    ],
    ids=["workload-int", "strategy-unknown", "strategy-int", "unknown-key"],
)
def test_bad_project_settings_are_usage_errors(
    suite: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, table: str, message: str
) -> None:
    monkeypatch.delenv("RACEGATE_WORKLOAD")  # the pyproject value must be the one read
    suite.makefile(".toml", pyproject=f"[tool.racegate]\n{table}\n")
    result = suite.runpytest_subprocess("-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert result.stderr.str().startswith("ERROR: racegate: ")
    assert message in result.stderr.str()
    assert len(result.stderr.str().strip().splitlines()) == 1, result.stderr.str()


def test_help_lists_the_options(suite: pytest.Pytester) -> None:
    """`pytest --help` is where the README sends users: it must print, % signs and all."""
    result = suite.runpytest_subprocess("--help")
    assert result.ret == 0, result.stderr.str()
    result.stdout.fnmatch_lines(
        ["racegate: cross-thread compile race gate:", "*--racegate-run-timeout*"]
    )
    assert "40-80% of the time" in result.stdout.str()


def test_records_land_in_a_private_run_folder(suite: pytest.Pytester) -> None:
    """Without --results every session's records go to .racegate/runs/<run>/records.jsonl, one
    file shared by all xdist workers; a session that records nothing leaves no folder."""
    suite.makepyfile(
        test_writes="""
        import pytest

        @pytest.mark.parametrize("n", range(4))
        def test_append(racegate_config, n):
            with racegate_config.results.open("a") as fh:
                fh.write('{"n": %d}\\n' % n)
        """
    )
    result = suite.runpytest_subprocess("-p", "no:cacheprovider", "-n", "2", "test_writes.py")
    result.assert_outcomes(passed=4)
    runs = list((suite.path / ".racegate" / "runs").iterdir())
    assert len(runs) == 1, runs
    for folder in (suite.path / ".racegate", runs[0].parent, runs[0]):
        assert stat.S_IMODE(folder.stat().st_mode) == 0o700, folder
    lines = (runs[0] / "records.jsonl").read_text().splitlines()
    assert sorted(json.loads(ln)["n"] for ln in lines) == [0, 1, 2, 3]
    suite.runpytest_subprocess("-p", "no:cacheprovider", "-k", "test_cpu").assert_outcomes(
        passed=1, deselected=6
    )
    assert list((suite.path / ".racegate" / "runs").iterdir()) == runs  # none added
    mine = suite.path / "mine" / "runs.jsonl"  # --results: that file, no run folder
    suite.runpytest_subprocess(
        "-p", "no:cacheprovider", "test_writes.py", f"--racegate-results={mine}"
    )  # fmt: skip
    assert len(mine.read_text().splitlines()) == 4
    assert list((suite.path / ".racegate" / "runs").iterdir()) == runs


def test_plugin_fixture_names_are_not_keywords(suite: pytest.Pytester) -> None:
    """`-k race` must not pick a test because of the plugin's racegate_config fixture: what it
    selects is the race suite the plugin adds (racegate/cases/), nothing of the project's."""
    result = suite.runpytest_subprocess(
        "-p", "no:cacheprovider", "--collect-only", "-q", "-k", "race"
    )
    assert "test_cpu" not in result.stdout.str()
    selected = [line for line in result.stdout.lines if "::" in line]
    assert selected and all(line.startswith("test_race") for line in selected), selected


def test_keyword_selection_of_the_main_job_is_exact() -> None:
    """Users run `pytest -k race`: every item it selects must be a race-marked case."""
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider",
         "-k", "race", "-m", "not race"],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert proc.returncode == pytest.ExitCode.NO_TESTS_COLLECTED, proc.stdout[-3000:]


def test_run_timeout_only_shortens_a_cases_share() -> None:
    fields = dict(
        gpus=0, devices=("cpu",), threads_per_device=(2,), cache_states=(), strategies=(),
        schedule=Schedule.RECOMPILE, switch_interval=1e-5, stall=15.0, preset="tiny", repeat=1,
        results=None, workload="racegate.model.workload:make_workload", production=Strategy.WARMUP,
        expectations=[], versions={},
    )  # fmt: skip
    assert RacegateConfig(run_timeout=None, **fields).run_timeout_within(240) == 240
    assert RacegateConfig(run_timeout=90, **fields).run_timeout_within(240) == 90
    assert RacegateConfig(run_timeout=500, **fields).run_timeout_within(240) == 240


@pytest.mark.parametrize("share", [False, True], ids=["sliced", "shared"])
def test_xdist_workers_slice_or_share_the_gpus(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, share: bool
) -> None:
    """A stand-in nvidia-smi lists two GPUs; no test here touches CUDA."""
    _plugin(pytester, monkeypatch)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    bin_dir = pytester.mkdir("bin")
    smi = bin_dir / "nvidia-smi"
    smi.write_text("#!/bin/sh\n" + "".join(f"echo 'GPU {i}: NVIDIA H200'\n" for i in (0, 1)))
    smi.chmod(0o755)
    monkeypatch.setenv("PATH", os.pathsep.join([str(bin_dir), os.environ["PATH"]]))
    pytester.makepyfile(
        f"""
        import os
        import pytest

        @pytest.mark.gpu
        def test_worker_sees(racegate_config):
            assert racegate_config.gpus == {2 if share else 1}
            assert racegate_config.overlapping  # its records: timings void

        @pytest.mark.multi_gpu
        def test_sees_both(racegate_config):
            assert racegate_config.gpus == 2

        @pytest.mark.gpu
        @pytest.mark.throughput
        def test_timed():
            assert False, "timings are void beside other workers: must skip"
        """
    )
    args = ["-rs", "-p", "no:cacheprovider", "-n", "2", "--racegate-devices", "0,1"]
    result = pytester.runpytest_subprocess(*args, *(["--racegate-share-gpus"] if share else []))
    result.stdout.fnmatch_lines(["*pytest-xdist runs other cases on this host*"])
    if share:
        result.assert_outcomes(passed=2, skipped=1)
    else:  # each worker sees one GPU: the two-GPU case skips
        result.assert_outcomes(passed=1, skipped=2)
        result.stdout.fnmatch_lines(["*needs ≥ 2 CUDA GPUs; this machine has 1*"])


def test_a_path_option_in_two_words_that_moved_the_rootdir_is_refused(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, tmp_path_factory
) -> None:
    """pytest picks its rootdir from the command line's existing paths before any plugin's
    options are known: `--racegate-results sub/r.jsonl` made sub/ the rootdir. The plugin loaded
    as an installed one is (`-p`, as the entry point does) refuses that; `--racegate-results=` is
    one word."""
    pytester.makepyfile(light_workload=LIGHT_WORKLOAD)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    monkeypatch.setenv("RACEGATE_WORKLOAD", "light_workload:make_workload")
    monkeypatch.setenv("PATH", "/nonexistent")
    pytester.makepyfile(test_cpu="def test_cpu(racegate_config):\n    assert True\n")
    records = tmp_path_factory.mktemp("elsewhere") / "r.jsonl"
    records.write_text("")
    common = ["-p", "racegate.cases.plugin", "-p", "no:cacheprovider"]
    two = pytester.runpytest_subprocess(*common, "--racegate-results", str(records))
    assert two.ret == pytest.ExitCode.USAGE_ERROR
    two.stderr.fnmatch_lines(
        [f"*--racegate-results {records}: pytest took {records} for a test path*"]
    )
    one = pytester.runpytest_subprocess(*common, f"--racegate-results={records}")
    one.assert_outcomes(passed=1)


# A project of the user's own: its conftest defines --devices (as racegate's option was once
# spelled), and its test writes what its session sees to $SEEN.
OWN_CONFTEST = """
import os
from pathlib import Path

Path(os.environ["SEEN"] + ".conftest").write_text(os.environ.get("TMPDIR", ""))

def pytest_addoption(parser):
    parser.addoption("--devices", default="mine")
"""
OWN_TEST = """
import json, os, sys

def test_own(request):
    seen = {
        "devices": request.config.getoption("--devices"),
        "env": dict(os.environ),
        "modules": sorted(m for m in sys.modules if m.split(".")[0] in ("torch", "racegate")),
    }
    with open(os.environ["SEEN"], "w") as fh:
        json.dump(seen, fh)
"""


def _own_project(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, tmp_path_factory
) -> tuple[Path, Path]:
    """(the file its test writes, the TMPDIR it is given): racegate loaded as the entry point
    loads it (`-p`), no private root inherited, a workload that cannot import (a session that
    resolved it would fail)."""
    pytester.makeconftest(OWN_CONFTEST)
    pytester.makepyfile(test_own=OWN_TEST)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    monkeypatch.setenv("RACEGATE_WORKLOAD", "nowhere.at_all:make")
    monkeypatch.setenv("PATH", "/nonexistent")
    for var in (env_names.PRIVATE_ROOT, env_names.USER_ENV):
        monkeypatch.delenv(var, raising=False)
    tmp = tmp_path_factory.mktemp("user-tmp")
    monkeypatch.setenv("TMPDIR", str(tmp))
    seen = tmp_path_factory.mktemp("seen") / "seen.json"
    monkeypatch.setenv("SEEN", str(seen))
    return seen, tmp


def test_a_session_that_asks_nothing_is_left_alone(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, tmp_path_factory
) -> None:
    """A project's own pytest session, racegate installed: its --devices is its own, and
    racegate imports no torch and no workload, sets no variable, makes no file and prints
    nothing (it entered a private root, resolved the workload and claimed --devices once)."""
    seen, tmp = _own_project(pytester, monkeypatch, tmp_path_factory)
    given = dict(os.environ)
    result = pytester.runpytest_subprocess(
        "-p", "racegate.cases.plugin", "-p", "no:cacheprovider", "--devices", "theirs"
    )  # fmt: skip
    result.assert_outcomes(passed=1)
    inside = json.loads(seen.read_text())
    assert inside["devices"] == "theirs"
    assert "torch" not in inside["modules"], inside["modules"]
    assert "racegate.cases.race_session" not in inside["modules"], inside["modules"]
    assert "racegate.harness.run.private_root" not in inside["modules"], inside["modules"]
    changed = {k for k in {*given, *inside["env"]} if given.get(k) != inside["env"].get(k)}
    # pytest's own (the test's name), pytester's (its PYTHONPATH, its TMPDIR-less cache env)
    assert changed <= {"PYTEST_CURRENT_TEST", "PYTHONPATH", "COLUMNS", "LINES"}, changed
    assert inside["env"]["TMPDIR"] == str(tmp)
    pytesters = ("runpytest-", "stdout", "stderr")  # pytester's own files
    made = sorted(p.name for p in pytester.path.iterdir() if not p.name.startswith(pytesters))
    assert made == ["conftest.py", "test_own.py"]
    assert list(tmp.iterdir()) == []
    out = result.stdout.str() + result.stderr.str()
    assert "racegate:" not in out and "racegate verdict" not in out, out


def test_a_gating_selection_enters_its_root_before_the_projects_conftest(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, tmp_path_factory
) -> None:
    """`pytest -k race` asks for racegate: the private root is entered before the project's
    conftest is imported (it may import torch), and the project keeps its own --devices;
    --collect-only makes no run folder."""
    seen, tmp = _own_project(pytester, monkeypatch, tmp_path_factory)
    pytester.makepyfile(light_workload=LIGHT_WORKLOAD)
    monkeypatch.setenv("RACEGATE_WORKLOAD", "light_workload:make_workload")
    result = pytester.runpytest_subprocess(
        "-p", "racegate.cases.plugin", "-p", "no:cacheprovider", "-k", "race", "--collect-only",
        "-q", "--devices", "theirs", "--racegate-devices", "cpu",
    )  # fmt: skip
    assert result.ret == 0, result.stdout.str() + result.stderr.str()
    assert any("::test_race[" in line for line in result.stdout.lines), result.stdout.str()
    at_import = Path(str(seen) + ".conftest").read_text()
    assert Path(at_import).parent.name.startswith("racegate-root-"), at_import
    assert Path(at_import).is_relative_to(tmp), at_import
    assert not (pytester.path / ".racegate").exists()


def test_pytest_takes_no_short_option_names(suite: pytest.Pytester) -> None:
    """pytest spells every racegate option --racegate-…: the short one is no option of its."""
    result = suite.runpytest_subprocess("-p", "no:cacheprovider", "--repeat", "2")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*unrecognized arguments: --repeat*"])
