"""Run a scenario in fresh child processes and turn what they report into a RunRecord.

Owns isolation (one subprocess per run, per device for `processes`), timeouts with a stack
dump, cache-state priming, and assembling the record; the CLI, pytest and nox call
`run_scenario`.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path
from typing import Any

from harness.judge import metrics, outcomes
from harness.record import UNREPORTED_DEVICE, RunRecord, ThreadRecord
from harness.run import cache_state
from harness.scenario import Scenario
from harness.vocab import UNCOMPILED, WARMED_UP, CacheState, Outcome, Strategy

REPO_ROOT = Path(__file__).resolve().parents[2]
N_WINDOWS = 3  # tokens/s is the median of this many steady-state windows


@dataclass
class ChildResult:
    returncode: int | None
    timed_out: bool
    result: dict[str, Any] | None  # result.json, when the child got that far
    events: list[dict[str, Any]]  # progress.jsonl thread events, always
    stacks: str
    stderr_tail: str
    wall_s: float


def child_env(scenario: Scenario, cache_root: Path) -> dict[str, str]:
    env = dict(os.environ)
    env.update(cache_state.cache_env(cache_root))
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), env.get("PYTHONPATH")]))
    env["PYTHONUNBUFFERED"] = "1"
    if not scenario.uses_cuda:
        # One compile worker: a subprocess pool costs more than it saves on a 2-core CI box.
        env.setdefault("TORCHINDUCTOR_COMPILE_THREADS", "1")
    return env


def _tail(path: Path, chars: int = 3000) -> str:
    return path.read_text(errors="replace")[-chars:] if path.exists() else ""


# Process groups of children still running, so an interrupted parent can take them down with it
# (children run in their own session so a timeout can kill a whole tree).
LIVE_CHILDREN: set[int] = set()
STOPPING = threading.Event()  # set when the parent is shutting down: start no new child


def kill_live_children() -> None:
    STOPPING.set()
    for pgid in list(LIVE_CHILDREN):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pgid, signal.SIGKILL)
    LIVE_CHILDREN.clear()


atexit.register(kill_live_children)


def start_child(
    spec: dict[str, Any], run_dir: Path, env: dict[str, str]
) -> subprocess.Popen[bytes]:
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "scenario.json").write_text(json.dumps(spec))
    if STOPPING.is_set():
        raise RuntimeError("racegate is shutting down: no new run is started")
    proc = subprocess.Popen(
        [sys.executable, "-m", "harness.run.worker", str(run_dir)],
        env=env,
        cwd=REPO_ROOT,
        stdout=(run_dir / "stdout.txt").open("wb"),
        stderr=(run_dir / "stderr.txt").open("wb"),
        start_new_session=True,
    )
    LIVE_CHILDREN.add(proc.pid)
    return proc


def wait_child(
    proc: subprocess.Popen[bytes], run_dir: Path, timeout_s: float, t0: float
) -> ChildResult:
    timed_out = False
    try:
        proc.wait(timeout=max(1.0, timeout_s - (time.monotonic() - t0)))
    except BaseException as exc:
        if not isinstance(exc, subprocess.TimeoutExpired):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)
            raise
        timed_out = True
        proc.send_signal(signal.SIGUSR1)  # faulthandler in the child dumps every stack
        time.sleep(2.0)
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    # Reap what the child left in its session (e.g. inductor compile workers).
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    LIVE_CHILDREN.discard(proc.pid)
    result_path = run_dir / "result.json"
    events = []
    progress = run_dir / "progress.jsonl"
    if progress.exists():
        for line in progress.read_text().splitlines():
            with contextlib.suppress(json.JSONDecodeError):  # a torn line from a killed child
                events.append(json.loads(line))
    return ChildResult(
        returncode=proc.returncode,
        timed_out=timed_out,
        result=json.loads(result_path.read_text()) if result_path.exists() else None,
        events=events,
        stacks=_tail(run_dir / "stacks.txt", 20000),
        stderr_tail=_tail(run_dir / "stderr.txt"),
        wall_s=time.monotonic() - t0,
    )


def run_children(
    specs: list[dict[str, Any]], base: Path, env: dict[str, str], timeout_s: float
) -> list[ChildResult]:
    """Start every child at once (one per device for `processes`), wait for all."""
    t0 = time.monotonic()
    dirs = [base / f"child{i}" for i in range(len(specs))]
    # The children budget their deadline from this start, not their own (after importing torch,
    # which under load takes seconds): their result must land before the timeout here kills them.
    procs = [
        start_child(spec | {"runner_t0": t0}, d, env) for spec, d in zip(specs, dirs, strict=True)
    ]
    return [wait_child(p, d, timeout_s, t0) for p, d in zip(procs, dirs, strict=True)]


def thread_events(child: ChildResult) -> list[dict[str, Any]]:
    """Per-thread reports: the final result's, else what progress.jsonl got before a crash."""
    if child.result:
        return child.result["threads"]
    return [e for e in child.events if e.get("event") == "thread"]


def _thread_records(
    child: ChildResult, compiled: bool, exit_outcome: Outcome | None
) -> list[ThreadRecord]:
    events = thread_events(child)
    records = []
    for ev in events:
        outcome = outcomes.classify_thread(
            error_text=ev["error_text"],
            finished=ev["finished"],
            eager_fallbacks=ev["eager_fallbacks"],
            compiled=compiled,
        )
        steps = ev["steps"]
        records.append(
            ThreadRecord(
                index=ev["index"],
                device=ev["device"],
                outcome=str(outcome),
                steps_done=len(steps),
                error=ev["error_text"].splitlines()[0] if ev["error_text"] else None,
                error_text=ev["error_text"],
                eager_fallbacks=ev["eager_fallbacks"],
                compile_s=steps[0][1] if steps else None,
                step_s=[s[1] for s in steps],
                shapes=[s[0] for s in steps],
                span=tuple(ev["span"]) if ev["span"] else None,
            )
        )
    if exit_outcome is not None and not child.result:
        # The child died before reporting: the threads it never reported share its fate.
        built = next((e["threads"] for e in child.events if e.get("event") == "built"), 1)
        for k in range(len(records), built):
            records.append(ThreadRecord(index=k, device="?", outcome=str(exit_outcome)))
    return records


def base_shape_memory(steady: list[list[Any]]) -> list[int]:
    """Device peak after each steady step on the first shape, up to the first switch of shape.

    A new shape legitimately needs more memory; a leak shows as growth within one shape.
    """
    out: list[int] = []
    for shape, _, _, _, mem in steady:
        if steady and shape != steady[0][0]:
            break
        if mem is not None:
            out.append(mem)
    return out


def installed_versions() -> dict[str, str]:
    """Versions read by the parent, for runs whose child died before reporting its own."""
    out = {"python": sys.version.split()[0], "source": "parent (child did not report)"}
    for dist in ("torch", "transformers", "triton"):
        try:
            out[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            out[dist] = "absent"
    try:  # torch.__version__ carries the build tag (+cu130) that the children report
        import torch

        out["torch"] = str(torch.__version__)
    except ImportError:
        pass
    return out


def assemble(
    scenario: Scenario,
    children: list[ChildResult],
    cache: dict[str, Any],
    command: str,
    repeat_index: int,
    started_at: str,
    wall_s: float,
) -> RunRecord:
    """One RunRecord from the children's reports: classify, count, measure."""
    threads: list[ThreadRecord] = []
    details, stacks = [], []
    steady_by_thread: list[list[tuple[float, int]]] = []  # (seconds, tokens) per thread
    mem_by_device: dict[str, list[int]] = {}
    flops_rate = 0.0
    first = next((c.result for c in children if c.result), None)
    for child in children:
        exit_outcome = outcomes.classify_exit(child.returncode, child.timed_out)
        compiled = scenario.strategy not in UNCOMPILED  # a fallback only exists if compiled
        recs = _thread_records(child, compiled, exit_outcome)
        if exit_outcome is not None:
            details.append(
                f"{exit_outcome}: child {outcomes.describe_exit(child.returncode)}"
                + (f"; stderr: {child.stderr_tail[-500:]}" if child.stderr_tail else "")
            )
            if child.result is None and not recs:
                recs = [ThreadRecord(index=0, device="?", outcome=str(exit_outcome))]
        if child.stacks.strip():
            stacks.append(child.stacks)
        events = thread_events(child)
        flops = (child.result or {}).get("flops_per_step", {})
        for ev in events:
            # Step rows: [shape, seconds, tokens, compiled, device peak memory].
            steady = [
                s
                for n, s in enumerate(ev["steps"])
                if metrics.is_steady(n, s[3], scenario.warmup_steps)
            ]
            steady_by_thread.append([(s[1], s[2]) for s in steady])
            secs = sum(s[1] for s in steady)
            if secs > 0 and all(flops.get(str(s[0])) for s in steady):
                flops_rate += sum(flops[str(s[0])] for s in steady) / secs
            if ev["device"] not in mem_by_device:
                mem_by_device[ev["device"]] = base_shape_memory(steady)
        # Placeholder records of threads that never reported get an empty step list, so the
        # zip below pairs every record with its own steps.
        steady_by_thread.extend([] for _ in range(len(recs) - len(events)))
        threads.extend(recs)

    for rec, steady in zip(threads, steady_by_thread, strict=True):
        rec.tokens_per_s = metrics.rate(steady)
    window_rates = metrics.aggregate_windows(steady_by_thread, N_WINDOWS)
    tps, spread = metrics.median_and_spread(window_rates)

    asked = scenario.threads_per_device * len(scenario.devices)
    spans = [t.span for t in threads if t.span and t.steps_done > 0]
    concurrent = outcomes.max_concurrency(spans) if spans else 0
    thread_outcomes = [Outcome(t.outcome) for t in threads] or [Outcome.CRASH]
    outcome = outcomes.worst(thread_outcomes)
    if len(threads) < asked and outcome is Outcome.OK:
        outcome = Outcome.OTHER_ERROR
        details.append(f"only {len(threads)} of {asked} threads reported")
    if concurrent < asked and outcome is Outcome.OK:
        # A run that was in effect serial proves nothing about the race: never a pass.
        outcome = Outcome.OTHER_ERROR
        details.append(f"only {concurrent} of {asked} threads ran concurrently")
    # Peak memory is per device: with several threads on one device it moves with how their
    # steps interleave, so flatness is judged only where one thread owns its device.
    growths = (
        [metrics.memory_growth(s, 0) for s in mem_by_device.values()]
        if scenario.threads_per_device == 1
        else []
    )
    growths = [g for g in growths if g is not None]
    built = (e for c in children for e in c.events if e.get("event") == "built" and "hardware" in e)
    hw = first["hardware"] if first else next(built, {}).get("hardware")
    hw = hw or {"device_name": UNREPORTED_DEVICE}
    return RunRecord(
        scenario=scenario.to_json(),
        outcome=str(outcome),
        outcome_counts=outcomes.count(thread_outcomes),
        threads=threads,
        threads_asked=asked,
        threads_concurrent=concurrent,
        versions=first["versions"] if first else installed_versions(),
        hardware=hw,
        tokens_per_s=tps,
        tokens_per_s_spread=spread,
        tokens_per_s_windows=window_rates,
        compile_s=max((t.compile_s for t in threads if t.compile_s is not None), default=None)
        if scenario.strategy not in WARMED_UP
        else (first or {}).get("warmup_s"),
        peak_mem_bytes={d: max(s) for d, s in mem_by_device.items() if s},
        mem_growth=max(growths) if growths else None,
        mem_series=mem_by_device,
        flops_per_s=flops_rate or None,
        mfu=metrics.mfu(flops_rate or None, hw.get("device_name"), len(scenario.devices)),
        cache=cache,
        detail="; ".join(details) or None,
        stacks="\n".join(stacks) or None,
        wall_s=wall_s,
        started_at=started_at,
        repeat_index=repeat_index,
        command=command,
    )


def enforce_cache_proof(record: RunRecord, state: CacheState, strategy: Strategy) -> RunRecord:
    """A warm or deleted run whose cache state is not proven proves nothing: never `ok`."""
    if strategy in UNCOMPILED:
        return record
    cache, why = record.cache, None
    if state in (CacheState.WARM, CacheState.DELETED) and not cache.get("prime_ok"):
        why = f"cache state {str(state)!r} not reached: the priming run failed"
    elif state is CacheState.WARM and not cache.get("proven_warm"):
        why = f"cache state 'warm' not proven: counters {cache.get('counters')}"
    elif state is CacheState.DELETED and not cache.get("deleted_bytes"):
        why = "cache state 'deleted' not reached: nothing was deleted mid-run"
    if why and record.outcome == str(Outcome.OK):
        record.outcome = str(Outcome.OTHER_ERROR)
        record.detail = "; ".join(filter(None, [record.detail, why]))
    return record


def run_scenario(
    scenario: Scenario,
    *,
    command: str = "",
    repeat_index: int = 0,
    work_dir: Path | None = None,
    keep: bool = False,
    timing_valid: bool = True,
) -> RunRecord:
    """Run one scenario in fresh processes (after priming the cache if its state asks).

    timing_valid: False when the caller runs other scenarios beside this one (`--jobs`,
    pytest-xdist); the record then counts for its outcome, not its tokens/s."""
    started_at = datetime.now(UTC).isoformat(timespec="seconds")
    t0 = time.monotonic()
    base = Path(tempfile.mkdtemp(prefix="racegate-run-", dir=work_dir))
    cache_root = cache_state.make_private_cache(base)
    env = child_env(scenario, cache_root)
    cache: dict[str, Any] = {"state": str(scenario.cache_state), "dir": str(cache_root)}
    try:
        if scenario.cache_state in (CacheState.WARM, CacheState.DELETED):
            prime = run_children(
                [{"scenario": scenario.to_json(), "mode": "prime"}],
                base / "prime",
                env,
                scenario.timeout_s,
            )[0]
            cache["prime_ok"] = prime.result is not None and prime.returncode == 0
            cache["prime_counters"] = (prime.result or {}).get("cache_counters", {})
            cache["bytes_before_run"] = cache_state.tree_size(cache_root)
            if not cache["prime_ok"]:
                cache["prime_error"] = prime.stderr_tail[-1000:]
        if scenario.strategy is Strategy.PROCESSES:
            # Each thread of the threaded scenario becomes a process of its own.
            per_process = [d for d in scenario.devices for _ in range(scenario.threads_per_device)]
            specs = [
                {
                    "scenario": scenario.to_json(),
                    "mode": "process",
                    "process_devices": [d],
                    "thread_offset": i,
                    # Processes start their steps together, as threads do at their barrier.
                    "start_gate": {"dir": str(base / "start_gate"), "parties": len(per_process)},
                }
                for i, d in enumerate(per_process)
            ]
        else:
            specs = [{"scenario": scenario.to_json(), "mode": "run"}]
        children = run_children(specs, base / "run", env, scenario.timeout_s)
        counters: dict[str, int] = {}
        for child in children:
            for k, v in (child.result or {}).get("cache_counters", {}).items():
                counters[k] = counters.get(k, 0) + v
        cache["counters"] = counters
        # Under `processes` each process deletes the shared cache at its own first steady step:
        # a later one may find little or nothing left, so the run's deletion is their sum.
        events = [e for c in children for e in c.events]
        deleted = [e["bytes"] for e in events if e.get("event") == "cache_deleted"]
        cache["deleted_bytes"] = sum(deleted) if deleted else None
        if scenario.cache_state is CacheState.WARM:
            cache["proven_warm"] = cache_state.proves_warm(counters)
        record = assemble(
            scenario, children, cache, command, repeat_index, started_at, time.monotonic() - t0
        )
        record.timing_valid = timing_valid
        return enforce_cache_proof(record, scenario.cache_state, scenario.strategy)
    finally:
        if not keep:
            shutil.rmtree(base, ignore_errors=True)
