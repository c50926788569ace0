"""Progress events are typed in both processes and the same JSON lines between them: each kind
reads back equal, and a line of another version, an unknown kind or a kind's wrong data is
refused (the runner and the stall watch skip it, as they skip a torn line)."""

from __future__ import annotations

import json

import pytest

from racegate.harness.run.protocol import (
    EVENT_KINDS,
    PROTOCOL_VERSION,
    Built,
    CacheDeleted,
    ChildEvidence,
    ProgressEvent,
    ProtocolError,
    StartGateWait,
    Step,
    Stepping,
    ThreadReport,
)

STEP = Step(shape=8, start=1.0, end=2.0, tokens=8, compiled_shape=True, mem_peak=None, demand_s=0.5)
EVENTS = [
    Built(threads=2, hardware={"device_name": "cpu", "cpu_count": 2, "cuda_device_count": 0}),
    Stepping(tids=(101, 102)),
    ThreadReport(0, "cpu", True, None, 0, (STEP,)),
    CacheDeleted(bytes=4096, start=2.5),
    StartGateWait(met=False),
]


@pytest.mark.parametrize("data", EVENTS, ids=lambda d: type(d).__name__)
def test_every_kind_reads_back_equal(data: object) -> None:
    event = ProgressEvent(3.0, data)  # type: ignore[arg-type]
    assert ProgressEvent.from_line(event.to_line()) == event
    assert EVENT_KINDS[event.kind] is type(data)


def test_the_lines_are_the_json_they_were_before_the_types() -> None:
    """The line format did not move: kind, at, data, version (3 since each step reads every
    thread's CPU time at its return, Step.cpu_at_return)."""
    line = json.loads(ProgressEvent(1.0, Stepping((7, 8))).to_line())
    assert line == {"kind": "stepping", "at": 1.0, "data": {"tids": [7, 8]}, "version": 3}
    line = json.loads(ProgressEvent(1.0, CacheDeleted(10, 0.5)).to_line())
    assert line["data"] == {"bytes": 10, "start": 0.5}
    assert PROTOCOL_VERSION == 3


@pytest.mark.parametrize(
    ("line", "error"),
    [
        ({"kind": "stepping", "at": 1.0, "data": {"tids": [1]}, "version": 2}, ProtocolError),
        ({"kind": "launched", "at": 1.0, "data": {}, "version": 3}, ProtocolError),
        ({"kind": "stepping", "at": 1.0, "data": {"tids": ["1"]}, "version": 3}, ProtocolError),
        ({"kind": "start_gate", "at": 1.0, "data": {"met": "yes"}, "version": 3}, ProtocolError),
        ({"kind": "cache_deleted", "at": 1.0, "data": {"bytes": 1}, "version": 3}, ProtocolError),
        ({"kind": "built", "at": 1.0, "data": None, "version": 3}, ProtocolError),
        ({"kind": "thread", "at": 1.0, "data": {"index": 0}, "version": 3}, ProtocolError),
        ([1, 2], ProtocolError),
    ],
)
def test_a_line_of_another_version_kind_or_shape_is_refused(
    line: object, error: type[Exception]
) -> None:
    with pytest.raises(error):
        ProgressEvent.from_line(json.dumps(line))


def test_a_childs_events_are_read_by_kind_with_their_time() -> None:
    events = tuple(ProgressEvent(float(k), d) for k, d in enumerate(EVENTS))  # type: ignore[arg-type]
    child = ChildEvidence(None, False, 0, None, None, events, "", "", 1.0)
    assert child.events(CacheDeleted) == [(3.0, CacheDeleted(4096, 2.5))]
    assert child.threads_built() == 2
    assert child.threads() == (EVENTS[2],)  # no report: the threads' events stand in
