"""Cache states on CPU with the real drafter (`tiny`): cold, warm (proven by counters), deleted."""

from __future__ import annotations

from pathlib import Path

import pytest

from racegate.harness.doors.pipeline import run_scenario
from racegate.harness.scenario.spec import make_scenario

# Every test here starts child processes: the process tier (tests/conftest.py).
pytestmark = pytest.mark.process


def tiny(strategy: str, cache_state: str):
    return make_scenario(
        preset="tiny", strategy=strategy, cache_state=cache_state, threads_per_device=2,
        steps=3, warmup_steps=1, timeout_s=240,
    )  # fmt: skip


@pytest.mark.parametrize("cache_state", ["cold", "warm", "deleted"])
def test_sdpa_dense_trains_in_two_threads(cache_state: str) -> None:
    record = run_scenario(tiny("sdpa_dense", cache_state))
    assert record.outcome == "ok", record.detail
    assert record.threads_concurrent == 2 and record.threads_asked == 2
    assert all(t.steps_done >= 4 for t in record.threads)
    assert record.tokens_per_s and record.tokens_per_s > 0
    assert record.cache.state == cache_state


def test_warm_state_is_proven_by_cache_hits() -> None:
    record = run_scenario(tiny("per_device", "warm"))
    assert record.outcome == "ok", record.detail
    assert record.cache.prime_ok
    counters = record.cache.counters
    assert counters.get("inductor.fxgraph_cache_hit", 0) > 0, counters
    assert counters.get("inductor.fxgraph_cache_miss", 0) == 0, counters
    assert record.cache.proven_warm is True


def test_the_runs_of_a_warm_case_share_one_priming_run_and_each_proves_warm(tmp_path) -> None:
    """run_case primes once and copies that cache into each run's own root. The copy must
    stand alone: a run from a copy whose source was moved away still hits every entry, so no
    run reads the shared primed tree (an entry that named its path would miss there)."""
    import dataclasses
    import shutil

    from racegate.harness.doors.pipeline import run_case
    from racegate.harness.judge.decide import record_run
    from racegate.harness.run.runner import Primed, SharedPrimes, collect

    scenario = tiny("per_device", "warm")
    with SharedPrimes() as primes:
        # One at a time: two compiled runs at once beside the other xdist worker's made the
        # 2-core CI box slow enough that a deleted-state test's threads failed their overlap.
        records = run_case(scenario, 2, None, "", primes=primes)
        assert primes.made == 1
        primed = primes.get(scenario)  # made already: no second priming run
        assert primes.made == 1
        moved = tmp_path / "moved"
        shutil.move(primed.root, moved)

        class Moved(SharedPrimes):
            def get(self, scenario) -> Primed:
                return dataclasses.replace(primed, root=moved)

        records.append(record_run(collect(scenario, primes=Moved())))
    assert not primed.root.exists()
    for record in records:
        assert record.outcome == "ok", record.detail
        assert record.cache.prime_ok and record.cache.prime_copied
        assert record.cache.proven_warm is True, record.cache.counters
        assert record.cache.dir != str(primed.root)


def test_deleted_state_removes_the_cache_mid_run_and_compiles_again() -> None:
    record = run_scenario(tiny("per_device", "deleted"))
    assert record.outcome == "ok", record.detail
    assert record.cache.deleted_bytes and record.cache.deleted_bytes > 0
    # After the deletion the threads moved to a new bucket shape, so something compiled again.
    assert any(len(set(t.shapes)) > 1 for t in record.threads)
    assert record.cache.counters.get("inductor.fxgraph_cache_miss", 0) > 0


def test_a_compiled_run_and_a_probe_run_write_nothing_outside_their_root(
    tmp_path, monkeypatch
) -> None:
    """With a fresh HOME and TMPDIR for this process, the defaults a child would fall back to
    (<tmp>/torchinductor_<user>, whose precompiled headers ignore TORCHINDUCTOR_CACHE_DIR;
    ~/.cache; ~/.triton) stay empty: every cache and temp dir went into the run's own root."""
    import tempfile

    from racegate.harness.probes.runner import run_probes_isolated
    from racegate.harness.run.cache_state import PRIVATE_DIRS

    home, tmp = tmp_path / "home", tmp_path / "tmp"
    home.mkdir(mode=0o700)
    tmp.mkdir(mode=0o700)
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("TMPDIR", str(tmp))
    for var in PRIVATE_DIRS:
        if var != "TMPDIR":
            monkeypatch.delenv(var, raising=False)
    monkeypatch.setattr(tempfile, "tempdir", None)
    sc = make_scenario(
        preset="tiny", strategy="per_device", threads_per_device=2, steps=2, warmup_steps=1,
        timeout_s=400,
    )  # fmt: skip
    record = run_scenario(sc, keep=True, work_dir=tmp_path)
    assert record.outcome == "ok", record.detail
    compiled = sorted(p.name for p in Path(record.cache.dir).rglob("*") if p.is_file())
    assert compiled, "the run compiled nothing: this test would prove nothing"
    probes = run_probes_isolated(["is_compiling_leak"], timeout_s=60)
    assert [r.name for r in probes] == ["is_compiling_leak"]
    assert sorted(str(p) for p in [*home.rglob("*"), *tmp.rglob("*")]) == []


def test_a_primed_cache_is_copied_without_its_sockets_or_fifos(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A priming run's helpers may leave a socket or a FIFO in its TMPDIR (multiprocessing's
    listener): not cache, and shutil's copy raises on one."""
    import os
    import socket

    from racegate.harness.run.cache_state import private_dir
    from racegate.harness.run.runner import copy_cache

    primed = private_dir(tmp_path / "primed")
    (primed / "inductor").mkdir(mode=0o700)
    (primed / "inductor" / "entry").write_bytes(b"compiled")
    os.mkfifo(primed / "fifo")
    with socket.socket(socket.AF_UNIX) as sock:
        # Bound by a relative name: tmp_path lies in racegate's private root, deeper than the
        # 108 bytes an AF_UNIX path may take.
        monkeypatch.chdir(primed)
        sock.bind("sock")
        (primed / "link").symlink_to("inductor/entry")
        root = private_dir(tmp_path / "root")
        copy_cache(primed, root)
    assert sorted(p.name for p in root.iterdir()) == ["inductor", "link"]
    assert (root / "inductor" / "entry").read_bytes() == b"compiled"
    assert os.readlink(root / "link") == "inductor/entry"
    assert (root.stat().st_mode & 0o777) == 0o700


@pytest.mark.timeout(600)
def test_prime_each_run_primes_every_warm_run_alone_and_the_default_copies_one(tmp_path) -> None:
    """`harness run --prime-each-run`: two warm runs, each from a cache it primed itself (no
    copy), both proven warm; without it the same two runs copy one priming run's cache."""
    import subprocess
    import sys

    from racegate.harness.judge.gate import EXIT_UNDECIDED
    from racegate.harness.run.record import read_jsonl

    def warm_runs(name: str, *extra: str) -> list[dict]:  # each run's cache evidence
        out = tmp_path / f"{name}.jsonl"
        proc = subprocess.run(
            [sys.executable, "-m", "racegate", "run", "--preset", "tiny", "--strategies",
             "per_device", "--cache-states", "warm", "--threads-per-device", "1", "--steps", "2",
             "--repeat", "2", "--jobs", "2", "--run-timeout", "240", "--results", str(out), *extra],
            cwd=Path(__file__).resolve().parents[1], capture_output=True, text=True, timeout=580,
        )  # fmt: skip
        # Clean runs of per_device alone (one thread cannot race): UNDECIDED, the production
        # strategy did not run.
        assert proc.returncode == EXIT_UNDECIDED, proc.stderr[-2000:]
        records = read_jsonl(out)
        assert [r.outcome for r in records] == ["ok", "ok"], [r.detail for r in records]
        return [r.cache for r in records]

    alone = warm_runs("alone", "--prime-each-run")
    shared = warm_runs("shared")
    assert [c.prime_copied for c in alone] == [False, False], alone
    assert [c.prime_copied for c in shared] == [True, True], shared
    for cache in alone + shared:
        assert cache.prime_ok and cache.proven_warm is True, cache
