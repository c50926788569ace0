"""Infrastructure is not a verdict: a full disk, a file-size limit, an interrupt. One line naming
the cause, the exit code of "nothing decided" (UNDECIDED, 7; an interrupt 130), no torn record,
nothing left behind; a run folder stopped early is never taken for the latest complete run."""

from __future__ import annotations

import dataclasses
import os
import resource
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from racegate.harness.judge.gate import EXIT_UNDECIDED, Word, decide_gate, infrastructure_cause
from racegate.harness.run import files, state
from racegate.harness.run.record import append_jsonl, read_jsonl
from tests.test_baselines import make_record, write

REPO = Path(__file__).resolve().parent.parent
pytest_plugins = ["pytester"]
FAULT = "tests.fault_workloads:make_workload"
RUN = (sys.executable, "-m", "racegate", "run", "--workload", FAULT, "--preset", "ok",
       "--strategies", "eager", "--steps", "2", "--warmup-steps", "1")  # fmt: skip


def test_a_full_disk_appends_nothing_not_half_a_record() -> None:
    """/dev/full: every write fails with ENOSPC. The append raises; nothing is written."""
    with pytest.raises(OSError, match="No space left on device"):
        files.append_line(Path("/dev/full"), b'{"a": 1}\n')


def _append_under_fsize_limit(path: str, limit: int) -> None:  # in a child: the limit is its own
    resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
    try:
        append_jsonl(Path(path), make_record())
    except OSError as exc:
        print(f"refused: {exc}")
        sys.exit(3)


@pytest.mark.fault
def test_a_record_cut_short_by_a_file_size_limit_is_cut_back(tmp_path: Path) -> None:
    """A file-size limit (RLIMIT_FSIZE) that the record crosses: a short write. The file is
    cut back to the records before it, whole, never a torn 8 KB line."""
    path = write(tmp_path / "r.jsonl", [make_record()])
    size = path.stat().st_size
    code = (
        "import sys; from tests.test_infrastructure_faults import _append_under_fsize_limit as a; "
        f"a({str(path)!r}, {size + 1000})"
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True)
    assert done.returncode == 3 and "refused:" in done.stdout, done.stderr[-2000:]
    assert path.stat().st_size == size and len(read_jsonl(path)) == 1


def test_a_run_failed_by_a_full_disk_is_no_verdict() -> None:
    """A full TMPDIR failed the production strategy's runs: 'UNSAFE ... (crash 1)', the
    cause only in a detail line. Every exit's decision (decide_gate) is UNDECIDED, naming it."""
    run = make_record(other="crash")
    crashed = dataclasses.replace(
        run, detail="child exit code 1: OSError: [Errno 28] No space left on device: '/tmp/x'"
    )
    cause = infrastructure_cause([make_record(), crashed])
    assert cause is not None and "want of disk space" in cause and "[Errno 28]" in cause
    decided = decide_gate(None, infrastructure=cause)
    assert decided.word is Word.UNDECIDED and decided.exit_code == EXIT_UNDECIDED
    assert infrastructure_cause([run]) is None


def test_a_run_folder_stopped_early_is_not_the_latest_run(tmp_path: Path) -> None:
    older = state.new_run(tmp_path)
    append_jsonl(older, make_record())
    time.sleep(0.01)
    stopped = state.new_run(tmp_path)
    append_jsonl(stopped, make_record())
    assert state.latest_records(tmp_path) == stopped
    state.end_incomplete(stopped, "interrupted after 1 of 3 runs")
    assert state.latest_records(tmp_path) == older
    empty = state.new_run(tmp_path)
    state.end_incomplete(empty, "interrupted after 0 of 3 runs")
    assert not empty.parent.exists()  # no record landed: nothing left behind


def _env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("RACEGATE_")}


@pytest.mark.process
def test_ctrl_c_on_run_says_what_stopped_and_marks_its_run_folder(tmp_path: Path) -> None:
    """A real SIGINT to a real `racegate run` after its first record: one line saying what was
    interrupted, exit 130, its run folder marked INCOMPLETE (so `report` passes it over), no
    private root of its own left."""
    (tmp_path / "pyproject.toml").write_text("[tool.racegate]\n")
    env = _env() | {"PYTHONPATH": str(REPO), "TMPDIR": str(tmp_path)}
    proc = subprocess.Popen(
        [*RUN,
         "--repeat", "30"],
        cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    runs = tmp_path / ".racegate" / "runs"
    deadline = time.monotonic() + 240
    while not any(p.stat().st_size for p in runs.glob("*/records.jsonl")):
        assert time.monotonic() < deadline and proc.poll() is None, proc.stderr
        time.sleep(0.2)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err[-2000:]
    last = err.strip().splitlines()[-1]
    assert last.startswith("racegate: interrupted: `") and "run` stopped after" in last, err
    (folder,) = runs.iterdir()
    assert (folder / state.INCOMPLETE).read_text().startswith("interrupted after")
    assert state.latest_records(tmp_path) is None
    assert not list(tmp_path.glob("racegate-root-*"))


@pytest.mark.process
def test_records_on_a_full_disk_are_one_line_and_undecided(tmp_path: Path) -> None:
    """`--results /dev/full`: a traceback and exit 1 (UNSAFE's code). Now one line naming the
    cause, exit 7."""
    proc = subprocess.run(
        [*RUN,
         "--results", "/dev/full"],
        cwd=REPO, env=_env(), capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert proc.returncode == EXIT_UNDECIDED, proc.stderr[-2000:]
    last = proc.stderr.strip().splitlines()[-1]
    assert "Traceback" not in proc.stderr, proc.stderr[-2000:]
    assert last.startswith("racegate: nothing decided: `") and "No space left on device" in last


_CASE = """
import time
from pathlib import Path
from racegate.harness.run.record import append_jsonl
from tests.test_baselines import make_record

def test_case(racegate_config):
    append_jsonl(racegate_config.results, make_record())
    Path("started").touch()
    time.sleep(120)
"""


@pytest.mark.process
def test_ctrl_c_on_pytest_marks_its_run_folder_incomplete(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Ctrl-C on the main command (pytest): the next `report` showed the partial run as the
    latest. Its session's run folder is marked INCOMPLETE, which `report` passes over."""
    from tests.test_plugin import _plugin

    _plugin(pytester, monkeypatch)
    pytester.makepyfile(test_stub=_CASE)
    proc = subprocess.Popen(
        # a racegate option asks for racegate (the plugin is inert in a session that does not)
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--racegate-case-jobs=1",
         "test_stub.py"],
        cwd=pytester.path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    deadline = time.monotonic() + 120
    while not (pytester.path / "started").exists():
        assert time.monotonic() < deadline and proc.poll() is None, proc.stdout
        time.sleep(0.2)
    proc.send_signal(signal.SIGINT)
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode == 2, out[-2000:]  # pytest's own code for an interrupted session
    (folder,) = (pytester.path / ".racegate" / "runs").iterdir()
    assert (folder / state.INCOMPLETE).read_text().startswith("interrupted (Ctrl-C)")
    assert state.latest_records(pytester.path) is None


@pytest.mark.fault
def test_a_full_tmpdir_is_no_verdict(tmp_path: Path) -> None:
    """TMPDIR on a full 2 MB tmpfs: the production strategy's run failed writing there, and
    `run` said "UNSAFE ... (crash 1)", the cause only in a detail line. Now UNDECIDED, exit 7,
    naming the want of disk space. A real tmpfs (root may mount one; skipped where not)."""
    small = tmp_path / "small"
    small.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(small)],
                      capture_output=True).returncode != 0:  # fmt: skip
        pytest.skip("cannot mount a tmpfs here (not root, or not allowed)")
    try:
        env = _env() | {"TMPDIR": str(small), "RACEGATE_PRODUCTION_STRATEGY": "eager"}
        proc = subprocess.run(
            [*RUN[:7], "fill_tmp", *RUN[8:], "--results", str(tmp_path / "r.jsonl")],
            cwd=REPO, env=env, capture_output=True, text=True, timeout=300,
        )  # fmt: skip
    finally:
        subprocess.run(["umount", "-l", str(small)], check=False)
    out = " ".join(proc.stdout.split())
    assert proc.returncode == EXIT_UNDECIDED, (proc.stdout + proc.stderr)[-3000:]
    assert "UNDECIDED: a run failed for want of disk space" in out, out[-2000:]
    assert "No space left on device" in out
