"""Records survive killed and concurrent writers: a torn tail is closed off, torn lines counted."""

from __future__ import annotations

import json
import multiprocessing
from pathlib import Path

import pytest

from racegate.harness.run.record import (
    SCHEMA_VERSION,
    RunRecord,
    TornRecordsError,
    append_jsonl,
    read_jsonl,
    read_jsonl_counted,
)
from tests.test_baselines import make_record


def test_an_append_after_a_torn_line_is_not_glued_onto_it(tmp_path: Path) -> None:
    out = tmp_path / "runs.jsonl"
    append_jsonl(out, make_record())
    with out.open("a") as fh:  # what a writer killed mid-line leaves
        fh.write(json.dumps(make_record().to_json())[:200])
    append_jsonl(out, make_record(strategy="per_device"))
    records, torn = read_jsonl_counted(out)
    assert [r.scenario.strategy for r in records] == ["warmup", "per_device"]
    assert torn == [2]
    with pytest.raises(TornRecordsError, match="1 torn line"):
        read_jsonl(out)
    assert len(read_jsonl(out, skip_torn=True)) == 2


def test_a_record_being_appended_is_read_whole_or_not_at_all(tmp_path: Path) -> None:
    """A case reads the session's records while other workers append to them (a review: the
    readers took no lock, so a record ~15 KB long could be read half-written, and the case
    failed on a torn line). Here a writer holds the appenders' lock with half a record
    written, as append_jsonl's one write does mid-way; the reader waits for the rest."""
    import fcntl
    import os
    import threading
    import time

    out = tmp_path / "runs.jsonl"
    append_jsonl(out, make_record())
    line = (json.dumps(make_record(strategy="per_device").to_json()) + "\n").encode()
    fd = os.open(out, os.O_WRONLY | os.O_APPEND)
    fcntl.flock(fd, fcntl.LOCK_EX)
    os.write(fd, line[:200])
    got: list = []
    reader = threading.Thread(target=lambda: got.append(read_jsonl_counted(out)))
    reader.start()
    time.sleep(0.5)  # the reader is at the file now
    os.write(fd, line[200:])
    os.close(fd)  # releases the lock
    reader.join(10)
    records, torn = got[0]
    assert torn == [] and [r.scenario.strategy for r in records] == ["warmup", "per_device"]


def _append_many(path: str, strategy: str, n: int) -> None:
    for _ in range(n):
        append_jsonl(Path(path), make_record(strategy=strategy))


@pytest.mark.process
def test_two_writers_appending_to_one_file(tmp_path: Path) -> None:
    out = tmp_path / "runs.jsonl"
    ctx = multiprocessing.get_context("spawn")
    args = [(str(out), s, 50) for s in ("warmup", "eager")]
    writers = [ctx.Process(target=_append_many, args=a) for a in args]
    for w in writers:
        w.start()
    for w in writers:
        w.join(120)
    records, torn = read_jsonl_counted(out)
    assert torn == [] and len(records) == 100
    assert sorted({r.scenario.strategy for r in records}) == ["eager", "warmup"]


def test_schema_3_needs_every_field() -> None:
    raw = make_record().to_json()
    assert raw["schema_version"] == SCHEMA_VERSION == 3
    RunRecord.from_json(raw)
    for missing in ("timing_valid", "overridden_env", "run_id", "invocation"):
        broken = {k: v for k, v in raw.items() if k != missing}
        with pytest.raises(ValueError, match=f"missing \\['{missing}'\\]"):
            RunRecord.from_json(broken)
    thread = {k: v for k, v in raw["threads"][0].items() if k != "overlap_share"}
    with pytest.raises(ValueError, match="overlap_share"):
        RunRecord.from_json(raw | {"threads": [thread]})
    with pytest.raises(ValueError, match="unknown \\['colour'\\]"):
        RunRecord.from_json(raw | {"colour": "red"})


def test_a_schema_2_record_reads_as_a_run_without_identity() -> None:
    """Schema 2 (results/) has no run identity: it reads, as a record whose run is told apart
    by its content; schema 3's fields in a schema 2 line are refused."""
    raw = make_record().to_json()
    old = {k: v for k, v in raw.items() if k not in ("invocation", "run_id")}
    old["schema_version"] = 2
    record = RunRecord.from_json(old)
    assert record.run_id is None and record.identity.startswith("content:")
    assert RunRecord.from_json(json.loads(json.dumps(old))).identity == record.identity
    with pytest.raises(ValueError, match="schema 3 added"):
        RunRecord.from_json(old | {"run_id": "x"})
    with pytest.raises(ValueError, match="this racegate reads 2 and 3"):
        RunRecord.from_json(raw | {"schema_version": 4})


def test_a_schema_2_record_from_before_stalled_s_still_reads() -> None:
    """results/ holds schema 2 records written before `stalled_s`: they read as "not recorded"
    (None); the field is written from now on, and no other field may be missing."""
    raw = make_record().to_json()
    assert "stalled_s" in raw
    old = {k: v for k, v in raw.items() if k != "stalled_s"}
    assert RunRecord.from_json(old).stalled_s is None
    assert RunRecord.from_json(raw | {"stalled_s": 12.5}).stalled_s == 12.5
    with pytest.raises(ValueError, match="missing \\['timing_valid'\\]"):
        RunRecord.from_json({k: v for k, v in old.items() if k != "timing_valid"})
