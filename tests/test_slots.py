"""The session's shared run slots: how many a case gets, that a dead holder frees its own, and a
parent's pool handed to its sessions (racegate.harness.run.slots, the plugin's env_names.SLOTS)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from racegate.harness.run.slots import SlotPool, release
from racegate.harness.scenario.env_names import SLOTS
from tests.test_plugin import _plugin

pytest_plugins = ["pytester"]


def test_a_case_gets_only_the_slots_left_free(tmp_path: Path) -> None:
    pool = SlotPool(tmp_path, 3)
    first = pool.take(2)
    assert len(first) == 2
    second = pool.take(5)  # one left
    assert len(second) == 1
    assert pool.take(1) == [] and pool.take(0) == []
    release(first)
    assert len(pool.take(4)) == 2  # the two given back; the third is still held
    release(second)


def test_a_pool_needs_a_slot(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="≥ 1 slot, got 0"):
        SlotPool(tmp_path, 0)


@pytest.mark.process
def test_a_killed_holder_frees_its_slots(tmp_path: Path) -> None:
    """Another process (a pytest-xdist worker) holds 2 of 3 slots; SIGKILLed, it gives them back:
    the kernel drops a flock with its holder, so no crash leaves the host short of slots."""
    holder = textwrap.dedent(
        f"""
        import sys, time
        from racegate.harness.run.slots import SlotPool
        held = SlotPool(__import__("pathlib").Path({str(tmp_path)!r}), 3).take(2)
        print(len(held), flush=True)
        time.sleep(300)
        """
    )
    root = Path(__file__).resolve().parent.parent
    proc = subprocess.Popen(
        [sys.executable, "-c", holder], cwd=root, stdout=subprocess.PIPE, text=True
    )
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "2"
        pool = SlotPool(tmp_path, 3)
        mine = pool.take(3)
        assert len(mine) == 1  # the holder's two are busy
        release(mine)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    assert proc.returncode == -signal.SIGKILL
    assert len(SlotPool(tmp_path, 3).take(3)) == 3


def test_a_pool_handed_over_reads_back_as_the_same_pool() -> None:
    made = SlotPool.make(3)
    try:
        got = SlotPool.from_handoff(made.handoff(), "the test", from_parent=True)
        assert (got.folder, got.size, got.from_parent) == (made.folder, 3, True)
        assert not made.from_parent  # made here: this process's to remove
    finally:
        made.remove()


@pytest.mark.parametrize(
    ("value", "said"),
    [
        ("{folder}", "give SIZE:FOLDER"),
        ("0:{folder}", "give SIZE:FOLDER"),
        ("two:{folder}", "give SIZE:FOLDER"),
        ("2:", "give SIZE:FOLDER"),
        ("2:{folder}/missing", "No such file or directory"),
        ("2:{folder}/file", "is not an absolute folder"),
        ("2:{folder}/link", "is not an absolute folder"),
        ("2:relative", "is not an absolute folder"),
        ("2:{folder}/open", "is not private (owner uid {uid}, mode 0755)"),
    ],
    ids=["no-size", "zero", "word", "no-folder", "missing", "file", "link", "relative", "open"],
)
def test_a_bad_pool_handoff_is_one_line_naming_it(tmp_path: Path, value: str, said: str) -> None:
    (tmp_path / "file").write_text("")
    (tmp_path / "open").mkdir(mode=0o755)
    (tmp_path / "open").chmod(0o755)
    (tmp_path / "link").symlink_to(tmp_path)  # a link to a private folder: refused all the same
    value = value.format(folder=tmp_path)
    with pytest.raises(ValueError) as exc:
        SlotPool.from_handoff(value, "variable X", from_parent=True)
    text = str(exc.value)
    assert "\n" not in text and text.startswith(f"variable X {value!r}: "), text
    assert said.format(uid=os.getuid()) in text, text


# A session's worker in a parent's pool: its case's own slot (waited for), then extras for a
# batch, as racegate/cases/test_race.py takes them; each run's start, end and runs at once logged.
_WORKER = """
import os, sys, time
from racegate.harness.run.slots import SlotPool, release
pool = SlotPool.from_handoff(os.environ["RACEGATE_SLOTS"], "the test", from_parent=True)
with open(sys.argv[1], "a") as log:
    for _ in range(int(sys.argv[2])):
        own = pool.own()
        extra = pool.extra(2)
        start = time.monotonic()
        time.sleep(0.02)
        log.write(f"{start} {time.monotonic()} {1 + len(extra)}\\n")
        log.flush()
        release(extra)
        release(own)
"""


def _most_at_once(logs: list[Path]) -> int:
    """The most runs in flight at one time, from the workers' logs (an end before a start at
    the same instant)."""
    events = []
    for log in logs:
        for line in log.read_text().splitlines():
            start, end, runs = line.split()
            events += [(float(start), 1, int(runs)), (float(end), 0, -int(runs))]
    most = now = 0
    for _, _, delta in sorted(events):
        now += delta
        most = max(most, now)
    return most


@pytest.mark.process
def test_two_sessions_in_a_parents_pool_never_run_more_than_its_slots(tmp_path: Path) -> None:
    """Two sessions of 3 workers each in a parent's pool of 3 (racegate upgrade's two sides):
    a case waits for its own slot, so the 6 workers never have more than 3 runs in flight (run
    anyway without one, as a session's own pool lets it, they had up to 6)."""
    pool = SlotPool.make(3)
    root = Path(__file__).resolve().parent.parent
    env = {**os.environ, "RACEGATE_SLOTS": pool.handoff()}
    logs = [tmp_path / f"worker{i}.log" for i in range(6)]
    try:
        procs = [
            subprocess.Popen([sys.executable, "-c", _WORKER, str(log), "25"], cwd=root, env=env)
            for log in logs
        ]
        codes = [proc.wait(timeout=120) for proc in procs]
    finally:
        pool.remove()
    assert codes == [0] * 6
    runs = sum(len(log.read_text().splitlines()) for log in logs)
    assert runs == 6 * 25  # every case ran: nobody waited for ever
    assert 2 <= _most_at_once(logs) <= 3


@pytest.mark.process  # real pytest sessions, two xdist workers
def test_a_session_takes_its_parents_pool_and_leaves_it(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With env_names.SLOTS set, the controller and every worker use the parent's pool (its
    size, its folder, waiting for a case's own slot) and the session does not remove it."""
    _plugin(pytester, monkeypatch)
    monkeypatch.setenv("PATH", "/nonexistent")  # no nvidia-smi: a CPU-only machine
    pool = SlotPool.make(5)
    try:
        monkeypatch.setenv(SLOTS, pool.handoff())
        pytester.makepyfile(
            test_pool=f"""
            import pytest
            from racegate.cases.race_session import slot_pool

            @pytest.mark.parametrize("i", range(4))
            def test_pool(pytestconfig, i):
                got = slot_pool(pytestconfig)
                want = ({str(pool.folder)!r}, 5, True)
                assert (str(got.folder), got.size, got.from_parent) == want
            """
        )
        result = pytester.runpytest_subprocess(
            "-p", "no:cacheprovider", "-n", "2", "--racegate-case-jobs=auto"
        )  # fmt: skip
        result.assert_outcomes(passed=4)
        assert pool.folder.is_dir()  # the parent's to remove
    finally:
        pool.remove()


@pytest.mark.process  # a real pytest session
def test_a_bad_pool_from_the_parent_is_a_usage_error(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    _plugin(pytester, monkeypatch)
    monkeypatch.setenv("PATH", "/nonexistent")
    monkeypatch.setenv(SLOTS, f"0:{tmp_path}")
    pytester.makepyfile(test_pool="def test_pool():\n    pass\n")
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "--racegate-case-jobs=auto")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    said = [ln for ln in result.errlines if SLOTS in ln]
    assert said == [
        f"ERROR: racegate: environment variable {SLOTS} '0:{tmp_path}': give "
        f"SIZE:FOLDER, a number ≥ 1 and a 0700 folder of user {os.getuid()}"
    ], result.errlines


# A production case's batches in a parent's pool: its own slot, then extras batch after batch,
# each freed and taken again at once (racegate/cases/test_race.py's loop); its end logged.
_BATCHER = """
import os, sys, time
from racegate.harness.run.slots import SlotPool, release
pool = SlotPool.from_handoff(os.environ["RACEGATE_SLOTS"], "the test", from_parent=True)
own = pool.own()
print("holding", flush=True)
for _ in range(300):
    extra = pool.extra(1)
    time.sleep(0.02)
    release(extra)
print(time.monotonic(), flush=True)
"""


@pytest.mark.process
def test_a_waiting_case_gets_a_slot_before_the_next_batch(tmp_path: Path) -> None:
    """A case waiting for its own slot in a parent's pool gets the next one freed, though a
    batch frees and takes its extra slot again at once, over and over: it does not wait for
    the batches to end (up to the case's time limit, had they been the production strategy's
    minutes of batches)."""
    pool = SlotPool.make(2)
    root = Path(__file__).resolve().parent.parent
    env = {**os.environ, "RACEGATE_SLOTS": pool.handoff()}
    try:
        batcher = subprocess.Popen(
            [sys.executable, "-c", _BATCHER], cwd=root, env=env, stdout=subprocess.PIPE, text=True
        )
        assert batcher.stdout is not None and batcher.stdout.readline().strip() == "holding"
        case = SlotPool.from_handoff(pool.handoff(), "the test", from_parent=True)
        mine = case.own()
        got = time.monotonic()
        release(mine)
        batches_ended = float(batcher.stdout.readline())
        assert batcher.wait(timeout=60) == 0
    finally:
        pool.remove()
    assert got < batches_ended - 2, (got, batches_ended)  # the batches ran ≥ 6 s after


@pytest.mark.parametrize("from_parent", [True, False], ids=["parents-pool", "sessions-own-pool"])
def test_a_case_stops_waiting_for_its_own_slot_after_its_wait(
    tmp_path: Path, from_parent: bool
) -> None:
    """A case waits for a slot of its own, in a parent's pool and in its session's own (one
    H200, own pool, when it did not wait: 10–12 runs at once on 8 slots, a run up to 2.4
    times as long),
    but not for ever: a control case holding extras for all its runs would keep it waiting
    against its time limit."""
    folder = tmp_path / "slots"
    folder.mkdir(mode=0o700)
    pool = SlotPool(folder, 1, from_parent=from_parent)
    held = pool.take(1)  # another case's (a lock on its own open file, as another process's)
    started = time.monotonic()
    assert pool.own(wait_s=0.5) == []
    assert 0.5 <= time.monotonic() - started < 5
    release(held)
    mine = pool.own(wait_s=0.5)
    assert len(mine) == 1
    release(mine)


@pytest.mark.process
def test_a_primed_batch_leaves_its_extra_slots_free_while_its_priming_run_runs(
    tmp_path: Path,
) -> None:
    """A warm case's batch primes first, on the slot the case holds, then takes its extra
    slots: its runs copy that one cache, so until it is made they could only wait, each holding
    a slot another case could use (one H100: about 250 of a main command's 1,875 run-seconds).
    The priming run here is real (tiny preset, CPU); what this watches is the pool the moment
    the priming run starts."""
    from racegate.harness.doors.pipeline import batch_slots, run_case
    from racegate.harness.run.runner import Primed, SharedPrimes
    from tests.test_cache_states import tiny

    folder = tmp_path / "slots"
    folder.mkdir(mode=0o700)
    pool = SlotPool(folder, 3)
    free_at_priming: list[int] = []

    class Watched(SharedPrimes):
        def get(self, scenario) -> Primed:
            if not self.made:  # the priming run is about to start: what is free now
                free = pool.take(3)
                free_at_priming.append(len(free))
                release(free)
            return super().get(scenario)

    scenario = tiny("sdpa_dense", "warm")
    own = pool.own(wait_s=0)
    try:
        with Watched() as primes:
            jobs, extra = batch_slots(pool, 0, 2, scenario, primes)
            try:
                records = run_case(scenario, jobs, None, "", jobs=jobs, primes=primes)
            finally:
                release(extra)
    finally:
        release(own)
    assert free_at_priming == [2]  # the case's own slot held; the batch's extra one not yet
    assert (jobs, primes.made) == (2, 1)
    assert [r.outcome for r in records] == ["ok", "ok"], [r.detail for r in records]
    assert all(r.cache.prime_copied for r in records)
