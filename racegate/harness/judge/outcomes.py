"""Outcome classification: pure functions from what a thread or process reported to an Outcome.

Tested without subprocesses or torch; the worker and the runner feed them text.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable

from racegate.harness.run.protocol import (
    DEADLINE_MARK,  # a thread short of its steps at the deadline
)
from racegate.harness.scenario.vocab import SEVERITY, Outcome

# The upstream messages (torch/_dynamo/eval_frame.py and torch/_dynamo/exc.py), matched by prefix
# so a reworded tail still classifies.
NESTED_FX_MESSAGE = (
    "Detected that you are using FX to symbolically trace a dynamo-optimized function"
)
RECOMPILE_MESSAGE = "Detected recompile when torch.compile stance is 'fail_on_recompile'"
# torch.OutOfMemoryError (CUDA's allocator), Python's MemoryError, and the CPU allocator's
# RuntimeError (c10/core/impl/alloc_cpu.cpp: "DefaultCPUAllocator: can't allocate memory").
_OOM_MARKERS = (
    "CUDA out of memory",
    "OutOfMemoryError",
    "out of memory",
    "MemoryError",
    "can't allocate memory",
)


def classify_error(error_text: str) -> Outcome:
    """Classify one exception, given its type and message chain as text (`Type: msg` lines)."""
    if NESTED_FX_MESSAGE in error_text:
        return Outcome.NESTED_FX_ERROR
    if RECOMPILE_MESSAGE in error_text:
        return Outcome.RECOMPILE_BLOCKED
    if any(m in error_text for m in _OOM_MARKERS):
        return Outcome.OOM
    if DEADLINE_MARK in error_text:
        return Outcome.HANG
    return Outcome.OTHER_ERROR


# What torch's recompile-reason analysis (guards.py, get_guard_fail_reason_helper; 2.11-2.15)
# says about an entry whose guards pass on re-check: a backend mismatch when the backend it is
# handed differs from the entry's (fail_on_recompile hands it the dynamo callback), else
# "Unexpected recompilation". Under fail_on_recompile after a warm-up, that entry matched: the
# cache lookup missed it (a cross-thread race; results/guard-lookup-spurious-miss).
_GUARDS_PASSED_MARKERS = ("BACKEND_MATCH failure", "Unexpected recompilation")


def is_spurious_recompile(error_text: str) -> bool:
    """A blocked recompile for which an existing cache entry's guards passed on re-check."""
    return RECOMPILE_MESSAGE in error_text and any(m in error_text for m in _GUARDS_PASSED_MARKERS)


def classify_thread(
    *, error_text: str | None, finished: bool, eager_fallbacks: int, compiled: bool
) -> Outcome:
    """One thread: an error wins; then a thread that never finished hung; then silent fallback."""
    if error_text:
        return classify_error(error_text)
    if not finished:
        return Outcome.HANG
    if compiled and eager_fallbacks > 0:
        return Outcome.SILENT_FALLBACK
    return Outcome.OK


def worst(outcomes: Iterable[Outcome]) -> Outcome:
    """The most severe outcome (SEVERITY order); OK for an empty sequence."""
    seen = set(outcomes)
    for outcome in SEVERITY:
        if outcome in seen:
            return outcome
    return Outcome.OK


def count(outcomes: Iterable[Outcome]) -> dict[str, int]:
    counts = Counter(str(o) for o in outcomes)
    return {str(o): counts.get(str(o), 0) for o in Outcome}
