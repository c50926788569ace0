"""Every reader of run records reads them one way: `report`, `baseline --update` and
`expectations` refuse the same malformed record or file with one line naming `file:line`, exit 2.

Before, `report` passed (exit 0) records the other two refused, tracebacked on others, read a
misspelt `--baselines` folder as "no floors", and let a production cell with a floor and no
timed run pass; a text file was called "torn".
"""

from __future__ import annotations

import json
import math
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from racegate.harness.doors import cli
from racegate.harness.judge import baselines
from racegate.harness.judge.decide import record_run
from racegate.harness.judge.inputs import read_record_file
from racegate.harness.run.record import RunRecord, append_jsonl
from tests.test_baselines import make_record, write
from tests.test_decide import child, evidence, ok_threads, thread, trace
from tests.test_report import (  # noqa: F401  (fixtures)
    PROD,
    again,
    clean_row,
    floors,
    no_known_failures,
)

COMMANDS = {
    "report": lambda rec, tmp: ["report", str(rec), "--out-dir", str(tmp / "out")],
    "baseline --update": lambda rec, tmp: [
        "baseline", "--update", str(rec), "--baselines", str(tmp / "b"),
    ],
    "expectations": lambda rec, tmp: ["expectations", str(rec)],
}  # fmt: skip


def one_line_exit_2(argv: list[str], capsys: pytest.CaptureFixture) -> str:
    assert cli.main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    return err


def _mutate(record: dict[str, Any], path: str, value: Any) -> dict[str, Any]:
    """`record` with the field at `path` ("a.b.0.c") set to `value` (deleted if ...)."""
    *parents, last = path.split(".")
    node: Any = record
    for key in parents:
        node = node[int(key)] if isinstance(node, list) else node[key]
    if value is ...:
        del node[last]
    else:
        node[int(last) if isinstance(node, list) else last] = value
    return record


PROOF = {"state": "cold", "dir": "/x", "counters": {}, "deleted_bytes": None}  # a cache proof
BAD = [
    ("threads.1.outcome", "bogus", "threads[1].outcome is 'bogus'; choose from: ok"),
    ("timing_valid", "yes", "timing_valid is 'yes'; expected true or false"),
    ("threads_concurrent", 0, "outcome ok with threads_concurrent 0 of 2 asked"),
    ("threads_concurrent", 1, "outcome ok with threads_concurrent 1 of 2 asked"),
    ("threads", [], "outcome ok with 0 thread record(s) of 2 asked"),
    ("threads.0.steps_done", 0, "outcome ok, but threads[0] did 0 of its 7 steps"),
    ("scenario", {}, "scenario: fields missing ['cache_state', 'devices',"),
    ("scenario.strategy", ..., "scenario: fields missing ['strategy']"),
    ("scenario.strategy", "fastest", "scenario.strategy is 'fastest'; choose from: per_device"),
    ("scenario.steps", 0, "scenario.steps is 0; expected an integer ≥ 1"),
    ("hardware", None, "hardware is None; expected a table"),
    ("tokens_per_s", "fast", "tokens_per_s is 'fast'; expected a finite number > 0"),
    ("tokens_per_s", math.nan, "tokens_per_s is nan; expected a finite number > 0"),
    ("tokens_per_s", math.inf, "tokens_per_s is inf; expected a finite number > 0"),
    ("tokens_per_s", 0, "tokens_per_s is 0; expected a finite number > 0"),
    ("tokens_per_s", -5.0, "tokens_per_s is -5.0; expected a finite number > 0"),
    ("threads_asked", 3, "threads_asked is 3, but the scenario asks for 2"),
    ("wall_s", "long", "wall_s is 'long'; expected null or a finite number ≥ 0.0"),
    ("versions.torch", 2.11, "versions['torch'] is 2.11; expected a string"),
    ("scenario.strategy_spec", {"fast": True}, "scenario.strategy_spec: fields missing ['comp"),
    ("versions.transformers", ..., "versions: fields missing ['transformers'], unknown none"),
    ("versions.pip", "24.0", "versions: fields missing none, unknown ['pip']"),
    ("hardware.cuda_device_count", "2", "hardware.cuda_device_count is '2'; expected an integer"),
    ("hardware.gpus", 2, "hardware: fields missing none, unknown ['gpus']"),
    ("cache", {"state": "cold"}, "cache: fields missing ['counters', 'deleted_bytes', 'dir']"),
    ("cache", {**PROOF, "state": "hot"}, "cache.state is 'hot'; choose from: cold"),
    ("cache", {**PROOF, "prime_ok": "yes"}, "cache.prime_ok is 'yes'; expected true or false"),
]


@pytest.mark.parametrize("command", COMMANDS)
@pytest.mark.parametrize(("field", "value", "needle"), BAD, ids=[f"{b[0]}={b[1]!r}" for b in BAD])
def test_every_reader_refuses_a_malformed_record_in_one_line(
    tmp_path: Path, command: str, field: str, value: Any, needle: str, capsys: pytest.CaptureFixture
) -> None:
    """No floor anywhere (the baselines folder is absent): the record itself is refused."""
    good = make_record(tps=40_000.0).to_json()
    path = tmp_path / "r.jsonl"
    lines = [json.dumps(good), json.dumps(_mutate(json.loads(json.dumps(good)), field, value))]
    path.write_text("\n".join(lines) + "\n")
    err = one_line_exit_2(COMMANDS[command](path, tmp_path), capsys)
    assert f"r.jsonl:2: {needle}" in err, err
    assert not (tmp_path / "out" / "gate.json").exists() and not (tmp_path / "b").exists()


# A workload strategy's spec as records wrote it before `processes` was renamed
# `one_process_per_worker` (results/h200-qwen3-flex-example holds such records).
OLD_SPEC = {
    "compiled": True, "counts_fallbacks": False, "has_floor": False, "in_suite": True,
    "judged_by": None, "locked": True, "processes": False, "races_lazily": False,
    "trains_on_cpu": True, "warmed_up": True,
}  # fmt: skip


def test_a_workload_strategy_spec_as_older_records_wrote_it_still_reads(tmp_path: Path) -> None:
    """Before, reading one raised a TypeError (a traceback, exit 1, from every reader)."""
    raw = make_record().to_json()
    raw["scenario"].update(strategy="compiled_upfront", strategy_spec=OLD_SPEC)
    path = tmp_path / "r.jsonl"
    path.write_text(json.dumps(raw) + "\n")
    (record,) = read_record_file(path)
    spec = record.scenario.spec
    assert spec.one_process_per_worker is False and spec.locked is True, spec


@pytest.mark.parametrize("command", COMMANDS)
@pytest.mark.parametrize(
    ("line", "needle"),
    [("42", "r.jsonl:1: the line is a number (42)"), ('"ok"', "the line is a string ('ok')"),
     ("null", "r.jsonl:1: the line is null"), ("[1, 2]", "the line is a list")],
)  # fmt: skip
def test_a_json_line_that_is_no_object_is_refused(
    tmp_path: Path, command: str, line: str, needle: str, capsys: pytest.CaptureFixture
) -> None:
    path = tmp_path / "r.jsonl"
    path.write_text(line + "\n" + json.dumps(make_record().to_json()) + "\n")
    assert needle in one_line_exit_2(COMMANDS[command](path, tmp_path), capsys)


@pytest.mark.parametrize("command", COMMANDS)
@pytest.mark.parametrize(
    "content", [b"hello\nworld\n", b"\x89PNG\r\n\x1a\n\x00\x00", b"a,b\n1,2\n"]
)
def test_a_file_that_is_not_json_lines_is_called_that(
    tmp_path: Path, command: str, content: bytes, capsys: pytest.CaptureFixture
) -> None:
    path = tmp_path / "r.jsonl"
    path.write_bytes(content)
    err = one_line_exit_2(COMMANDS[command](path, tmp_path), capsys)
    assert "r.jsonl" in err and "not a JSON-lines file" in err and "torn" not in err, err


def test_a_torn_line_among_records_is_still_torn_and_promises_no_option(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    path = write(tmp_path / "r.jsonl", [make_record()])
    with path.open("a") as fh:
        fh.write(json.dumps(make_record().to_json())[:100] + "\n")
    err = one_line_exit_2(COMMANDS["report"](path, tmp_path), capsys)
    assert "r.jsonl:2: 1 torn line(s)" in err and "explicitly" not in err, err


@pytest.mark.parametrize("command", ["report", "baseline"])
def test_a_named_baselines_folder_that_does_not_exist_is_an_error(
    tmp_path: Path, command: str, capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before, `--baselines baselnes` read as "no floors" and the gate passed unjudged."""
    monkeypatch.chdir(tmp_path)
    write(tmp_path / "r.jsonl", clean_row())
    (tmp_path / "afile").write_text("")
    tail = ["r.jsonl", "--out-dir", "out"] if command == "report" else []
    for named, why in (("baselnes", "does not exist"), ("afile", "is not a folder")):
        err = one_line_exit_2([command, *tail, "--baselines", named], capsys)
        assert f"--baselines {named} {why}" in err, err
    assert cli.main([command, *tail]) != 2  # the default folder may be absent: no floors, said


@pytest.mark.process
def test_a_production_cell_with_a_floor_and_no_timed_run_fails_unless_timing_is_waived(
    floors: Path,  # noqa: F811
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("RACEGATE_PRODUCTION_STRATEGY", PROD)
    runs = clean_row()
    untimed = [r if r.scenario.strategy != PROD else _untimed(r) for r in runs]
    path = write(tmp_path / "r.jsonl", untimed)
    out = tmp_path / "out"
    argv = ["report", str(path), "--out-dir", str(out), "--baselines", str(floors)]
    assert cli.main(argv) == 1
    gate = json.loads((out / "gate.json").read_text())
    assert gate["race_only"] is False and not gate["passed"]
    (row,) = gate["rows"]
    assert any("tok/s not judged against the floor of 40,000 tok/s: no run was timed" in r
               and "--race-only" in r for r in row["reasons"]), row  # fmt: skip
    assert cli.main([*argv, "--race-only"]) == 0
    gate = json.loads((out / "gate.json").read_text())
    assert gate["race_only"] is True and gate["passed"]
    # Timed alone, the same runs pass without the flag: only the missing timing failed it.
    assert cli.main(["report", str(write(tmp_path / "t.jsonl", runs)), *argv[2:]]) == 0


def _untimed(record: RunRecord) -> RunRecord:
    record = RunRecord.from_json(record.to_json())
    record.timing_valid = False
    return record


def test_baseline_update_on_production_only_records_says_why_none_gave_a_floor(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    """warmup_locked is held to warmup's floors and never one itself: the message said "runs
    that did not pass: none"."""
    assert baselines.JUDGED_BY["warmup_locked"] == "warmup"
    path = write(tmp_path / "r.jsonl", again(make_record(strategy="warmup_locked"), 3))
    err = one_line_exit_2(
        ["baseline", "--update", str(path), "--baselines", str(tmp_path / "b")], capsys
    )
    assert "runs that did not pass: none" not in err
    assert "3 run(s) of warmup_locked, which is held to warmup's floors" in err, err
    unmeasured = write(tmp_path / "u.jsonl", [make_record(tps=None)])
    err = one_line_exit_2(["baseline", "--update", str(unmeasured)], capsys)
    assert "1 run(s) without tokens/s" in err and ": none" not in err, err


def test_decide_writes_ok_only_with_every_thread_concurrent() -> None:
    """A GIL convoy (one thread in company is enough for the run) was `ok` with
    threads_concurrent 1 of 2: a record the reader now refuses."""
    hog = trace([(0, 3.1, 1.0)], 3.2, tid=1)
    starved = trace([(0, 0.3, 1.0), (2.7, 3.1, 1.0)], 3.2, tid=0)
    rec = record_run(evidence(child(ok_threads(), activity=(starved, hog))))
    assert rec.outcome == "ok" and rec.threads_concurrent == rec.threads_asked == 2, rec
    assert RunRecord.from_json(json.loads(json.dumps(rec.to_json()))) == rec


def test_a_records_typed_parts_are_the_json_they_were_read_from(tmp_path: Path) -> None:
    """Scenario, versions, hardware and cache proof are typed in memory and the JSON they were
    before on disk (schema 2): what is written reads back equal, and is written again as read."""
    prime = child([thread(0, [(0, 1)])])
    hits = {"inductor.fxgraph_cache_hit": 2}
    run = evidence(child(ok_threads()), cache="warm", prime=prime, counters=hits)
    rec = record_run(replace(run, scenario={**run.scenario, "strategy": "per_device"}))
    assert rec.cache is not None and rec.cache.prime_ok and rec.cache.proven_warm, rec.cache
    path = tmp_path / "r.jsonl"
    append_jsonl(path, rec)
    (back,) = read_record_file(path)
    written = json.loads(json.dumps(back.to_json()))
    assert back == rec and written == json.loads(path.read_text())
    assert written["cache"] == {
        "state": "warm", "dir": "/x", "counters": hits, "deleted_bytes": None, "prime_ok": True,
        "prime_counters": {}, "prime_copied": False, "proven_warm": True,
    }  # fmt: skip
    assert written["versions"] == {"torch": "x", "transformers": "y"}
    assert written["hardware"] == {"device_name": "cpu"}
    assert written["scenario"] == rec.scenario.to_json()


def test_decide_never_calls_ok_a_thread_short_of_its_steps_or_a_thread_too_many() -> None:
    short = [thread(0, [(0, 1), (1, 2)]), thread(1, [(0, 1.1), (1.1, 2.1)])]  # 2 of 3 steps
    rec = record_run(evidence(child(short)))
    assert rec.outcome == "other_error", rec.detail
    assert "reported finished after 2 of 3 steps" in (rec.detail or "")
    rec = record_run(evidence(child(ok_threads()), threads=1))  # 2 reported, 1 asked
    assert rec.outcome == "other_error" and "2 of 1 threads reported" in (rec.detail or "")


def test_a_record_names_the_roles_it_ran_under_and_one_report_judges_one_set(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    """A scenario's production and control round-trip through a record; a record written
    before they existed has neither; a role that is no name is refused; and records of one
    group under two sets of roles are a usage error naming both, not one decision."""
    from racegate.harness.judge.inputs import roles_of
    from racegate.harness.scenario.spec import make_scenario

    sc = make_scenario(strategy="warmup", production="warmup", control="singleton")
    assert sc.to_json()["production"] == "warmup" and make_scenario().to_json().keys().isdisjoint(
        {"production", "control"}
    )
    plain = make_record()
    named = RunRecord.from_json(_mutate(plain.to_json(), "scenario.control", "singleton"))
    named.run_id = "another"  # a run of its own
    assert roles_of([named], unnamed=("warmup_locked", "per_device")) == (
        "warmup_locked",
        "singleton",
    )
    bad = write(tmp_path / "bad.jsonl", [plain])
    bad.write_text(json.dumps(_mutate(plain.to_json(), "scenario.production", 5)) + "\n")
    err = one_line_exit_2(["report", str(bad), "--out-dir", str(tmp_path / "o")], capsys)
    assert "scenario.production is 5; expected a non-empty string" in err, err
    two = write(tmp_path / "two.jsonl", [plain, named])
    err = one_line_exit_2(["report", str(two), "--out-dir", str(tmp_path / "o")], capsys)
    assert "ran under 2 sets of roles" in err and "control singleton" in err, err
