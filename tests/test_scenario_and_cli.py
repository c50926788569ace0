"""Scenario validation and the CLI's usage errors: one line naming the value, exit code 2."""

from __future__ import annotations

import hashlib
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from racegate.harness.doors.cli import main
from racegate.harness.judge.summary import failure_lines, format_table, summarise
from racegate.harness.run.record import Hardware, RunRecord, ThreadRecord, Versions
from racegate.harness.scenario.spec import make_scenario, parse_devices, scenario_key
from racegate.harness.scenario.vocab import CacheState, Strategy


def test_make_scenario_parses_strings() -> None:
    sc = make_scenario(strategy="warmup", cache_state="warm", devices="0,1", threads_per_device=2)
    assert sc.strategy is Strategy.WARMUP and sc.cache_state is CacheState.WARM
    assert sc.devices == ("cuda:0", "cuda:1") and sc.threads == 4 and sc.uses_cuda
    assert make_scenario(**sc.to_json()) == sc


def test_one_scenario_key_for_labels_records_and_summaries() -> None:
    """The format records, summaries and committed results are keyed by: it must not move."""
    sc = make_scenario(strategy="warmup", cache_state="warm", devices="0,1", threads_per_device=2)
    assert sc.label() == "tiny/warmup/warm/barrier/cuda:0,cuda:1×2"
    assert scenario_key(sc) == sc.label()
    record = _record("ok")
    assert summarise([record])[0].key == scenario_key(record.scenario)


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"strategy": "magic"}, "unknown strategy 'magic'; choose from: per_device, singleton"),
        ({"cache_state": "lukewarm"}, "unknown cache state 'lukewarm'; choose from: cold, warm"),
        ({"schedule": "random"}, "unknown schedule 'random'"),
        ({"devices": "gpu0"}, "unknown devices entry 'gpu0'"),
        ({"devices": "cpu,0"}, "mixes cpu and GPUs"),
        ({"devices": "0,0"}, "names a device twice"),
        ({"threads_per_device": 0}, "threads per device must be ≥ 1"),
        ({"steps": -1}, "steps must be ≥ 1"),
        ({"timeout_s": 0}, "timeout must be > 0"),
        ({"colour": "red"}, "unknown scenario field"),
    ],
)
def test_bad_scenarios_name_the_value(fields: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message.replace("(", r"\(")):
        make_scenario(**fields)


def test_parse_devices() -> None:
    assert parse_devices("cuda") == ("cuda:0",)
    assert parse_devices(["cuda:1", "2"]) == ("cuda:1", "cuda:2")


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (["run", "--strategy", "magic"], "--strategies: strategy 'magic' is not a strategy of"),
        (["run", "--cache-state", "hot"], "unknown cache state 'hot'"),
        (["run", "--preset", "huge"], "--preset 'huge': unknown preset 'huge'; choose from: tiny"),
        (["run", "--devices", "7"], "names GPUs but this machine has none"),
        (["run", "--threads-per-device", "x"], "--threads-per-device 'x': expected positive"),
        (["run", "--repeat", "0"], "--repeat must be ≥ 1"),
        (["run", "--timeout", "0"], "--run-timeout must be > 0"),
        (["run", "--switch-interval", "-1"], "--switch-interval must be > 0"),
        # Python's sys.setswitchinterval turns inf into 0: refused, with the range.
        (
            ["run", "--switch-interval", "inf"],
            "--switch-interval must be > 0 and ≤ 1 (seconds), got inf",
        ),
        (
            ["run", "--switch-interval", "nan"],
            "--switch-interval must be > 0 and ≤ 1 (seconds), got nan",
        ),
        (
            ["run", "--switch-interval", "5"],
            "--switch-interval must be > 0 and ≤ 1 (seconds), got 5",
        ),
        (["run", "--schedule", "barrier,recompile"], "--schedule takes one value"),
        (["run", "--workload", "nowhere.at_all:make"], "cannot import 'nowhere.at_all'"),
        (["run", "--workload", "tests.fault_workloads:make_incomplete"], "missing method"),
        (["run", "--workload", "no_colon"], "expected a string 'package.module:factory'"),
        (["bogus"], "invalid choice: 'bogus'"),
        (["run", "--strategy", ","], "--strategies is empty"),
        (["run", "--out", "/"], "is a folder"),
        (["run", "--results", "/proc/no/such.jsonl"], "cannot be written"),
        (["probe", "--only", "nonexistent_probe"], "unknown probe 'nonexistent_probe'"),
        (["probe", "--timeout", "0"], "--timeout must be > 0 seconds"),
    ],
)
def test_cli_usage_errors_exit_2(
    argv: list[str], needle: str, capsys: pytest.CaptureFixture
) -> None:
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert needle in err
    assert len(err.strip().splitlines()) == 1, err
    assert "Traceback" not in err


@pytest.mark.process
def test_cli_entry_point_exit_code() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "racegate", "run", "--strategy", "nope"],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 2
    assert proc.stderr.startswith("racegate: error: --strategies: strategy 'nope' is not a")


@pytest.mark.parametrize(
    ("env", "needle"),
    [
        ("fast", "production strategy 'fast' (from env RACEGATE_PRODUCTION_STRATEGY) is not a "
         "strategy of workload 'dflash-tiny'; it has: per_device"),
        ("", None),
    ],
)  # fmt: skip
def test_cli_checks_the_production_strategy(
    env: str, needle: str | None, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    monkeypatch.setenv("RACEGATE_PRODUCTION_STRATEGY", env)
    # A bad --strategies stops an otherwise good invocation after the roles are checked.
    assert main(["run", "--strategies", "nope"]) == 2
    err = capsys.readouterr().err
    if needle:
        assert needle in err
    else:
        assert "--strategies: strategy 'nope'" in err


def test_cli_and_pytest_share_names_and_defaults() -> None:
    """Every pytest run option is a `harness run` option too; the old spellings still parse."""
    from racegate.harness.doors import options
    from racegate.harness.doors.cli import build_parser

    old = ["--strategy", "warmup", "--cache-state", "warm", "--timeout", "9", "--out", "r.jsonl"]
    args = build_parser().parse_args(["run", *old])
    assert (args.strategies, args.cache_states, args.run_timeout, args.results) == (
        "warmup", "warm", 9.0, "r.jsonl",
    )  # fmt: skip
    args = build_parser().parse_args(["run"])
    cli = options.resolve(vars(args), gpus=0, for_cli=True)
    suite = options.resolve({}, gpus=0, for_cli=False)
    assert cli.schedule == suite.schedule == "recompile"
    assert cli.switch_interval == suite.switch_interval == options.SWITCH_INTERVAL_S
    assert cli.strategies == (cli.production,)  # the CLI measures what ships
    assert cli.production in suite.strategies
    same = ("devices", "cache_states", "preset", "repeat", "workload")
    assert all(getattr(cli, f) == getattr(suite, f) for f in same)
    # The race cases run 3 threads a device (the control fires there), `run` what a run is
    # asked: 2 on a CPU, 1 and 2 on a GPU.
    assert (cli.threads_per_device, suite.threads_per_device) == ((2,), (3,))
    gpu = [options.resolve({}, gpus=1, for_cli=c).threads_per_device for c in (True, False)]
    assert gpu == [(1, 2), (1, 3)]


def test_pytest_spells_every_option_with_its_prefix() -> None:
    """pytest gets --racegate-… for every option of the table (a project's own --devices never
    clashes); the front doors that hand pytest their arguments translate the short names."""
    from racegate.harness.doors import options, race_exit, sizing

    table = (*options.SHARED, *options.PYTEST_ONLY)
    assert all(
        options.pytest_flag(o.flag).startswith(("--racegate-", "--no-racegate-")) for o in table
    )
    assert options.PYTEST_FLAGS["--devices"] == "--racegate-devices"
    assert options.PYTEST_FLAGS["--decision-file"] == race_exit.FLAG
    assert options.PYTEST_FLAGS["--share-gpus"] == sizing.SHARE_GPUS
    given = ["--devices", "0", "--repeat=5", "--timeout", "9", "--racegate-stall=3", "-k", "race",
             "--no-racegate-gate", "--records-from=a", "--out", "x"]  # fmt: skip
    assert options.to_pytest(given) == [
        "--racegate-devices", "0", "--racegate-repeat=5",
        "--timeout", "9",  # pytest-timeout's, never `racegate run`'s old alias
        "--racegate-stall=3", "-k", "race", "--no-racegate-gate", "--racegate-records-from=a",
        "--out", "x",  # an alias of `racegate run` only
    ]  # fmt: skip
    said = options.pytest_words("--control-max 2 is below --control-repeat 4 (--records-from)")
    assert said == "--racegate-control-max 2 is below --racegate-control-repeat 4 " + (
        "(--racegate-records-from)"
    )


ENTRY = Path(__file__).resolve().parent.parent / "bootstrap.py"


@pytest.mark.process
def test_entry_script_without_a_command_prints_usage() -> None:
    proc = subprocess.run([sys.executable, str(ENTRY)], capture_output=True, text=True)
    assert proc.returncode == 2
    assert proc.stderr.startswith("usage: python3 bootstrap.py {race,test,lint}")


@pytest.mark.process
def test_entry_script_tests_the_torch_of_the_python_that_runs_it() -> None:
    """A python with torch, transformers and the pytest plugins (a GPU host's image): its own
    versions, said first; no venv made, nothing installed."""
    from importlib.metadata import version

    env = {k: v for k, v in os.environ.items() if not k.startswith("RACEGATE_")}
    proc = subprocess.run(
        [sys.executable, str(ENTRY), "race", "--version"], capture_output=True, text=True, env=env
    )
    assert proc.returncode == 0, proc.stderr
    first = proc.stdout.splitlines()[0]
    tested = f"torch {version('torch')}, transformers {version('transformers')}, python"
    assert first.startswith(f"racegate: testing {tested}"), first
    assert f"({sys.executable};" in first
    assert "making" not in proc.stderr and "installing" not in proc.stderr, proc.stderr


@pytest.mark.process
def test_entry_script_reuses_a_ready_env(tmp_path: Path) -> None:
    """An env whose stamp matches requirements/ci.txt is used as is: nothing is installed."""
    env = tmp_path / "env"
    (env / "bin").mkdir(parents=True)
    python = env / "bin" / "python"  # this interpreter, with its packages, in the env's place
    python.write_text(f'#!/bin/sh\nexec {shlex.quote(sys.executable)} "$@"\n')
    python.chmod(0o755)
    wanted = hashlib.sha256((ENTRY.parent / "requirements" / "ci.txt").read_bytes()).hexdigest()
    (env / ".racegate-requirements").write_text(wanted + "\n")
    proc = subprocess.run(
        [sys.executable, str(ENTRY), "test", "--version"],
        capture_output=True, text=True, env={**os.environ, "RACEGATE_VENV": str(env)},
        timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "installing" not in proc.stderr and "making the environment" not in proc.stderr
    assert f"racegate: {env}/bin/python -m pytest -n 2" in proc.stderr
    assert "pytest" in proc.stdout + proc.stderr


def _ready_env(tmp_path: Path) -> Path:
    """An env whose stamp matches requirements/ci.txt: this interpreter in the env's place, and
    the actionlint next to it."""
    env = tmp_path / "env"
    (env / "bin").mkdir(parents=True)
    python = env / "bin" / "python"
    python.write_text(f'#!/bin/sh\nexec {shlex.quote(sys.executable)} "$@"\n')
    python.chmod(0o755)
    actionlint = Path(sys.executable).parent / "actionlint"
    if not actionlint.exists():
        pytest.skip(f"no actionlint beside {sys.executable} (requirements/ci.txt installs it)")
    (env / "bin" / "actionlint").symlink_to(actionlint)
    wanted = hashlib.sha256((ENTRY.parent / "requirements" / "ci.txt").read_bytes()).hexdigest()
    (env / ".racegate-requirements").write_text(wanted + "\n")
    return env


@pytest.mark.process
def test_lint_path_runs_ruff_on_python_and_actionlint_on_workflows_only(tmp_path: Path) -> None:
    env = _ready_env(tmp_path)
    bad = tmp_path / "bad.py"
    bad.write_text("import os\n")  # F401: an unused import
    workflow = ENTRY.parent / ".github" / "workflows" / "nightly-gpu.yml"

    def lint(*paths: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, str(ENTRY), "lint", *paths], capture_output=True, text=True,
            env={**os.environ, "RACEGATE_VENV": str(env)}, timeout=300, cwd=tmp_path,
        )  # fmt: skip

    proc = lint("bad.py")  # relative to where it is called from, not to the checkout
    assert proc.returncode == 1, proc.stderr
    assert "F401" in proc.stdout and "bad.py" in proc.stdout, proc.stdout
    assert f"-m ruff check --force-exclude {bad}" in proc.stderr
    assert "bin/actionlint" not in proc.stderr
    proc = lint(str(workflow))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "-m ruff" not in proc.stderr and f"actionlint -no-color {workflow}" in proc.stderr
    readme = str(ENTRY.parent / "README.md")
    for args, message in ((["--fix"], "paths, not options"), (["nope"], "no such file"),
                          ([readme], "neither")):  # fmt: skip
        proc = lint(*args)
        assert proc.returncode == 2 and message in proc.stderr, proc.stderr
        assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr


@pytest.mark.parametrize("expected", ["hazard", "safe"])
@pytest.mark.process
def test_probe_exits_1_when_a_verdict_moved(
    expected: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    """is_compiling_leak shows its hazard on torch ≥ 2.13 (the probe really runs): a table that
    says `safe` there must fail the command, the true one must pass it."""
    import torch

    from racegate.harness.judge import probe_expectations

    if probe_expectations.release(torch.__version__) < probe_expectations.release("2.13"):
        pytest.skip(f"is_compiling_leak is safe on torch {torch.__version__}")
    table = tmp_path / "probes.toml"
    table.write_text(
        f'[[probe]]\nname = "is_compiling_leak"\ntorch = ">=2.13"\nverdict = "{expected}"\n'
        'reason = "a table for this test"\nsource = "tests/test_scenario_and_cli.py"\n'
    )
    real_load = probe_expectations.load
    monkeypatch.setattr(probe_expectations, "load", lambda path=table: real_load(path))
    code = main(["probe", "--only", "is_compiling_leak", "--timeout", "30"])
    out = capsys.readouterr().out
    assert all(len(line) <= 100 for line in out.splitlines()), out
    assert "expected" in out.splitlines()[1]
    if expected == "hazard":
        matched = "1 of 1 probes match racegate's probes.toml"
        assert code == 0 and out.rstrip().endswith(matched)
    else:
        assert code == 1 and "probe is_compiling_leak moved: expected safe, saw hazard" in out
        assert "FAIL: 0 of 1 probes match" in out


def _record(outcome: str, detail: str | None = None, error: str | None = None) -> RunRecord:
    scenario = make_scenario(strategy="per_device", schedule="recompile")
    done = scenario.warmup_steps + scenario.steps
    threads = [ThreadRecord(index=0, device="cpu", outcome=outcome, error=error, steps_done=done)]
    if outcome == "ok":  # an ok run's every thread reported, ok (racegate.harness.run.record)
        threads.append(ThreadRecord(index=1, device="cpu", outcome=outcome, steps_done=done))
    return RunRecord(
        scenario=scenario,
        outcome=outcome,
        outcome_counts={outcome: len(threads)},
        threads=threads,
        threads_asked=2,
        threads_concurrent=2,
        versions=Versions(torch="2.13.0", transformers="5.17.0"),
        hardware=Hardware(device_name="cpu"),
        tokens_per_s=1234.5 if outcome == "ok" else None,
        detail=detail,
    )


def test_summary_shows_a_crash_by_the_end_of_its_stderr() -> None:
    """A crashed child's stderr starts with unrelated warnings; its end holds the error."""
    noise = ["UserWarning: TypedStorage is deprecated " * 3, "warnings.warn(", "more noise"]
    error = ["Traceback (most recent call last):", '  File "x.py", line 1', "MemoryError: boom"]
    stderr = "\n".join([*noise, *error])
    crash = _record("crash", detail=f"crash: child killed by signal 9 (SIGKILL); stderr: {stderr}")
    other = _record("other_error", error="ValueError: the replica refused shape 3")
    records = [_record("ok"), crash, other]
    lines = format_table(summarise(records), records)
    text = "\n".join(lines)
    assert "stderr: MemoryError: boom" in text and "TypedStorage" not in text
    assert "why: crash: child killed by signal 9 (SIGKILL)" in text
    assert "error: ValueError: the replica refused shape 3" in text
    assert lines[-1] == "runs: 2 of 3 failed (crash 1, other_error 1)"
    ok = [_record("ok")]
    assert format_table(summarise(ok), ok)[-1] == "runs: 1 of 1 ok"
    assert failure_lines(ok[0]) == []


def test_report_without_records_reads_the_latest_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    from racegate.harness.run import state
    from racegate.harness.run.record import append_jsonl

    monkeypatch.chdir(tmp_path)  # a checkout of its own: no pyproject.toml above tmp_path
    assert main(["report"]) == 2
    assert "no records given and none under" in capsys.readouterr().err
    older, newer = state.new_run(tmp_path), state.new_run(tmp_path)
    append_jsonl(older, _record("crash"))
    # newer has no record yet: the older run is the latest; per_device only: nothing gated
    assert main(["report"]) == 7
    assert (older.parent / "report" / "matrix.md").is_file()
    append_jsonl(newer, _record("ok"))
    baselines = str(ENTRY.parent / "baselines")
    assert main(["report", "--baselines", baselines]) == 7
    assert (newer.parent / "report" / "matrix.md").is_file()
    assert f"reporting the latest run, {newer}" in capsys.readouterr().err


@pytest.mark.process
def test_run_prints_table_failure_and_verdict_on_stdout(tmp_path: Path) -> None:
    """A real crashed child (SIGABRT): the table on stdout shows its stderr's end, its count
    line, the records' path, then the verdict block; eager is UNSAFE, but the production
    strategy did not run, so the decision and the exit code are UNDECIDED's (7)."""
    out = tmp_path / "runs.jsonl"
    proc = subprocess.run(
        [sys.executable, "-m", "racegate", "run",
         "--workload", "tests.fault_workloads:make_workload", "--preset", "abort",
         "--strategies", "eager", "--steps", "2", "--run-timeout", "120", "--results", str(out)],
        cwd=ENTRY.parent, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 7, proc.stderr[-2000:]
    lines = proc.stdout.splitlines()
    assert lines[0].startswith("scenario ") and "tiny" not in proc.stdout
    assert any(ln.startswith("abort/eager/cold/recompile/cpu×2 ") for ln in lines), proc.stdout
    assert any(ln.startswith("    why: child killed by SIGABRT") for ln in lines), proc.stdout
    # The child's own last words (it had no other stderr reliably: a torch warning it printed
    # once per process was all, and CI once ran without it).
    assert "    stderr: fault: thread 0 aborts at its 2nd step" in lines, proc.stdout
    assert "runs: 1 of 1 failed (crash 1)" in lines
    assert f"records: {out}" in lines
    verdict = lines[lines.index(f"records: {out}") + 1 :]
    decision = [ln for ln in verdict if not ln.startswith(" ")][-1]  # its last, wrapped, line
    assert "racegate verdict" in verdict[0] and decision.startswith("UNDECIDED: run warmup_locked")
    assert any(ln.split()[:2] == ["UNSAFE", "eager:"] for ln in verdict), verdict
