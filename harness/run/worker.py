"""The isolated child process: build replicas, warm up if asked, drive threads, write a result.

Run as `python -m harness.run.worker RUN_DIR` by harness.run.runner, with the scenario in
RUN_DIR/scenario.json. Thread outcomes are appended to RUN_DIR/progress.jsonl as they
happen, so a crash later in the run loses nothing already known.
"""

from __future__ import annotations

import faulthandler
import json
import os
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any

import torch

from harness.run import cache_state, threads
from harness.scenario import Scenario
from harness.vocab import WARMED_UP, CacheState, Schedule, Strategy
from harness.workload_api import WorkloadSpec, check_replica, load_workload


def versions() -> dict[str, str]:
    out = {"python": sys.version.split()[0], "torch": torch.__version__}
    out["cuda"] = str(torch.version.cuda)
    for name in ("transformers", "triton"):
        try:
            out[name] = __import__(name).__version__
        except Exception:
            out[name] = "absent"
    return out


def hardware(devices: tuple[str, ...]) -> dict[str, Any]:
    info: dict[str, Any] = {"cpu_count": os.cpu_count(), "cuda_device_count": 0}
    if torch.cuda.is_available():
        info["cuda_device_count"] = torch.cuda.device_count()
        names = [torch.cuda.get_device_name(torch.device(d)) for d in devices if d != "cpu"]
        info["device_names"] = names
        info["device_name"] = names[0] if names else "cpu"
    else:
        info["device_name"] = "cpu"
    return info


def wait_for_siblings(gate: dict[str, Any], me: int, until: float) -> bool:
    """The `processes` strategy's start barrier: announce this process ready, wait for all.

    On files, not multiprocessing.Barrier: the processes are independent `python -m
    harness.run.worker` children of the runner, with no multiprocessing parent to share one.
    True when every sibling arrived before `until` (time.monotonic()).
    """
    folder = Path(gate["dir"])
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"ready-{me}").touch()
    while True:
        if sum(1 for _ in folder.glob("ready-*")) >= int(gate["parties"]):
            return True
        if time.monotonic() >= until:
            return False
        time.sleep(0.005)


def runner_start(spec: dict[str, Any], timeout_s: float) -> float:
    """When the runner started this child (time.monotonic(); Linux's clock is system-wide), so
    the time spent importing torch counts against the run's budget; this process's own start
    when the spec has none or a value from another clock."""
    now = time.monotonic()
    t0 = spec.get("runner_t0")
    return t0 if isinstance(t0, (int, float)) and 0 <= now - t0 < timeout_s else now


def _append(path: Path, event: dict[str, Any]) -> None:
    with path.open("a") as fh:
        fh.write(json.dumps(event) + "\n")
        fh.flush()
        os.fsync(fh.fileno())


def thread_event(run: threads.ThreadRun) -> dict[str, Any]:
    return {
        "event": "thread",
        "index": run.index,
        "device": run.device,
        "finished": run.finished,
        "error_text": run.error_text,
        "eager_fallbacks": run.eager_fallbacks,
        "span": [run.start, run.end] if run.start is not None and run.end is not None else None,
        "steps": [[s.shape, s.seconds, s.tokens, s.compiled_shape, s.mem_peak] for s in run.steps],
    }


def warm_up(runs: list[threads.ThreadRun], shapes: list[int]) -> float:
    """The `warmup` strategy: every replica steps every shape once, in this one thread."""
    t0 = time.perf_counter()
    for run in runs:
        for shape in shapes:
            run.replica.step(shape)
        threads.sync_device(run.device)
    torch.compiler.set_stance("fail_on_recompile")
    return time.perf_counter() - t0


def exit_with_parent() -> None:
    """Leave when the runner dies (e.g. pytest-timeout's os._exit): never run on as an orphan."""
    parent = os.getppid()

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(1.0)
        os._exit(3)

    threading.Thread(target=watch, name="racegate-parent-watch", daemon=True).start()


def main(run_dir: Path) -> int:
    exit_with_parent()
    spec = json.loads((run_dir / "scenario.json").read_text())
    scenario = Scenario.from_json(spec["scenario"])
    mode = spec.get("mode", "run")  # "run" | "prime" | "process" (one device of `processes`)
    progress = run_dir / "progress.jsonl"
    # On SIGUSR1 (the runner's hang timeout) write every thread's stack before being killed.
    stacks = (run_dir / "stacks.txt").open("w")
    faulthandler.enable(file=stacks, all_threads=True)  # a segfault leaves every stack too
    faulthandler.register(signal.SIGUSR1, file=stacks, all_threads=True)
    # And from faulthandler's own watchdog thread just before the runner's deadline: it needs
    # no signal delivery and no GIL, so it works even if torch deadlocks holding the GIL or
    # installs its own SIGUSR1 handler.
    started = runner_start(spec, scenario.timeout_s)
    faulthandler.dump_traceback_later(
        max(0.1, started + scenario.timeout_s * 0.97 - time.monotonic()), exit=False, file=stacks
    )
    if scenario.switch_interval_s:
        sys.setswitchinterval(scenario.switch_interval_s)
    deadline = started + scenario.timeout_s * 0.9

    workload = load_workload(
        WorkloadSpec(scenario.workload, dict(scenario.extra, preset=scenario.preset))
    )
    shapes = list(workload.shapes())
    strategy = Strategy.PER_DEVICE if scenario.strategy is Strategy.PROCESSES else scenario.strategy
    devices = list(spec.get("process_devices", scenario.devices))
    per_device = 1 if mode in ("prime", "process") else scenario.threads_per_device
    # A prime builds one replica per device: compiled artifacts are keyed by device.

    runs: list[threads.ThreadRun] = []
    for device in devices:
        for _ in range(per_device):
            index = spec.get("thread_offset", 0) + len(runs)
            kwargs = {}
            if scenario.target_devices:  # the incident's topology: the target on other GPUs
                targets = scenario.target_devices
                target = targets[scenario.devices.index(device) % len(targets)]
                kwargs["target_device"] = torch.device(target)
            replica = workload.make_replica(
                torch.device(device), str(strategy), seed=scenario.seed + index, **kwargs
            )
            check_replica(replica, scenario.workload)
            runs.append(threads.ThreadRun(index, device, replica))
    # The hardware goes out now too: a run that hangs later writes no result to carry it.
    built = {"event": "built", "threads": len(runs), "hardware": hardware(tuple(devices))}
    _append(progress, built | {"at": time.monotonic()})

    warmup_s = None
    if mode == "prime":
        plan_shapes = shapes
        warmup_s = warm_up(runs, shapes)
        torch.compiler.set_stance("default")
        for run in runs:  # Steps recorded for the prime's own record, not throughput.
            run.finished = True
    else:
        if scenario.strategy in WARMED_UP:
            warmup_s = warm_up(runs, shapes)
            _append(progress, {"event": "warmed_up", "seconds": warmup_s})
        deleted: dict[str, int] = {}

        def delete_cache() -> None:
            root = Path(os.environ["TORCHINDUCTOR_CACHE_DIR"]).parent
            deleted["bytes"] = cache_state.delete_cache(root)
            _append(
                progress,
                {"event": "cache_deleted", "bytes": deleted["bytes"], "at": time.monotonic()},
            )

        is_deleted = scenario.cache_state is CacheState.DELETED
        plan = threads.Plan(
            schedule=scenario.schedule,
            warmup_steps=scenario.warmup_steps,
            steps=scenario.steps,
            shapes=shapes,
            deadline=deadline,
            fail_on_recompile=scenario.strategy in WARMED_UP,
            on_first_steady_step=delete_cache if is_deleted else None,
            switch_shape_after_hook=is_deleted,
        )
        plan_shapes = shapes
        if "start_gate" in spec:
            # Half the time left at most: a sibling that died before the gate must not turn
            # this process's run into a hang (the concurrency check still sees a late start).
            limit = time.monotonic() + (deadline - time.monotonic()) / 2
            met = wait_for_siblings(spec["start_gate"], spec.get("thread_offset", 0), limit)
            _append(progress, {"event": "start_gate", "met": met, "at": time.monotonic()})
        grace = min(30.0, max(2.0, scenario.timeout_s * 0.05))  # inside the runner's timeout
        hung = threads.run_threads(runs, plan, join_grace_s=grace)
        if hung:
            faulthandler.dump_traceback(file=stacks, all_threads=True)
            stacks.flush()
        for run in runs:
            _append(progress, thread_event(run))

    result = {
        "mode": mode,
        "threads": [thread_event(r) for r in runs],
        "versions": versions(),
        "hardware": built["hardware"],
        "cache_counters": cache_state.cache_counters(),
        "warmup_s": warmup_s,
        "shapes": plan_shapes,
        "flops_per_step": {str(s): workload.flops_per_step(s) for s in shapes},
        "schedule": str(scenario.schedule if mode == "run" else Schedule.BARRIER),
    }
    faulthandler.cancel_dump_traceback_later()
    tmp = run_dir / "result.json.tmp"
    tmp.write_text(json.dumps(result))
    tmp.replace(run_dir / "result.json")
    stacks.flush()
    # Hung threads cannot be joined; leave without running interpreter teardown on them.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1])))
