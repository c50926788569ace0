"""A run is counted once: every record carries its run's identity (racegate.harness.run.record),
and every reader of records (the report, `run --records-from`, pytest's) counts each run once,
whatever paths, copies or repeats it is given, and says how many duplicates it dropped."""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from racegate.harness.doors import cli
from racegate.harness.judge.inputs import read_records, records_from
from racegate.harness.run import record as run_record
from racegate.harness.run.checked import GateInputError
from racegate.harness.run.record import RunRecord, append_jsonl, read_jsonl, unique_runs
from tests.test_baselines import make_record, write
from tests.test_report import floors  # noqa: F401  (a fixture)

REPO = Path(__file__).resolve().parent.parent


def thin_row() -> list[RunRecord]:
    """The production strategy clean in every cache state, 2 runs each, and its control racing
    in 2 of 2 per state: too few runs for the verdict's power (UNDECIDED), where the same runs
    counted four times would be enough (SAFE)."""
    states = ("cold", "warm", "deleted")
    runs = [make_record(cache_state=c) for c in states for _ in range(2)]
    runs += [
        make_record(strategy="per_device", cache_state=c, nested=1, tps=None)
        for c in states
        for _ in range(2)
    ]
    return runs


def report(paths: list[Path], out: Path, folder: Path) -> tuple[int, dict]:
    code = cli.main(["report", *map(str, paths), "--out-dir", str(out), "--baselines", str(folder)])
    return code, json.loads((out / "gate.json").read_text())


def test_the_same_records_given_again_never_turn_undecided_into_safe(
    tmp_path: Path,
    floors: Path,  # noqa: F811
    capsys: pytest.CaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`report a.jsonl` is UNDECIDED; the same file named four times (again, `./a.jsonl`, its
    absolute path, a copy) was SAFE, exit 0. Now the same answer, and it says what it dropped."""
    a = write(tmp_path / "a.jsonl", thin_row())
    code, once = report([a], tmp_path / "once", floors)
    assert code == 7 and once["decision"] == "UNDECIDED", once
    shutil.copy(a, tmp_path / "copy.jsonl")
    monkeypatch.chdir(tmp_path)
    given = [a, a, Path("./a.jsonl"), a.resolve(), tmp_path / "copy.jsonl"]
    capsys.readouterr()
    code, again = report(given, tmp_path / "again", floors)
    assert (code, again["decision"]) == (7, "UNDECIDED"), again
    assert again["dropped_duplicates"] == len(thin_row())  # the copy's; the same file is one
    assert "dropped 12 duplicate records" in capsys.readouterr().err
    assert "Dropped 12 duplicate records" in (tmp_path / "again" / "matrix.md").read_text()


def test_a_file_of_one_run_repeated_counts_it_once(
    tmp_path: Path,
    floors: Path,  # noqa: F811
) -> None:
    """A file of the same records repeated 40 times (lines copied, no run id: schema 2 and
    hand-made records are told apart by their content) is the records once."""
    a = write(tmp_path / "a.jsonl", thin_row())
    lines = a.read_text()
    (tmp_path / "big.jsonl").write_text(lines * 40)
    code, big = report([tmp_path / "big.jsonl"], tmp_path / "big", floors)
    assert (code, big["decision"]) == (7, "UNDECIDED")
    assert len(read_records([tmp_path / "big.jsonl"])) == len(thin_row())
    old = [{**json.loads(x), "schema_version": 2} for x in lines.splitlines()]
    for k, raw in enumerate(old):  # schema 2: no identity; runs that differ in their start
        del raw["invocation"], raw["run_id"]
        raw["started_at"] = f"2026-12-01T00:00:{k:02d}.000+00:00"
    (tmp_path / "old.jsonl").write_text("".join(json.dumps(r) + "\n" for r in old * 3))
    assert len(read_records([tmp_path / "old.jsonl"])) == len(thin_row())


def test_records_from_the_results_file_count_this_invocations_runs_once(tmp_path: Path) -> None:
    """`run --results X --records-from X` (and pytest's): the merged file holds this
    invocation's own runs; each is judged once, and the notes say how many were dropped."""
    earlier, own = make_record(), [make_record(), make_record()]
    x = write(tmp_path / "x.jsonl", [earlier, *own])
    merged, notes = records_from([x, x], own=read_jsonl(x)[1:])
    assert [r.run_id for r in merged] == [earlier.run_id]
    assert notes[-1].startswith("dropped 5 duplicate records"), notes


def test_two_records_that_claim_one_run_but_differ_are_refused() -> None:
    one = make_record()
    edited = dataclasses.replace(one, outcome_counts={"ok": 1, "hang": 1})
    with pytest.raises(GateInputError, match="two different records claim run"):
        unique_runs([one, edited])


def test_two_invocations_in_one_file_stay_apart_in_the_report(
    tmp_path: Path,
    floors: Path,  # noqa: F811
) -> None:
    """Two runs appending to one --results file: the report names each invocation and its
    runs, in matrix.md and in each gate.json row."""
    first = [dataclasses.replace(r, invocation="aaaa") for r in thin_row()]
    second = [dataclasses.replace(make_record(), invocation="bbbb")]
    x = write(tmp_path / "x.jsonl", [*first, *second])
    _, gate = report([x], tmp_path / "out", floors)
    (row,) = gate["rows"]
    assert row["invocations"] == {"aaaa": len(first), "bbbb": 1}
    md = (tmp_path / "out" / "matrix.md").read_text()
    assert "Runs from 2 invocations" in md and "`aaaa` (12 runs), `bbbb` (1 run)" in md


def test_an_invocation_is_one_per_front_door(monkeypatch: pytest.MonkeyPatch) -> None:
    """pytest-xdist workers of one session share their controller's id; `racegate run` (the
    CLI's main) starts a new one; records made in between carry it."""
    monkeypatch.setattr(run_record, "_invocation", None)
    monkeypatch.setenv(run_record.XDIST_RUN_ID, "0123abcd")
    assert run_record.invocation() == "0123abcd" == run_record.invocation()
    fresh = run_record.begin_invocation()
    assert fresh != "0123abcd" and run_record.invocation() == fresh
    monkeypatch.setattr(run_record, "_invocation", None)
    monkeypatch.setenv(run_record.XDIST_RUN_ID, "../../etc")
    assert len(run_record.invocation()) == 16  # not an id: a fresh one


@pytest.mark.process
def test_run_with_records_from_its_own_results_counts_each_run_once(tmp_path: Path) -> None:
    """`racegate run --results X --records-from X` read "0 of 6 runs" where `report X` read
    "0 of 3": its own runs were counted again from X."""
    x = tmp_path / "x.jsonl"
    argv = [
        sys.executable, "-m", "racegate", "run", "--workload",
        "tests.fault_workloads:make_workload", "--preset", "ok", "--strategies", "eager",
        "--steps", "2", "--warmup-steps", "1", "--results", str(x),
    ]  # fmt: skip
    env = {k: v for k, v in os.environ.items() if not k.startswith("RACEGATE_")}
    first = subprocess.run(argv, cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert first.returncode == 7, first.stderr[-2000:]
    again = subprocess.run(
        [*argv, "--records-from", str(x), "--repeat", "2"],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    out = " ".join(again.stdout.split())
    assert "eager: 0 of 3 runs failed" in out, out[-2000:]
    assert "merged 1 records from" in out and "dropped 2 duplicate records" in out, out
    records = read_jsonl(x)
    assert len({r.invocation for r in records}) == 2 and len({r.run_id for r in records}) == 3
    append_jsonl(x, records[0])  # a line repeated: still 3 runs
    assert len(read_records([x])) == 3
