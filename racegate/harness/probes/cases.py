"""The probe bodies: each forces one cross-thread interleaving in torch and reports what B saw.

Each takes a `Deadline` and returns (hazard, detail), or raises `NotAvailable`/`ProbeHang`.
The registry and verdicts live in `racegate.harness.probes.runner`; shared tools in
`racegate.harness.probes.kit`."""

from __future__ import annotations

import gc
import sys
import threading
from typing import Any

import torch

from racegate.harness.probes.kit import (
    Deadline,
    Hold,
    NotAvailable,
    Worker,
    blocking_compile,
    blocking_export,
    blocking_make_fx,
    call_seen,
    err,
    fresh,
    fx_flag,
    in_thread,
    reset_fx_flag,
    victim,
    with_held,
)


def compiled_call_during_make_fx(d: Deadline) -> tuple[bool, str]:
    fn, x = victim()
    hold = Hold(d, "inside make_fx")
    return call_seen(with_held(hold, blocking_make_fx(hold), lambda: fn(x), d, "compiled call"))


def compiled_call_during_compile(d: Deadline) -> tuple[bool, str]:
    fn, x = victim()
    hold = Hold(d, "inside make_fx inside a dynamo backend")
    a_fn = blocking_compile(hold, inside_make_fx=True)
    return call_seen(with_held(hold, a_fn, lambda: fn(x), d, "compiled call"))


def is_compiling_leak(d: Deadline) -> tuple[bool, str]:
    hold = Hold(d, "inside a dynamo backend callback")
    a_fn = blocking_compile(hold, inside_make_fx=False)
    seen = with_held(hold, a_fn, torch.compiler.is_compiling, d, "is_compiling()").value
    return bool(seen), f"B read torch.compiler.is_compiling() == {seen} while A compiled"


class _StackSpy(torch.nn.Module):
    """Reports whether its own call went through an FX tracer's `module_call_wrapper`."""

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, bool]:
        frame: Any = sys._getframe()
        wrapped = False
        while frame is not None:
            wrapped = wrapped or frame.f_code.co_name == "module_call_wrapper"
            frame = frame.f_back
        return x + 1, wrapped


def module_call_patch_leak(d: Deadline) -> tuple[bool, str]:
    spy, x = _StackSpy(), torch.ones(2)
    hold = Hold(d, "inside make_fx")

    def b_fn() -> tuple[bool, bool]:
        patched = torch.nn.Module.__call__ is not torch.fx._symbolic_trace._orig_module_call
        return spy(x)[1], patched

    b = with_held(hold, blocking_make_fx(hold), b_fn, d, "nn.Module call")
    if b.error is not None:
        return True, f"B's nn.Module call raised {err(b.error)}"
    wrapped, patched = b.value
    return wrapped, (
        f"B's nn.Module call {'went' if wrapped else 'did not go'} through A's Tracer "
        f"module_call_wrapper (B saw nn.Module.__call__ {'patched' if patched else 'unpatched'})"
    )


def _score_mod(s: torch.Tensor, b: Any, h: Any, q: Any, kv: Any) -> torch.Tensor:
    return s


def flag_stuck_after_overlap(d: Deadline) -> tuple[bool, str]:
    """A traces; E enters eager flex (saves A's flag, clears it); A ends; E ends (restores)."""
    from torch.nn.attention.flex_attention import flex_attention

    handler = getattr(torch._dynamo, "callback_handler", None)
    if handler is None:
        raise NotAvailable("torch._dynamo.callback_handler (the compile-start hook) is absent")
    fn, x = victim()
    hold_a, hold_e = Hold(d, "inside make_fx"), Hold(d, "inside eager flex_attention's compile")
    qkv = [torch.randn(1, 1, 16, 8) for _ in range(3)]
    score_mod = fresh(_score_mod)  # a new score_mod makes flex's internal compile run again
    e = Worker(lambda: flex_attention(*qkv, score_mod=score_mod), "racegate-probe-E")
    a = Worker(blocking_make_fx(hold_a), "racegate-probe-A")

    def on_start(*_: Any) -> None:
        if threading.current_thread() is e:
            hold_e.park()

    handler.register_start_callback(on_start)
    try:
        a.start()
        hold_a.wait_arrived()  # A is inside Tracer.trace: flag set
        e.start()
        hold_e.wait_arrived()  # E is inside flex's _set_compilation_env: saved A's flag, cleared it
        hold_a.release()
        a.finish(d, "make_fx")  # A restores the flag it saw on entry (False)
        hold_e.release()
        e.finish(d, "eager flex_attention")  # E restores the flag it saved (A's True)
    finally:
        hold_a.release()
        hold_e.release()
        handler.remove_start_callback(on_start)
    a.check("in make_fx")
    e.check("in eager flex_attention")
    stuck = bool(in_thread(fx_flag, "racegate-probe-reader", d, "read the FX flag").value)
    call = in_thread(lambda: fn(x), "racegate-probe-B", d, "compiled call")
    if stuck:
        reset_fx_flag()
    after = f"raised {err(call.error)}" if call.error else "returned normally"
    return stuck, (
        f"after both threads finished, a fresh thread read the FX flag as {stuck} "
        f"and its compiled call {after}"
    )


def config_override_thread_scope(d: Deadline) -> tuple[bool, str]:
    cfg = torch._dynamo.config
    prior = cfg.error_on_nested_fx_trace
    cfg.error_on_nested_fx_trace = False  # as the incident's "fix" did, in the main thread
    try:
        seen = in_thread(
            lambda: cfg.error_on_nested_fx_trace, "racegate-probe-B", d, "read config"
        ).value
    finally:
        cfg.error_on_nested_fx_trace = prior
    return seen is False, (
        f"main set torch._dynamo.config.error_on_nested_fx_trace = False; a worker read {seen}"
    )


def _stanced_fn(x: torch.Tensor) -> torch.Tensor:
    return x + 1


def fail_on_recompile_stance_thread_scope(d: Deadline) -> tuple[bool, str]:
    set_stance = getattr(torch.compiler, "set_stance", None)
    if set_stance is None:
        raise NotAvailable("torch.compiler.set_stance is absent")
    fn = torch.compile(fresh(_stanced_fn), backend="eager")
    fn(torch.ones(2))
    with set_stance("fail_on_recompile"):  # restores the prior stance on exit
        w = in_thread(lambda: fn(torch.ones(2, 2)), "racegate-probe-B", d, "recompile")
    if w.error is None:
        return True, "main set fail_on_recompile; the worker's recompile went through"
    if "fail_on_recompile" not in str(w.error):
        raise RuntimeError(f"the worker's recompile failed for another reason: {err(w.error)}")
    return False, f"main set fail_on_recompile; the worker's recompile raised {err(w.error)}"


def compiled_call_during_export(d: Deadline) -> tuple[bool, str]:
    fn, x = victim()
    hold = Hold(d, "inside torch.export (non-strict)")
    a_fn = blocking_export(hold)

    def b_fn() -> tuple[bool, str | None]:
        compiling = torch.compiler.is_compiling()
        try:
            fn(x)
        except Exception as e:
            return compiling, err(e)
        return compiling, None

    compiling, error = with_held(hold, a_fn, b_fn, d, "compiled call").value
    seen = f"raised {error}" if error else "returned normally"
    return error is not None, f"B's compiled call {seen} (B read is_compiling() == {compiling})"


def is_compiling_stuck_after_overlap(d: Deadline) -> tuple[bool, str]:
    """C compiles (2.13+: sets the flag); A exports (saves True); C ends; A ends (restores)."""
    hold_c = Hold(d, "inside a dynamo backend callback")
    hold_a = Hold(d, "inside torch.export (non-strict)")
    c = Worker(blocking_compile(hold_c, inside_make_fx=False), "racegate-probe-C")
    a = Worker(blocking_export(hold_a), "racegate-probe-A")
    try:
        c.start()
        hold_c.wait_arrived()
        a.start()
        hold_a.wait_arrived()
        hold_c.release()
        c.finish(d, "compile")
        hold_a.release()
        a.finish(d, "export")
    finally:
        hold_a.release()
        hold_c.release()
    c.check("in its compile")
    a.check("in torch.export")
    stuck = bool(in_thread(torch.compiler.is_compiling, "racegate-probe-B", d, "read").value)
    if stuck:
        torch.compiler._is_compiling_flag = False
    return stuck, f"after both threads finished, a fresh thread read is_compiling() == {stuck}"


_park: dict[str, Any] = {}  # the custom op, and the Hold and thread it parks


def _park_op() -> Any:
    """`racegate::park(x) -> x`; its fake kernel parks thread A while A is FX-tracing.

    Registered once per process (a probe-only op in its own namespace).
    """
    if "op" in _park:
        return _park["op"]

    @torch.library.custom_op("racegate::park", mutates_args=())
    def park(x: torch.Tensor) -> torch.Tensor:
        return x.clone()

    @park.register_fake
    def _(x: torch.Tensor) -> torch.Tensor:
        hold = _park.get("hold")
        if hold is not None and threading.current_thread() is _park.get("thread") and fx_flag():
            hold.park()
        return torch.empty_like(x)

    park.register_autograd(lambda ctx, grad: grad)
    park.register_vmap(lambda info, in_dims, x: (x.clone(), in_dims[0]))
    _park["op"] = park
    return park


def compiled_call_during_eager_flex_grad(d: Deadline) -> tuple[bool, str]:
    device = "cuda" if torch.cuda.is_available() else "cpu"
    from torch.nn.attention.flex_attention import flex_attention

    park = _park_op()
    qkv = [torch.randn(1, 1, 128, 16, device=device, requires_grad=True) for _ in range(3)]

    def score_mod(s: torch.Tensor, b: Any, h: Any, q: Any, kv: Any) -> torch.Tensor:
        return park(s)

    def a_fn() -> Any:
        return flex_attention(*qkv, score_mod=score_mod)

    # The first call compiles flex's wrapper; the held call is steady state, where the grad
    # path runs make_fx (create_fw_bw_graph) on every call.
    warm = in_thread(a_fn, "racegate-probe-warmup", d, "first eager flex_attention")
    if isinstance(warm.error, NotImplementedError):  # e.g. no flex backward on CPU (2.11+)
        raise NotAvailable(f"eager flex_attention with grad on {device}: {err(warm.error)}")
    warm.check("to warm up")
    fn, x = victim()
    hold = Hold(d, "inside eager flex_attention's per-call make_fx (grad)")
    a = Worker(a_fn, "racegate-probe-A")
    _park.update(hold=hold, thread=a)
    try:
        a.start()
        hold.wait_arrived()
        b = in_thread(lambda: fn(x), "racegate-probe-B", d, "compiled call")
    finally:
        hold.release()
        _park.pop("hold", None)
    a.finish(d, "eager flex_attention with grad").check("in eager flex_attention")
    return call_seen(b)


def cache_config_thread_scope(d: Deadline) -> tuple[bool, str]:
    cfg = torch._inductor.config
    prior = cfg.force_disable_caches
    cfg.force_disable_caches = True  # a config-based cold cache, set in the main thread
    try:
        seen = in_thread(
            lambda: cfg.force_disable_caches, "racegate-probe-B", d, "read config"
        ).value
    finally:
        cfg.force_disable_caches = prior
    return seen is True, (
        f"main set torch._inductor.config.force_disable_caches = True; a worker read {seen}"
    )


def _flex_qkv() -> list[torch.Tensor]:
    return [torch.randn(1, 1, 16, 8) for _ in range(3)]


def compile_friendly_flex_uncompiled(d: Deadline) -> tuple[bool, str]:
    """B takes transformers' compile_friendly_flex_attention branch while A compiles.

    transformers 5.6-5.25 (integrations/flex_attention.py) calls plain `flex_attention` when
    `is_torchdynamo_compiling()` (= torch.compiler.is_compiling()) is true, else its compiled
    singleton; the branch is reproduced here so the probe needs torch only.
    """
    from torch.nn.attention.flex_attention import flex_attention

    compiled = torch.compile(flex_attention, backend="eager")
    qkv = _flex_qkv()
    # Warm both paths: B's calls are cache hits, not compiles queued behind A's compile lock
    # (eager flex_attention compiles its own wrapper with backend="eager" on first use).
    compiled(*qkv)
    flex_attention(*qkv)

    def b_fn() -> bool:
        uncompiled = torch.compiler.is_compiling()
        (flex_attention if uncompiled else compiled)(*qkv)
        return uncompiled

    hold = Hold(d, "inside a dynamo backend callback")
    b = with_held(hold, blocking_compile(hold, inside_make_fx=False), b_fn, d, "flex call")
    if b.error is not None:
        return True, f"B's flex call raised {err(b.error)}"
    took = "uncompiled flex_attention" if b.value else "the compiled flex"
    return bool(b.value), f"while A compiled, B's compile_friendly branch ran {took} (no error)"


def fx_node_meta_leak(d: Deadline) -> tuple[bool, str]:
    """A inside fx.traceback.preserve_node_meta() (as AOTAutograd's graph capture enters it)."""
    tb = torch.fx.traceback
    if not hasattr(tb, "preserve_node_meta") or not hasattr(tb, "has_preserved_node_meta"):
        raise NotAvailable("torch.fx.traceback.preserve_node_meta is absent")
    hold = Hold(d, "inside fx.traceback.preserve_node_meta()")

    def a_fn() -> None:
        with tb.preserve_node_meta():
            hold.park()

    seen = with_held(hold, a_fn, tb.has_preserved_node_meta, d, "read node-meta state").value
    return bool(seen), f"B read fx.traceback.has_preserved_node_meta() == {seen} while A traced"


def gc_threshold_during_compile(d: Deadline) -> tuple[bool, str]:
    before = gc.get_threshold()
    hold = Hold(d, "inside a dynamo backend callback")
    a_fn = blocking_compile(hold, inside_make_fx=False)
    during = with_held(hold, a_fn, gc.get_threshold, d, "read gc thresholds").value
    after = gc.get_threshold()
    return tuple(during) != before, (
        f"gc thresholds before {before}, read by B while A compiled {tuple(during)}, after {after}"
    )
