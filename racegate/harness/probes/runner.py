"""Deterministic probes of torch's cross-thread tracing state: registry, runner, isolation, table.

`python -m racegate.harness.probes.runner [--json]` runs them in one process; `run_probes_isolated`
runs that in a fresh subprocess. The probe bodies live in racegate/harness/probes/cases.py (they
import torch)."""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass
from enum import StrEnum
from pathlib import Path

from racegate.harness.run import cache_state, code_root, private_root
from racegate.harness.run.files import PUBLISHED, write_whole
from racegate.harness.scenario import versions

SCHEMA_VERSION = 1
DEFAULT_TIMEOUT_S = 20.0  # per probe; a healthy probe takes < 2 s, so this only bounds a hang
_IMPORT_ALLOWANCE_S = 90.0  # the child's `import torch` on a slow, cold machine
_PER_PROBE_SLACK_S = 5.0  # on top of timeout_s per probe, before the child counts as hung
_START = "racegate-probe: start "  # child → parent on stderr: which probe is running


class Verdict(StrEnum):
    HAZARD = "hazard"  # B was hit by A's state (detail: what B saw)
    SAFE = "safe"  # B was not affected
    NA = "n/a"  # the API (or device) the probe needs is absent here (detail: which)
    HANG = "hang"  # a thread did not reach its hold point or finish within the timeout
    ERROR = "error"  # the probe's own setup failed (detail: the exception)


@dataclass(frozen=True)
class Probe:
    name: str
    holds: str  # where thread A is held
    does: str  # what thread B does meanwhile
    hazard: str  # what a `hazard` verdict means


PROBES: dict[str, Probe] = {
    p.name: p
    for p in (
        Probe(
            "compiled_call_during_make_fx",
            "A inside a bare make_fx (Tracer.trace)",
            "B calls an already-compiled function",
            "B's call raised (nested-FX error)",
        ),
        Probe(
            "compiled_call_during_compile",
            "A inside make_fx inside a dynamo backend (as AOTAutograd/inductor)",
            "B calls an already-compiled function",
            "B's call raised (nested-FX error)",
        ),
        Probe(
            "is_compiling_leak",
            "A inside a dynamo backend callback",
            "B reads torch.compiler.is_compiling()",
            "B read True",
        ),
        Probe(
            "module_call_patch_leak",
            "A inside make_fx",
            "B calls its own nn.Module",
            "B's call went through A's patched nn.Module.__call__",
        ),
        Probe(
            "flag_stuck_after_overlap",
            "A inside make_fx, then E inside eager flex_attention's internal compile",
            "after both finish, a fresh thread reads the FX flag and calls a compiled fn",
            "the FX flag stayed set after every tracer returned",
        ),
        Probe(
            "config_override_thread_scope",
            "main sets torch._dynamo.config.error_on_nested_fx_trace = False",
            "a worker thread reads the value",
            "the worker saw False: one thread's override governs every thread",
        ),
        Probe(
            "fail_on_recompile_stance_thread_scope",
            "main sets torch.compiler.set_stance('fail_on_recompile')",
            "a worker thread triggers a recompile",
            "the worker recompiled: the stance does not guard worker threads",
        ),
        Probe(
            "compiled_call_during_export",
            "A inside torch.export (non-strict) forward",
            "B calls an already-compiled function",
            "B's call raised",
        ),
        Probe(
            "is_compiling_stuck_after_overlap",
            "C inside a dynamo compile, then A inside torch.export",
            "after both finish, a fresh thread reads torch.compiler.is_compiling()",
            "is_compiling() stayed True after every compile/export returned",
        ),
        Probe(
            "compiled_call_during_eager_flex_grad",
            "A inside eager flex_attention's per-call make_fx (grad; CUDA, or CPU up to 2.10)",
            "B calls an already-compiled function",
            "B's call raised (nested-FX error)",
        ),
        Probe(
            "cache_config_thread_scope",
            "main sets torch._inductor.config.force_disable_caches = True (a config cold cache)",
            "a worker thread reads the value",
            "the worker saw True: a main-thread cache setting governs every thread",
        ),
        Probe(
            "compile_friendly_flex_uncompiled",
            "A inside a dynamo backend callback",
            "B takes transformers' compile_friendly_flex_attention branch (is_compiling())",
            "B ran uncompiled flex_attention, silently (transformers 5.6-5.25)",
        ),
        Probe(
            "fx_node_meta_leak",
            "A inside torch.fx.traceback.preserve_node_meta() (AOTAutograd's graph capture)",
            "B reads torch.fx.traceback.has_preserved_node_meta()",
            "B read True: A's FX traceback metadata state is process-global",
        ),
        Probe(
            "gc_threshold_during_compile",
            "A inside a dynamo backend callback",
            "B reads gc.get_threshold()",
            "B saw A's compile-time GC thresholds: changed process-wide during a compile",
        ),
    )
}


@dataclass
class ProbeResult:
    name: str
    verdict: Verdict
    detail: str
    seconds: float
    torch_version: str
    device: str = "cpu"  # "cpu" or "cuda": the machine kind, for the expectations table

    def to_dict(self) -> dict[str, object]:
        return {**asdict(self), "verdict": str(self.verdict)}

    @classmethod
    def from_dict(cls, raw: dict[str, object]) -> ProbeResult:
        return cls(
            name=str(raw["name"]),
            verdict=Verdict(str(raw["verdict"])),
            detail=str(raw["detail"]),
            seconds=float(raw["seconds"]),  # type: ignore[arg-type]
            torch_version=str(raw["torch_version"]),
            device=str(raw.get("device", "cpu")),
        )


class ProbeRun(list[ProbeResult]):
    """The results of one run (a plain list to callers) plus where they ran and the wall time."""

    def __init__(
        self,
        results: Iterable[ProbeResult] = (),
        environment: dict[str, str] | None = None,
        wall_s: float = 0.0,
    ) -> None:
        super().__init__(results)
        self.environment: dict[str, str] = dict(environment or {})
        self.wall_s = wall_s


def select(names: Sequence[str] | None) -> list[Probe]:
    if not names:
        return list(PROBES.values())
    unknown = [n for n in names if n not in PROBES]
    if unknown:
        raise ValueError(f"unknown probe {unknown[0]!r}; choose from: {', '.join(PROBES)}")
    return [PROBES[n] for n in names]


def environment() -> dict[str, str]:
    """Where the probes ran (imports torch)."""
    installed = versions.software(import_torch=True)
    machine = versions.hardware(("cuda:0",))
    cuda = machine["cuda_device_count"] > 0
    return {
        "torch": installed["torch"],
        "python": installed["python"],
        "platform": platform.platform(),
        "device": "cuda" if cuda else "cpu",
        "device_name": machine["device_name"] if cuda else platform.processor() or "cpu",
        "cpu_count": str(machine["cpu_count"]),
    }


def run_probes(
    names: Sequence[str] | None = None,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    *,
    stop_on_hang: bool = False,
    on_start: Callable[[str], None] | None = None,
) -> ProbeRun:
    """Run the probes in this process, in registry order; each is bounded by `timeout_s`.

    After a `hang` the process may hold a deadlocked torch lock: pass `stop_on_hang` to return
    at once (`run_probes_isolated` then continues in a fresh process).
    """
    probes = select(names)
    t0 = time.perf_counter()
    import torch

    from racegate.harness.probes import cases as probe_cases
    from racegate.harness.probes import kit as probe_kit

    env = environment()
    run = ProbeRun(environment=env)
    for probe in probes:
        if on_start is not None:
            on_start(probe.name)
        start = time.perf_counter()
        try:
            hazard, detail = getattr(probe_cases, probe.name)(probe_kit.Deadline(timeout_s))
            verdict = Verdict.HAZARD if hazard else Verdict.SAFE
        except probe_kit.NotAvailable as e:
            verdict, detail = Verdict.NA, str(e)
        except probe_kit.ProbeHang as e:
            verdict, detail = Verdict.HANG, str(e)
        except Exception as e:
            verdict, detail = Verdict.ERROR, probe_kit.err(e)
        run.append(
            ProbeResult(
                probe.name,
                verdict,
                detail,
                round(time.perf_counter() - start, 3),
                torch.__version__,
                env["device"],
            )
        )
        if verdict is Verdict.HANG and stop_on_hang:
            break
    run.wall_s = round(time.perf_counter() - t0, 3)
    return run


def _run_child(
    remaining: list[str], timeout_s: float, python: str | None, tmp: Path
) -> tuple[subprocess.CompletedProcess[str] | None, str, str]:
    """One `python -m racegate.harness.probes.runner` child over `remaining`, its caches in `tmp`:
    (the process, or None if it was killed at its limit; its stderr; why it would have failed)."""
    pythonpath = code_root.pythonpath(current=os.environ.get("PYTHONPATH"))
    cmd = [
        python or sys.executable,
        "-m",
        "racegate.harness.probes.runner",
        "--stop-on-hang",
        "--timeout",
        str(timeout_s),
        "--json-out",
        str(tmp / "probes.json"),
        "--only",
        *remaining,
    ]
    limit = _IMPORT_ALLOWANCE_S + (timeout_s + _PER_PROBE_SLACK_S) * len(remaining)
    try:
        proc = subprocess.run(
            cmd,
            cwd=code_root.child_cwd(),
            capture_output=True,
            text=True,
            timeout=limit,
            # Every cache and temp dir inside this 0700 folder: the probes compile too.
            env={
                **os.environ,
                **cache_state.private_env(cache_state.private_dir(tmp / "root")),
                "PYTHONPATH": pythonpath,
            },
        )
        return proc, proc.stderr, f"probe subprocess exited {proc.returncode}"
    except subprocess.TimeoutExpired as e:
        stderr = e.stderr.decode() if isinstance(e.stderr, bytes) else e.stderr or ""
        return None, stderr, f"probe subprocess killed after {limit:g} s"


def _blame(run: ProbeRun, remaining: list[str], stderr: str, hung: bool, why: str) -> None:
    """A child that hung or died: the probe it last started gets the hang or error; if it
    started none (torch failed to import), every remaining probe is an error."""
    started = [ln[len(_START) :].strip() for ln in stderr.splitlines() if ln.startswith(_START)]
    culprit = started[-1] if started else remaining[0]
    tail = " | ".join(stderr.strip().splitlines()[-3:])
    run.append(
        ProbeResult(
            culprit,
            Verdict.HANG if hung else Verdict.ERROR,
            f"{why}; stderr: {tail}",
            0.0,
            run.environment.get("torch", "?"),
            run.environment.get("device", "?"),
        )
    )
    if not started:  # nothing ran at all: stop
        done = {r.name for r in run}
        run.extend(
            ProbeResult(n, Verdict.ERROR, why, 0.0, "?", "?") for n in remaining if n not in done
        )


def run_probes_isolated(
    names: Sequence[str] | None = None,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    *,
    python: str | None = None,
) -> ProbeRun:
    """Run the probes in fresh `python -m racegate.harness.probes.runner` subprocesses and parse
    their JSON.

    One subprocess normally; after a hang (or a killed/crashed child) the rest continue in a
    new one. `python` picks another interpreter (another torch); default: this one.
    """
    remaining = [p.name for p in select(names)]
    run, t0 = ProbeRun(), time.perf_counter()
    while remaining:
        with tempfile.TemporaryDirectory(prefix="racegate-probes-") as tmp:
            proc, stderr, why = _run_child(remaining, timeout_s, python, Path(tmp))
            out = Path(tmp) / "probes.json"
            if proc is not None and proc.returncode == 0 and out.exists():
                child = json.loads(out.read_text())
                run.extend(ProbeResult.from_dict(r) for r in child["results"])
                run.environment = child["environment"]
            else:
                _blame(run, remaining, stderr, proc is None, why)
        done = {r.name for r in run}
        remaining = [n for n in remaining if n not in done]
    order = [p.name for p in select(names)]
    run.sort(key=lambda r: order.index(r.name))
    run.wall_s = round(time.perf_counter() - t0, 3)
    return run


def results_to_json(results: Sequence[ProbeResult]) -> dict[str, object]:
    """The JSON document `--json` prints: schema version, environment, wall time, results."""
    return {
        "schema_version": SCHEMA_VERSION,
        "environment": getattr(results, "environment", {}),
        "wall_s": getattr(results, "wall_s", None),
        "results": [r.to_dict() for r in results],
    }


def format_table(results: Sequence[ProbeResult]) -> str:
    """A plain-text table: one row per probe (verdict, seconds, what B saw)."""
    env = getattr(results, "environment", {}) or {}
    torch_v = env.get("torch") or (results[0].torch_version if results else "?")
    head = f"torch {torch_v}"
    if env:
        head += f" · python {env.get('python')} · {env.get('device')} ({env.get('device_name')})"
    wall = getattr(results, "wall_s", None)
    head += f" · {len(results)} probes in {wall:.1f} s wall" if wall else ""
    width = max([len(r.name) for r in results] + [5])
    lines = [head, f"{'probe':<{width}}  {'verdict':<7}  {'s':>5}  detail"]
    lines += [
        f"{r.name:<{width}}  {r.verdict!s:<7}  {r.seconds:>5.2f}  {r.detail}" for r in results
    ]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    # first: torch's caches go into this process's root (racegate.harness.doors.cli)
    private_root.enter()
    parser = argparse.ArgumentParser(
        prog="python -m racegate.harness.probes.runner", description=__doc__.splitlines()[0]
    )
    parser.add_argument(
        "--only",
        nargs="+",
        default=None,
        metavar="NAME",
        help="probe names to run (default: all, in registry order)",
    )
    parser.add_argument(
        "--timeout",
        type=float,
        default=DEFAULT_TIMEOUT_S,
        help="seconds each probe may take before it is a hang (default: %(default)s)",
    )
    parser.add_argument("--json", action="store_true", help="print the results as JSON")
    parser.add_argument("--json-out", type=Path, default=None, help="also write the JSON here")
    parser.add_argument(
        "--isolated",
        action="store_true",
        help="run in a fresh subprocess (as run_probes_isolated does)",
    )
    parser.add_argument(
        "--stop-on-hang",
        action="store_true",
        help="stop after the first hang (the process may be deadlocked)",
    )
    parser.add_argument("--list", action="store_true", help="list the probes and exit")
    args = parser.parse_args(argv)
    if args.list:
        for p in PROBES.values():
            print(f"{p.name}\n  holds: {p.holds}\n  then:  {p.does}\n  hazard: {p.hazard}")
        return 0
    try:
        select(args.only)
    except ValueError as e:
        parser.error(str(e))
    if args.isolated:
        results = run_probes_isolated(args.only, args.timeout)
    else:

        def announce(name: str) -> None:
            print(f"{_START}{name}", file=sys.stderr, flush=True)

        results = run_probes(
            args.only, args.timeout, stop_on_hang=args.stop_on_hang, on_start=announce
        )
    doc = json.dumps(results_to_json(results), indent=2)
    if args.json_out is not None:
        write_whole(args.json_out, doc + "\n", mode=PUBLISHED)
    print(doc if args.json else format_table(results), flush=True)
    if any(r.verdict is Verdict.HANG for r in results) and not args.isolated:
        os._exit(0)  # a deadlocked daemon thread could block interpreter shutdown
    return 0


if __name__ == "__main__":
    sys.exit(main())
