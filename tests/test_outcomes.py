"""classify() and friends: pure functions, tested without subprocesses."""

from __future__ import annotations

import signal

import pytest

from harness import outcomes
from harness.vocab import Outcome

NESTED = (
    "RuntimeError: Detected that you are using FX to symbolically trace a dynamo-optimized "
    "function. This is not supported at the moment."
)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (NESTED, Outcome.NESTED_FX_ERROR),
        ("InternalTorchDynamoError: wrapped\nRuntimeError: " + NESTED, Outcome.NESTED_FX_ERROR),
        (
            "RuntimeError: Detected recompile when torch.compile stance is 'fail_on_recompile'",
            Outcome.RECOMPILE_BLOCKED,
        ),
        ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate", Outcome.OOM),
        ("ValueError: shapes do not match", Outcome.OTHER_ERROR),
        ("TimeoutError: racegate deadline: deadline reached after 3 of 9 steps", Outcome.HANG),
    ],
)
def test_classify_error(text: str, expected: Outcome) -> None:
    assert outcomes.classify_error(text) is expected


def test_classify_thread_order() -> None:
    kw = dict(finished=True, eager_fallbacks=0, compiled=True)
    assert outcomes.classify_thread(error_text=None, **kw) is Outcome.OK
    assert outcomes.classify_thread(error_text=NESTED, **kw) is Outcome.NESTED_FX_ERROR
    assert (
        outcomes.classify_thread(error_text=None, finished=False, eager_fallbacks=0, compiled=True)
        is Outcome.HANG
    )
    assert (
        outcomes.classify_thread(error_text=None, finished=True, eager_fallbacks=3, compiled=True)
        is Outcome.SILENT_FALLBACK
    )
    # An uncompiled strategy runs eagerly by design: not a fallback.
    assert (
        outcomes.classify_thread(error_text=None, finished=True, eager_fallbacks=3, compiled=False)
        is Outcome.OK
    )


def test_classify_exit() -> None:
    assert outcomes.classify_exit(0, False) is None
    assert outcomes.classify_exit(0, True) is Outcome.HANG
    assert outcomes.classify_exit(-signal.SIGSEGV, False) is Outcome.CRASH
    assert outcomes.classify_exit(-signal.SIGKILL, False) is Outcome.OOM
    assert "SIGSEGV" in outcomes.describe_exit(-signal.SIGSEGV)


def test_worst_and_count() -> None:
    assert outcomes.worst([Outcome.OK, Outcome.SILENT_FALLBACK, Outcome.NESTED_FX_ERROR]) is (
        Outcome.NESTED_FX_ERROR
    )
    assert outcomes.worst([Outcome.NESTED_FX_ERROR, Outcome.CRASH]) is Outcome.CRASH
    assert outcomes.worst([]) is Outcome.OK
    counts = outcomes.count([Outcome.OK, Outcome.OK, Outcome.HANG])
    assert counts["ok"] == 2 and counts["hang"] == 1 and counts["crash"] == 0


def test_max_concurrency() -> None:
    assert outcomes.max_concurrency([(0, 10), (5, 15), (6, 7)]) == 3
    assert outcomes.max_concurrency([(0, 1), (1, 2), (2, 3)]) == 1  # touching is not overlapping
    assert outcomes.max_concurrency([]) == 0
    with pytest.raises(ValueError, match="ends before"):
        outcomes.max_concurrency([(2, 1)])
