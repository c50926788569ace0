"""Tools the probe bodies share: bounded holds and threads, fresh compiled functions, flag access.

Every wait here is bounded by the probe's `Deadline`; nothing sleeps. Imports torch.
"""

from __future__ import annotations

import itertools
import threading
import time
import types
from collections.abc import Callable
from typing import Any

import torch

_fresh_ids = itertools.count()


class NotAvailable(Exception):
    """The API a probe needs is absent in this torch (or this machine); the message says which."""


class ProbeHang(Exception):
    """A thread did not reach its hold point or finish in time; torch may be deadlocked."""


class Deadline:
    """One probe's time budget: every wait in the probe takes what is left of it."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.end = time.monotonic() + seconds

    def left(self) -> float:
        return max(0.01, self.end - time.monotonic())


class Hold:
    """Parks one thread at `park()` until the driver calls `release()`; both waits are bounded."""

    def __init__(self, deadline: Deadline, where: str) -> None:
        self.deadline, self.where = deadline, where
        self.arrived, self.go = threading.Event(), threading.Event()

    def park(self) -> None:
        self.arrived.set()
        if not self.go.wait(self.deadline.left()):
            raise ProbeHang(f"thread held {self.where} was never released")

    def wait_arrived(self) -> None:
        if not self.arrived.wait(self.deadline.left()):
            raise ProbeHang(
                f"no thread reached the hold point {self.where} within {self.deadline.seconds:g} s"
            )

    def release(self) -> None:
        self.go.set()


class Worker(threading.Thread):
    """A daemon thread (a deadlocked torch call cannot block exit) keeping its result or error."""

    def __init__(self, fn: Callable[[], Any], name: str) -> None:
        super().__init__(name=name, daemon=True)
        self.fn = fn
        self.value: Any = None
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            self.value = self.fn()
        except BaseException as e:  # what the thread saw is the probe's observation
            self.error = e

    def finish(self, deadline: Deadline, doing: str) -> Worker:
        self.join(deadline.left())
        if self.is_alive():
            raise ProbeHang(
                f"thread {self.name} ({doing}) still running after {deadline.seconds:g} s"
            )
        return self

    def check(self, doing: str) -> Worker:
        """Raise if the thread failed in its setup role (not an observation)."""
        if self.error is not None and not isinstance(self.error, ProbeHang):
            raise RuntimeError(f"thread {self.name} failed {doing}: {err(self.error)}")
        return self


def in_thread(fn: Callable[[], Any], name: str, deadline: Deadline, doing: str) -> Worker:
    """Run `fn` in a fresh thread and wait for it (bounded)."""
    worker = Worker(fn, name)
    worker.start()
    return worker.finish(deadline, doing)


def with_held(
    hold: Hold, a_fn: Callable[[], Any], b_fn: Callable[[], Any], d: Deadline, doing: str
) -> Worker:
    """Start A, wait until it is parked at `hold`, run B to completion, release A, join it."""
    a = Worker(a_fn, "racegate-probe-A")
    a.start()
    try:
        hold.wait_arrived()
        b = in_thread(b_fn, "racegate-probe-B", d, doing)
    finally:
        hold.release()
    a.finish(d, f"held {hold.where}").check(hold.where)
    return b


def err(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return f"{type(e).__name__}: {text[0] if text else ''}".rstrip(": ")


def fx_flag() -> bool:
    """The FX tracing flag as the calling thread sees it (global up to 2.13, thread-local after)."""
    st = torch.fx._symbolic_trace
    getter = getattr(st, "_get_is_fx_tracing", None)  # 2.14+: threading.local (PR #168999)
    return bool(getter()) if getter else bool(st._is_fx_tracing_flag)


def reset_fx_flag() -> None:
    st = torch.fx._symbolic_trace
    if hasattr(st, "_set_is_fx_tracing"):
        st._set_is_fx_tracing(False)
    else:
        st._is_fx_tracing_flag = False


def fresh(template: Callable[..., Any]) -> Callable[..., Any]:
    """A copy of `template` with its own code object, so dynamo's cache never carries over."""
    name = f"{template.__name__}_{next(_fresh_ids)}"
    code = template.__code__.replace(co_name=name, co_qualname=name)
    return types.FunctionType(code, template.__globals__, name)


def _victim_fn(x: torch.Tensor) -> torch.Tensor:
    return x * 2 + 1


def victim() -> tuple[Callable[..., Any], torch.Tensor]:
    """A compiled function already compiled in this thread, so thread B's call is a cache hit."""
    fn = torch.compile(fresh(_victim_fn), backend="eager")
    x = torch.ones(4)
    fn(x)
    return fn, x


def call_seen(worker: Worker) -> tuple[bool, str]:
    """(hazard, detail) from thread B's compiled call: any exception is what A's state did to B."""
    if worker.error is None:
        return False, "B's compiled call returned normally"
    return True, f"B's compiled call raised {err(worker.error)}"


def blocking_make_fx(hold: Hold) -> Callable[[], Any]:
    """A bare `make_fx` trace that parks inside the traced function (inside `Tracer.trace`)."""
    from torch.fx.experimental.proxy_tensor import make_fx

    def traced(x: torch.Tensor) -> torch.Tensor:
        hold.park()
        return x + 1

    return lambda: make_fx(traced)(torch.ones(2))


def _target_fn(x: torch.Tensor) -> torch.Tensor:
    return x.sin() + 1


def blocking_compile(hold: Hold, inside_make_fx: bool) -> Callable[[], Any]:
    """A real dynamo compile whose backend parks, inside `make_fx` when asked (as AOTAutograd
    and inductor trace), else in the backend callback itself."""
    from torch.fx.experimental.proxy_tensor import make_fx

    def backend(gm: torch.fx.GraphModule, example_inputs: list[torch.Tensor]) -> Any:
        if not inside_make_fx:
            hold.park()
            return gm.forward

        def traced(*args: torch.Tensor) -> Any:
            hold.park()
            return gm(*args)

        make_fx(traced)(*example_inputs)
        return gm.forward

    compiled = torch.compile(fresh(_target_fn), backend=backend)
    return lambda: compiled(torch.ones(3))


def blocking_export(hold: Hold) -> Callable[[], Any]:
    """A non-strict `torch.export.export` that parks inside the module's forward."""
    export = getattr(getattr(torch, "export", None), "export", None)
    if export is None:
        raise NotAvailable("torch.export.export is absent")

    class Held(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            hold.park()
            return x + 1

    # strict=False is export's make_fx path; in a strict export dynamo would trace `park`.
    return lambda: export(Held(), (torch.ones(2),), strict=False)
