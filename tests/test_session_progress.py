"""A race session's progress lines: one per record as it lands, in order, each said once, the
last ones said when the session stops; the file read again only when it grew."""

from __future__ import annotations

import dataclasses
import threading

from racegate.cases import progress
from racegate.cases.progress import RunProgress
from tests.test_baselines import make_record


def test_each_run_is_said_once_in_order_and_the_last_ones_at_stop(monkeypatch) -> None:
    monkeypatch.setattr(progress, "POLL_S", 0.01)
    landed: list = []
    said: list[str] = []
    reads = 0
    heard = threading.Event()

    def records() -> list:
        nonlocal reads
        reads += 1
        return list(landed)

    def say(text: str) -> None:
        said.append(text)
        heard.set()

    watch = RunProgress(records, say, stamp=lambda: len(landed))
    watch.start()
    control = make_record(strategy="per_device", devices="cpu", tpd=2, nested=1)
    landed.append(dataclasses.replace(control, wall_s=12.5))
    assert heard.wait(5.0)
    reads_then = reads
    threading.Event().wait(0.1)  # ten more looks at an unchanged file: none reads it
    assert reads == reads_then
    landed.append(dataclasses.replace(make_record(devices="cpu", tpd=2), repeat_index=2))
    watch.stop()  # the run that landed since the last look is said now
    assert len(said) == 2, said
    assert said[0].startswith("racegate [0:00 · 1 run] per_device cold 1×2 run 1: ")
    assert said[0].endswith(f"{control.outcome} in 12.5 s"), said
    assert said[1].startswith("racegate [0:00 · 2 runs] warmup cold 1×2 run 3: ok in "), said


def test_an_unreadable_file_says_nothing_and_stops_nothing() -> None:
    def records() -> list:
        raise ValueError("records.jsonl:3: 1 torn line(s)")

    said: list[str] = []
    watch = RunProgress(records, said.append)
    watch.start()
    watch.stop()
    assert said == []
