"""Nothing outside racegate's own root, nothing through a link, nothing left by a killed runner.

Real subprocesses and real torch: each front door (`python -m racegate`, pytest with the plugin)
runs with a fresh, empty TMPDIR and HOME, and the test looks at what is left there.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from racegate.harness.doors.cli import main
from racegate.harness.judge.gate import DECIDED_EXITS as RUN_DECIDED
from racegate.harness.run import lifeline, private_root, stall, state

REPO = Path(__file__).resolve().parents[1]
FAULT = "tests.fault_workloads:make_workload"


def fresh_env(tmp_path: Path) -> tuple[dict[str, str], Path, Path]:
    """This environment less every variable racegate points into its root (this pytest process
    set them), with an empty TMPDIR and HOME of its own."""
    tmp, home = tmp_path / "tmp", tmp_path / "home"
    tmp.mkdir()
    home.mkdir()
    env = private_root.user_environ()
    for var in (*private_root.REDIRECTED, private_root.ENV_ROOT, private_root.ENV_USER):
        env.pop(var, None)
    env |= {"TMPDIR": str(tmp), "HOME": str(home), "PYTHONDONTWRITEBYTECODE": "1"}
    return env, tmp, home


def run_args(records: Path, preset: str = "ok", *extra: str) -> list[str]:
    return [
        sys.executable, "-m", "racegate", "run", "--workload", FAULT, "--preset", preset,
        "--strategies", "eager", "--steps", "2", "--warmup-steps", "1",
        "--results", str(records), *extra,
    ]  # fmt: skip


def left_in(*folders: Path) -> list[str]:
    return sorted(str(p) for folder in folders for p in folder.rglob("*"))


@pytest.mark.process
def test_loading_the_built_in_workload_leaves_nothing_in_tmpdir_or_home(tmp_path: Path) -> None:
    """The runner's checks load the built-in workload, whose import of torch._dynamo made
    <TMPDIR>/torchinductor_<user> (0755) in every run, even one refused as here."""
    env, tmp, home = fresh_env(tmp_path)
    argv = [sys.executable, "-m", "racegate", "run", "--preset", "tiny", "--strategies", "eager"]
    proc = subprocess.run(argv, env=env, cwd=REPO, capture_output=True, text=True)
    assert proc.returncode == 2 and "not a strategy of workload" in proc.stderr, proc.stderr
    assert left_in(tmp, home) == []


@pytest.mark.process
def test_the_probes_leave_nothing_in_tmpdir_or_home(tmp_path: Path) -> None:
    """`python -m racegate.harness.probes.runner` compiles in its own process: another front
    door."""
    env, tmp, home = fresh_env(tmp_path)
    argv = [
        sys.executable,
        "-m",
        "racegate.harness.probes.runner",
        "--only",
        "compiled_call_during_make_fx",
    ]
    proc = subprocess.run(argv, env=env, cwd=REPO, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert left_in(tmp, home) == []


@pytest.mark.process
def test_a_run_leaves_nothing_in_tmpdir_or_home(tmp_path: Path) -> None:
    env, tmp, home = fresh_env(tmp_path)
    records = tmp_path / "runs.jsonl"
    proc = subprocess.run(run_args(records), env=env, cwd=REPO, capture_output=True, text=True)
    assert proc.returncode in RUN_DECIDED, proc.stderr  # 7: undecided without the control's runs
    [record] = [json.loads(line) for line in records.read_text().splitlines()]
    assert record["outcome"] == "ok", record["detail"]
    assert left_in(tmp, home) == []
    # The values racegate set itself are not the user's: only the user's TMPDIR was replaced
    # (PYTHONDONTWRITEBYTECODE stands: this venv has torch's bytecode; the tests below).
    assert record["overridden_env"] == {"TMPDIR": str(tmp)}


def no_bytecode(env: dict[str, str], tmp_path: Path) -> Path:
    """Point PYTHONPYCACHEPREFIX at an empty folder: Python finds no bytecode for anything, as
    on a GPU image that ships none and sets PYTHONDONTWRITEBYTECODE (fresh_env sets that)."""
    empty = tmp_path / "no-bytecode"
    empty.mkdir()
    env["PYTHONPYCACHEPREFIX"] = str(empty)
    return empty


@pytest.mark.process
def test_a_runs_children_cache_bytecode_in_the_root_where_the_user_writes_none(
    tmp_path: Path,
) -> None:
    """PYTHONDONTWRITEBYTECODE=1 and no bytecode to read, as on the GPU image: every run's fresh
    interpreter would compile torch's sources again. Its children write their bytecode into the
    private root instead (kept here by --keep), none into TMPDIR or HOME outside it, and the
    record names the user's values replaced."""
    env, tmp, home = fresh_env(tmp_path)
    empty = no_bytecode(env, tmp_path)
    records = tmp_path / "runs.jsonl"
    proc = subprocess.run(
        run_args(records, "ok", "--keep"), env=env, cwd=REPO, capture_output=True, text=True
    )
    assert proc.returncode in RUN_DECIDED, proc.stderr
    [record] = [json.loads(line) for line in records.read_text().splitlines()]
    assert record["outcome"] == "ok", record["detail"]
    [root] = tmp.glob(f"{private_root.ROOT_PREFIX}*")
    cache = root / private_root.BYTECODE_DIR
    assert os.stat(cache).st_mode & 0o777 == 0o700
    cached = [p.relative_to(cache).as_posix() for p in cache.rglob("*.pyc")]
    # The child's own module (only the child imports it) and torch's
    assert any(
        p.endswith(f"racegate/harness/run/worker.{sys.implementation.cache_tag}.pyc")
        for p in cached
    )
    assert any("/torch/" in p for p in cached)
    assert [p for p in left_in(tmp, home) if not Path(p).is_relative_to(root)] == []
    assert list(empty.iterdir()) == []
    assert record["overridden_env"] == {
        "PYTHONDONTWRITEBYTECODE": "1",
        "PYTHONPYCACHEPREFIX": str(empty),
        "TMPDIR": str(tmp),
    }


ENTER_AND_IMPORT = """
import json, os, sys
from racegate.harness.run import private_root
root = private_root.enter()
sys.path.insert(0, sys.argv[1])
import late_module  # a source imported after enter(), in this process
user = private_root.user_environ()
print(json.dumps({
    "root": str(root),
    "write": not sys.dont_write_bytecode,
    "prefix": sys.pycache_prefix,
    "cached": late_module.__cached__,
    "written": os.path.exists(late_module.__cached__),  # the root goes at exit
    "env": {v: os.environ.get(v) for v in private_root.BYTECODE_VARS},
    "user": {v: user.get(v) for v in private_root.BYTECODE_VARS},
    "record": private_root.bytecode_env(),
}))
"""


def compile_packages(prefix: Path) -> None:
    """Write torch's and transformers' package bytecode under `prefix`, where Python then finds
    it (an image that ships bytecode)."""
    code = (
        "import importlib.util as u, py_compile\n"
        "for n in ('torch', 'transformers'):\n"
        "    py_compile.compile(u.find_spec(n).origin, doraise=True)\n"
    )
    env = {**os.environ, "PYTHONPYCACHEPREFIX": str(prefix)}
    subprocess.run([sys.executable, "-c", code], env=env, check=True)


@pytest.mark.process
@pytest.mark.parametrize("case", ["none to read", "bytecode to read", "writing allowed"])
def test_bytecode_goes_into_the_root_only_where_the_user_writes_none_and_has_none(
    tmp_path: Path, case: str
) -> None:
    """A front door under PYTHONDONTWRITEBYTECODE=1 with no bytecode for torch where Python
    looks writes bytecode for what it imports after entering its root, and hands the same to
    every process it starts, all inside the root; user_environ gives the user's values back.
    With bytecode to read, or writing allowed, nothing changes."""
    env, _, _ = fresh_env(tmp_path)
    user_prefix = no_bytecode(env, tmp_path)
    if case == "bytecode to read":
        compile_packages(user_prefix)
    if case == "writing allowed":
        env.pop("PYTHONDONTWRITEBYTECODE")
    src = tmp_path / "src"
    src.mkdir()
    (src / "late_module.py").write_text("X = 1\n")
    proc = subprocess.run(
        [sys.executable, "-c", ENTER_AND_IMPORT, str(src)],
        env=env, cwd=REPO, capture_output=True, text=True, check=True,
    )  # fmt: skip
    got = json.loads(proc.stdout)
    # The root goes at exit, bytecode and all: nothing writes it again after the removal.
    assert not Path(got["root"]).exists()
    user_off = None if case == "writing allowed" else "1"
    assert got["user"] == {
        "PYTHONDONTWRITEBYTECODE": user_off,
        "PYTHONPYCACHEPREFIX": str(user_prefix),
    }
    if case != "none to read":
        assert got["prefix"] == str(user_prefix) and got["record"] == {}
        assert got["write"] == (case == "writing allowed")
        assert got["env"] == got["user"]
        return
    prefix = Path(got["root"]) / private_root.BYTECODE_DIR
    assert got["write"] and got["written"]
    assert got["prefix"] == str(prefix) and Path(got["cached"]).is_relative_to(prefix)
    assert not (src / "__pycache__").exists() and list(user_prefix.iterdir()) == []
    want = {"PYTHONDONTWRITEBYTECODE": "", "PYTHONPYCACHEPREFIX": str(prefix)}
    assert got["env"] == want and got["record"] == want


@pytest.mark.process
def test_the_user_cache_dir_is_kept_and_reported(tmp_path: Path) -> None:
    env, tmp, home = fresh_env(tmp_path)
    mine = tmp_path / "my-inductor"
    env["TORCHINDUCTOR_CACHE_DIR"] = str(mine)
    records = tmp_path / "runs.jsonl"
    proc = subprocess.run(run_args(records), env=env, cwd=REPO, capture_output=True, text=True)
    assert proc.returncode in RUN_DECIDED, proc.stderr
    [record] = [json.loads(line) for line in records.read_text().splitlines()]
    assert record["overridden_env"] == {"TORCHINDUCTOR_CACHE_DIR": str(mine), "TMPDIR": str(tmp)}
    assert left_in(tmp, home) == []


def test_torch_caches_lie_in_this_process_root() -> None:
    """In this pytest process (tests/conftest.py entered the root at its import)."""
    import tempfile

    import torch._dynamo  # noqa: F401  (what made <TMPDIR>/torchinductor_<user>)
    from torch._inductor.runtime.cache_dir_utils import cache_dir

    root = private_root.enter()
    assert Path(cache_dir()).is_relative_to(root)
    assert Path(tempfile.gettempdir()).is_relative_to(root)
    assert os.stat(root).st_mode & 0o777 == 0o700


@pytest.mark.process
def test_pytest_with_the_plugin_leaves_nothing(tmp_path: Path) -> None:
    env, tmp, home = fresh_env(tmp_path)
    node = f"{Path(__file__).relative_to(REPO)}::test_torch_caches_lie_in_this_process_root"
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", node],
        env=env, cwd=REPO, capture_output=True, text=True,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert left_in(tmp, home) == []


def _wait_for(check, timeout_s: float = 120.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.1)


def _janitors_of(root: Path) -> list[int]:
    """The pids of the janitor processes (private_root._JANITOR) watching `root`."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            args = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if private_root.JANITOR_MARK.encode() in b" ".join(args) and str(root).encode() in args:
            found.append(int(entry.name))
    return found


def _killed_runner(tmp_path: Path, env: dict[str, str], tmp: Path, janitor_too: bool) -> Path:
    """A runner SIGKILLed mid-run (and its root's janitor, if asked); returns its root."""
    runner = subprocess.Popen(
        run_args(tmp_path / "hung.jsonl", "hang", "--run-timeout", "120"),
        env=env, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        # The run's own root (inside the runner's): the run has started.
        _wait_for(lambda: any(tmp.rglob("racegate-run-*")))
        [left] = list(tmp.iterdir())
        if janitor_too:
            [janitor] = _janitors_of(left)
            os.kill(janitor, signal.SIGKILL)
        runner.send_signal(signal.SIGKILL)
        runner.wait()
    finally:
        runner.kill()
        runner.wait()
        # one may end on its own first, its runner gone (a fresh-clone CI run: ESRCH here)
        lifeline.kill_with("RACEGATE_RUNNER_PID", str(runner.pid))
    return left


@pytest.mark.process
def test_a_root_left_by_a_killed_runner_goes_at_once(tmp_path: Path) -> None:
    """Issue 56: a SIGKILLed front door ran no exit handler, and its root stayed until the
    next front door's sweep (which may never come). Its janitor sees the pipe only the front
    door held close, and removes the root."""
    env, tmp, _ = fresh_env(tmp_path)
    left = _killed_runner(tmp_path, env, tmp, janitor_too=False)
    _wait_for(lambda: not left.exists(), timeout_s=30)
    assert left_in(tmp) == []


def _ended(pid: int) -> bool:
    """The process is gone or a zombie (its parent, maybe this process as a subreaper, has not
    reaped it yet)."""
    fields = stall.stat_fields(Path(f"/proc/{pid}/stat"))
    return not fields or fields[0] == "Z"


_ENTER_AND_WAIT = """
import sys, time
from racegate.harness.run import private_root
root = private_root.enter()
if sys.argv[1] == "keep":
    private_root.keep()
print(root, flush=True)
time.sleep(120)
"""


@pytest.mark.process
@pytest.mark.parametrize("kept", [False, True], ids=["plain", "kept"])
def test_the_janitor_leaves_a_kept_root_and_removes_any_other(tmp_path: Path, kept: bool) -> None:
    """A front door SIGKILLed after enter(): its janitor removes the root, except one kept
    (--keep: the runs' work dirs are what the user asked to look at)."""
    env, tmp, _ = fresh_env(tmp_path)
    door = subprocess.Popen(
        [sys.executable, "-c", _ENTER_AND_WAIT, "keep" if kept else "plain"],
        env=env, cwd=REPO, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert door.stdout is not None
        root = Path(door.stdout.readline().strip())
        # Started before enter() returned; on a loaded 2-core box its command line showed in
        # /proc only after a moment once (none found: a -n 2 process-tier run).
        _wait_for(lambda: len(_janitors_of(root)) == 1, timeout_s=10)
        [janitor] = _janitors_of(root)
    finally:
        door.kill()  # SIGKILL: no exit handler runs
        door.wait()
    _wait_for(lambda: _ended(janitor), timeout_s=30)  # it has done its work
    assert root.is_dir() is kept, left_in(tmp)
    if kept:
        shutil.rmtree(root)


@pytest.mark.process
def test_a_root_whose_janitor_was_killed_too_goes_with_the_next_run(tmp_path: Path) -> None:
    env, tmp, _ = fresh_env(tmp_path)
    left = _killed_runner(tmp_path, env, tmp, janitor_too=True)
    assert left.is_dir()  # SIGKILL: no exit handler ran, no janitor left to see it
    proc = subprocess.run(
        run_args(tmp_path / "next.jsonl"), env=env, cwd=REPO, capture_output=True, text=True
    )
    assert proc.returncode in RUN_DECIDED, proc.stderr
    assert left_in(tmp) == []


def _fake_root(parent: Path, name: str, **owner: object) -> Path:
    root = parent / f"{private_root.ROOT_PREFIX}{name}"
    root.mkdir(mode=0o700)
    facts = {
        "pid": os.getpid(),
        "start": private_root._proc_start(os.getpid()),
        "boot": private_root._boot_id(),
        "pidns": private_root._pid_namespace(),
        "kept": False,
    }
    (root / private_root.OWNER).write_text(json.dumps(facts | owner))
    return root


@pytest.mark.process
def test_sweep_removes_only_roots_whose_owner_is_gone(tmp_path: Path) -> None:
    live = _fake_root(tmp_path, "live")
    reused = _fake_root(tmp_path, "reused", start=-1)  # this pid, another start: another process
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True)  # fmt: skip
    gone = _fake_root(tmp_path, "gone", pid=int(dead.stdout))
    kept = _fake_root(tmp_path, "kept", pid=int(dead.stdout), kept=True)
    elsewhere = _fake_root(tmp_path, "elsewhere", pid=int(dead.stdout), pidns="pid:[1]")
    shared = _fake_root(tmp_path, "shared", pid=int(dead.stdout))
    shared.chmod(0o755)  # not a private root of ours
    unmarked = tmp_path / f"{private_root.ROOT_PREFIX}unmarked"
    unmarked.mkdir(mode=0o700)
    target = _fake_root(tmp_path / "..", f"target-{tmp_path.name}", pid=int(dead.stdout))
    (tmp_path / f"{private_root.ROOT_PREFIX}link").symlink_to(target)
    removed = private_root.sweep(tmp_path)
    assert sorted(p.name for p in removed) == sorted([reused.name, gone.name])
    for root in (live, kept, elsewhere, shared, unmarked, target):
        assert root.is_dir(), root
    target.joinpath(private_root.OWNER).unlink()
    target.rmdir()


# Links: .racegate, its run folders and the report folder.


def test_a_state_folder_that_is_a_link_is_refused(tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir(mode=0o755)
    checkout = tmp_path / "checkout"
    checkout.mkdir()
    (checkout / state.STATE_DIR).symlink_to(elsewhere)
    with pytest.raises(ValueError, match="is a symbolic link"):
        state.new_run(checkout)
    with pytest.raises(ValueError, match="is a symbolic link"):
        state.latest_records(checkout)
    assert list(elsewhere.iterdir()) == []
    assert elsewhere.stat().st_mode & 0o777 == 0o755  # never chmodded through the link


def test_a_runs_or_run_folder_that_is_a_link_is_refused(tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir(mode=0o755)
    (elsewhere / state.RECORDS).write_text("{}\n")
    (tmp_path / state.STATE_DIR).mkdir()
    state.runs_dir(tmp_path).symlink_to(elsewhere)
    with pytest.raises(ValueError, match="is a symbolic link"):
        state.new_run(tmp_path)
    state.runs_dir(tmp_path).unlink()
    state.runs_dir(tmp_path).mkdir()
    (state.runs_dir(tmp_path) / "20990101T000000.000000Z-abcdef").symlink_to(elsewhere)
    with pytest.raises(ValueError, match=r"the run folder .* is a symbolic link"):
        state.latest_records(tmp_path)
    assert elsewhere.stat().st_mode & 0o777 == 0o755


def test_the_cli_refuses_a_linked_state_folder_in_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (tmp_path / "pyproject.toml").write_text("")
    (tmp_path / state.STATE_DIR).symlink_to(elsewhere)
    monkeypatch.chdir(tmp_path)
    assert main(["report"]) == 2
    err = capsys.readouterr().err
    assert "is a symbolic link" in err and len(err.strip().splitlines()) == 1, err


def test_a_report_folder_that_is_a_link_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (tmp_path / "report").symlink_to(elsewhere)
    records = REPO / "tests/data/two_h200_small_runs.jsonl"  # real records: only the link is bad
    argv = ["report", str(records), "--out-dir", str(tmp_path / "report")]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "the report folder" in err and "is a symbolic link" in err, err
    assert len(err.strip().splitlines()) == 1, err
    assert list(elsewhere.iterdir()) == []


@pytest.mark.parametrize(
    "name", [state.STATE_DIR, "report"], ids=["state", "report"]
)  # not -k race
@pytest.mark.process
def test_gitignore_ignores_the_state_and_report_folders_as_links_too(
    tmp_path: Path, name: str
) -> None:
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    (tmp_path / ".gitignore").write_text((REPO / ".gitignore").read_text())
    (tmp_path / name).symlink_to("/nonexistent")
    ignored = subprocess.run(["git", "-C", str(tmp_path), "check-ignore", "-q", name])
    assert ignored.returncode == 0, f"{name} as a link is not ignored"


# bootstrap.py installs only into a venv it made.


def _entry(env_dir: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(REPO / "bootstrap.py"), *args],
        capture_output=True, text=True, timeout=300,
        env={**os.environ, "RACEGATE_VENV": str(env_dir)},
    )  # fmt: skip


@pytest.mark.process
def test_the_entry_script_refuses_a_venv_it_did_not_make(tmp_path: Path) -> None:
    """RACEGATE_VENV=<someone's env> reinstalled that env's packages (transformers 5.8.1 →
    5.17.0); now one line, exit 2, and the env is as it was."""
    env_dir = tmp_path / "theirs"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(env_dir)], check=True)
    before = left_in(env_dir)
    proc = _entry(env_dir, "test", "--version")
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.startswith(f"racegate: error: RACEGATE_VENV {env_dir} is not an environment")
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert "installing" not in proc.stderr
    assert left_in(env_dir) == before


def _entry_module():
    import importlib.util

    spec = importlib.util.spec_from_file_location("bootstrap_entry", REPO / "bootstrap.py")
    assert spec is not None and spec.loader is not None
    entry = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(entry)
    return entry


def test_the_entry_script_marks_a_venv_before_making_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The mark is there before venv.create runs (here it fails, as on Debian without
    python3-venv, so nothing is installed), and goes with the half-made folder."""
    entry = _entry_module()
    seen: list[bool] = []

    def create(env_dir: Path, **kw: object) -> None:
        seen.append(entry.made_by_racegate(Path(env_dir)))
        raise subprocess.CalledProcessError(1, ["ensurepip"])

    monkeypatch.setattr(entry.venv, "create", create)
    env_dir = tmp_path / "new"
    with pytest.raises(SystemExit, match="cannot install pip here"):
        entry.ensure_env(env_dir)
    assert seen == [True] and not env_dir.exists()


def test_an_env_of_our_own_is_known_by_its_mark_or_older_stamp(tmp_path: Path) -> None:
    entry = _entry_module()
    for name, mark in (("ours", entry.MADE_MARKER), ("older", entry.STAMP)):
        (tmp_path / name).mkdir()
        (tmp_path / name / mark).write_text("")
        assert entry.made_by_racegate(tmp_path / name)
    assert not entry.made_by_racegate(tmp_path)


def test_the_bare_machine_command_says_first_what_it_tests_and_makes_its_own_venv(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A python without torch: `race` tests requirements/race.txt's torch (the newest whose race
    shows on a CPU: with 2.13's the control never fired on a CPU box and the gate said
    UNDECIDED after 10-12 min) in .venv-race, and says so on its first line, before any
    install; `test` keeps .venv and requirements/ci.txt."""
    from racegate.harness.doors.upgrade import LAST_CPU_FIRING_TORCH

    entry = _entry_module()
    asked: list[tuple[str, str]] = []

    def ensure_env(env_dir: Path, where: str = "", requirements: Path = entry.REQUIREMENTS):
        asked.append((Path(env_dir).name, requirements.name))
        raise entry.ForeignEnv("stop here")

    monkeypatch.setattr(entry, "has_torch", lambda: False)
    monkeypatch.setattr(entry, "ensure_env", ensure_env)
    monkeypatch.delenv("RACEGATE_VENV", raising=False)
    assert entry.main(["race"]) == 2
    first = capsys.readouterr().out.splitlines()[0]
    torch = entry.pinned(entry.BARE_RACE_REQUIREMENTS, "torch")
    assert torch.startswith(LAST_CPU_FIRING_TORCH + "."), torch
    assert first.startswith(f"racegate: this python has no torch of its own: testing torch {torch}")
    assert "2.13 masks it" in first
    assert entry.main(["test"]) == 2
    assert asked == [(".venv-race", "race.txt"), (".venv", "ci.txt")]
