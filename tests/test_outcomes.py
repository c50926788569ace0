"""classify() and friends: pure functions, tested without subprocesses."""

from __future__ import annotations

import pytest

from racegate.harness.judge import outcomes
from racegate.harness.judge.suite import SPURIOUS_NOTE, explain
from racegate.harness.scenario.vocab import Outcome
from tests.test_baselines import make_record

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
        ("MemoryError", Outcome.OOM),
        (
            "RuntimeError: [enforce fail at alloc_cpu.cpp:127] err == 0. DefaultCPUAllocator: "
            "can't allocate memory: you tried to allocate 4294967296 bytes.",
            Outcome.OOM,
        ),
        ("ValueError: shapes do not match", Outcome.OTHER_ERROR),
        ("TimeoutError: racegate deadline: deadline reached after 3 of 9 steps", Outcome.HANG),
    ],
    ids=lambda v: v.value if isinstance(v, Outcome) else v.split(":")[0],  # no "racegate" (-k race)
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


def test_worst_and_count() -> None:
    assert outcomes.worst([Outcome.OK, Outcome.SILENT_FALLBACK, Outcome.NESTED_FX_ERROR]) is (
        Outcome.NESTED_FX_ERROR
    )
    assert outcomes.worst([Outcome.NESTED_FX_ERROR, Outcome.CRASH]) is Outcome.CRASH
    assert outcomes.worst([]) is Outcome.OK
    counts = outcomes.count([Outcome.OK, Outcome.OK, Outcome.HANG])
    assert counts["ok"] == 2 and counts["hang"] == 1 and counts["crash"] == 0


# From a `warmup` run on 2×H200 (results/h200x2-warmup-races/call1/warmup.jsonl), trimmed.
SPURIOUS = (
    "RuntimeError: Detected recompile when torch.compile stance is 'fail_on_recompile'. "
    "filename: '/work/main/model/attention.py', function name: '_counted_flex', line number: 60\n"
    "    triggered by the following guard failure(s):\n"
    "    - 0/0: BACKEND_MATCH failure: torch.compile detected different backend callables.\n"
    "    - 0/1: tensor 'k' size mismatch at index 0. expected 8, actual 4"
)
GENUINE = (
    "RuntimeError: Detected recompile when torch.compile stance is 'fail_on_recompile'. "
    "filename: 'x.py', function name: 'f', line number: 1\n"
    "    triggered by the following guard failure(s):\n"
    "    - 0/0: tensor 'x' size mismatch at index 0. expected 64, actual 65"
)


@pytest.mark.parametrize(
    ("text", "spurious"),
    [(SPURIOUS, True), (GENUINE, False), ("RuntimeError: BACKEND_MATCH failure", False)],
)
def test_spurious_recompile_is_told_apart(text: str, spurious: bool) -> None:
    assert outcomes.classify_error(text) is (
        Outcome.RECOMPILE_BLOCKED if "Detected recompile" in text else Outcome.OTHER_ERROR
    )
    assert outcomes.is_spurious_recompile(text) is spurious


def test_a_failed_case_names_a_spurious_recompile() -> None:
    record = make_record(other="recompile_blocked")
    blocked = next(t for t in record.threads if t.outcome == "recompile_blocked")
    blocked.error, blocked.error_text = SPURIOUS.splitlines()[0], SPURIOUS
    assert SPURIOUS_NOTE in explain([record])
    blocked.error_text = GENUINE
    assert SPURIOUS_NOTE not in explain([record])
