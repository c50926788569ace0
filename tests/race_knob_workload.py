"""A test tool: a tiny CPU workload whose chance per run of hitting torch's real nested-FX race is
a knob (`preset="p=0.5"`), so the verdict's calibration can be tested on a 2-core CPU box.

The mechanism is the one racegate/harness/expectations/probes.toml calls
`compiled_call_during_make_fx`: a bare `make_fx` trace sets torch's process-global FX-tracing flag
(torch < 2.14), and a compiled call in another thread meanwhile raises torch's own "Detected that
you are using FX to symbolically trace a dynamo-optimized function". A `per_device` replica traces
each new shape lazily, in its own thread. Once per run (one draw per child process) the knob decides
whether that lazy trace is left open: with probability p it runs unguarded and stays inside
`make_fx` until another thread has made a compiled call (so the overlap happens); otherwise
the trace and every compiled call take one lock (they never overlap). Nothing else is
injected: whether a run fails is decided by torch's check in the other thread, so on a torch
whose flag is thread-local (2.14+) the control never fires, and `warmup`/`warmup_locked`
(traced on the main thread before the threads start, by the harness's warm-up) never fail
whatever the knob says.
"""

from __future__ import annotations

import contextlib
import random
import threading

import torch
from torch.fx.experimental.proxy_tensor import make_fx

from racegate.harness.scenario.workload_api import StepResult
from tests.busy import compute_for, one_intra_op_thread

STRATEGIES = ("per_device", "warmup", "warmup_locked")
_LINGER_S = 5.0  # an open trace waits at most this long for another thread's compiled call
# A step computes this long (torch ops, the GIL mostly released) so the threads' steps overlap
# and their work meets: a concurrent run (a sleeping step demands no CPU, and the judge's
# co-activity check would rightly call the run unproven).
_STEP_S = 0.1

_serial = threading.Lock()  # closes the window: lazy traces and compiled calls, one at a time
# Traces never overlap each other (two concurrent make_fx trip a different torch race, the
# process-wide module patcher: probes.toml's module_call_patch_leak); only a trace and a call do.
_trace_lock = threading.Lock()
_call_lock = threading.Lock()  # warmup_locked's process-wide lock around the compiled call
_calls = threading.Condition()  # guards _calls_by
_calls_by: dict[int, int] = {}  # thread ident -> compiled calls it made (returned or raised)
_compiled: dict[str, object] = {}  # per device, shared by that device's replicas (per_device)


def parse_knob(preset: str) -> float:
    """'p=0.25' -> 0.25; ValueError naming the preset otherwise."""
    name, sep, value = preset.partition("=")
    try:
        p = float(value) if sep and name.strip() == "p" else -1.0
    except ValueError:
        p = -1.0
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"race knob preset {preset!r}; expected 'p=X' with 0 <= X <= 1")
    return p


def _double(x: torch.Tensor) -> torch.Tensor:
    return x * 2 + 1


def _count_call() -> None:
    me = threading.get_ident()
    with _calls:
        _calls_by[me] = _calls_by.get(me, 0) + 1
        _calls.notify_all()


def _others_calls() -> int:
    """Compiled calls made by threads other than this one (caller holds _calls)."""
    me = threading.get_ident()
    return sum(n for ident, n in _calls_by.items() if ident != me)


def _wait_for_a_call(seen: int) -> None:
    with _calls:
        _calls.wait_for(lambda: _others_calls() > seen, timeout=_LINGER_S)


class _Replica:
    def __init__(self, device: torch.device, strategy: str, window_open: bool) -> None:
        self.device, self.strategy, self.window_open = device, strategy, window_open
        self.fn = _compiled.setdefault(
            str(device), torch.compile(_double, backend="eager", dynamic=False)
        )
        self.traced: set[int] = set()

    def _trace(self, shape: int) -> None:
        """The lazy compile's FX trace (as AOTAutograd's make_fx), in the calling thread."""
        with _calls:
            seen = _others_calls()

        def traced(x: torch.Tensor) -> torch.Tensor:
            if self.window_open and seen > 0:  # another thread already calls compiled code
                _wait_for_a_call(seen)
            return x + 1

        with _trace_lock:
            make_fx(traced)(torch.ones(shape + 1))
        self.traced.add(shape)

    def _call(self, shape: int) -> None:
        try:
            if self.strategy == "warmup_locked":
                with _call_lock:
                    self.fn(torch.ones(shape + 1, device=self.device))
            else:
                self.fn(torch.ones(shape + 1, device=self.device))
        finally:
            _count_call()

    def step(self, shape: int) -> StepResult:
        with contextlib.nullcontext() if self.window_open else _serial:
            if shape not in self.traced:
                self._trace(shape)
            self._call(shape)
        compute_for(_STEP_S)
        return StepResult(tokens=shape + 1)

    def eager_fallbacks(self) -> int:
        return 0


class RaceKnobWorkload:
    name = "race-knob"

    def __init__(self, preset: str) -> None:
        self.p = parse_knob(preset)
        # One draw per run (each run is a fresh child process), from the OS's entropy.
        self.window_open = random.SystemRandom().random() < self.p

    def strategies(self) -> tuple[str, ...]:
        return STRATEGIES

    def shapes(self) -> list[int]:
        return [0, 1, 2]

    def make_replica(self, device: torch.device, strategy: str, *, seed: int) -> _Replica:
        if strategy not in STRATEGIES:
            raise ValueError(f"race knob workload: unsupported strategy {strategy!r}")
        one_intra_op_thread()
        return _Replica(device, strategy, self.window_open)

    def flops_per_step(self, shape: int) -> float | None:
        return None


def make_workload(preset: str = "p=0.5") -> RaceKnobWorkload:
    return RaceKnobWorkload(preset)
