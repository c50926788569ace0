"""Throughput floors: hardware keys, checks against floors, update round trip, flat memory."""

from __future__ import annotations

import dataclasses
import json
import secrets
from pathlib import Path
from typing import Any

import pytest

from racegate.harness.doors import cli
from racegate.harness.judge import baselines
from racegate.harness.judge.baselines import REFRESH_COMMAND, FloorCall
from racegate.harness.judge.outcomes import count, worst
from racegate.harness.run.record import (
    Hardware,
    RunRecord,
    ThreadRecord,
    Versions,
    append_jsonl,
    read_jsonl,
)
from racegate.harness.scenario.spec import make_scenario
from racegate.harness.scenario.vocab import Outcome

H200 = {"device_name": "NVIDIA H200", "device_names": ["NVIDIA H200"] * 2, "cuda_device_count": 2}


def make_record(
    *,
    torch: str = "2.11.0+cu130",
    transformers: str = "5.8.1",
    preset: str = "small",
    strategy: str = "warmup",
    cache_state: str = "cold",
    schedule: str = "barrier",
    devices: str = "0,1",
    tpd: int = 1,
    nested: int = 0,
    fallback: int = 0,
    other: str | None = None,
    tps: float | None = 40_000.0,
    mem_growth: float | None = None,
    hardware: dict[str, Any] | None = None,
    steps: int = 6,
) -> RunRecord:
    """A schema-valid record: `nested` / `fallback` threads hit, `other` names a run outcome."""
    sc = make_scenario(
        preset=preset,
        strategy=strategy,
        cache_state=cache_state,
        schedule=schedule,
        devices=devices,
        threads_per_device=tpd,
        steps=steps,
    )
    outcomes = [Outcome.NESTED_FX_ERROR] * nested + [Outcome.SILENT_FALLBACK] * fallback
    outcomes += [Outcome(other)] if other else []
    outcomes += [Outcome.OK] * max(0, sc.threads - len(outcomes))
    threads = [
        ThreadRecord(
            index=i,
            device=sc.devices[i % len(sc.devices)],
            outcome=str(o),
            steps_done=sc.warmup_steps + sc.steps,
        )
        for i, o in enumerate(outcomes)
    ]
    record = RunRecord(
        scenario=sc,
        outcome=str(worst(outcomes)),
        outcome_counts=count(outcomes),
        threads=threads,
        threads_asked=sc.threads,
        threads_concurrent=sc.threads,
        versions=Versions(python="3.12.3", torch=torch, transformers=transformers),
        hardware=Hardware.from_json(dict(H200 if hardware is None else hardware)),
        tokens_per_s=tps,
        tokens_per_s_spread=0.02 if tps else None,
        tokens_per_s_windows=[tps] * 3 if tps else [],
        mem_growth=mem_growth,
        mem_series={"cuda:0": [2**30, int(2**30 * (1 + (mem_growth or 0)))]},
        command="python -m racegate run --preset small",
        run_id=secrets.token_hex(8),  # each a run of its own (a reader counts a run once)
    )
    return RunRecord.from_json(json.loads(json.dumps(record.to_json())))  # the JSON boundary


def write(path: Path, records: list[RunRecord]) -> Path:
    for r in records:
        append_jsonl(path, r)
    return path


def test_hardware_key() -> None:
    assert baselines.hardware_key(make_record()) == "h200x2"
    assert baselines.hardware_key(make_record(hardware={"device_name": "cpu"})) == "cpu"
    h100 = {"device_name": "NVIDIA H100 80GB HBM3", "cuda_device_count": 8}
    assert baselines.hardware_key(make_record(hardware=h100)) == "h100-80gb-hbm3x8"


def test_floor_key_names_schedule_only_when_not_barrier() -> None:
    assert baselines.floor_key(make_record().scenario) == "small/warmup/2x1/6steps"
    staggered = make_record(schedule="staggered", tpd=2, devices="0")
    assert baselines.floor_key(staggered.scenario) == "small/warmup/1x2/6steps/staggered"


def test_floor_key_names_a_target_on_devices_of_its_own() -> None:
    """The incident topology carries a target model's load: it must not share a plain floor."""
    record = make_record()
    incident = dataclasses.replace(record.scenario, target_devices=("cuda:0",))
    assert baselines.floor_key(incident) == "small/warmup/2x1/6steps/target1"


def byo(record: RunRecord) -> RunRecord:
    """`record` as a run of a workload of the user's own (`--workload my.step:make`)."""
    return dataclasses.replace(
        record, scenario=dataclasses.replace(record.scenario, workload="my.step:make")
    )


def test_another_workloads_floor_neither_judges_nor_overwrites_the_drafters(
    tmp_path: Path,
) -> None:
    """`--workload` runs at the drafter's preset name are another step: their floor has a key
    of its own, so updating from them leaves the drafter's floor, and it judges only them."""
    drafter = [make_record(tps=t) for t in (39_000.0, 40_000.0, 41_000.0)]
    baselines.update_from_records([write(tmp_path / "d.jsonl", drafter)], tmp_path)
    theirs = [byo(make_record(tps=t)) for t in (900.0, 1_000.0, 1_100.0)]
    baselines.update_from_records([write(tmp_path / "w.jsonl", theirs)], tmp_path)
    base = baselines.load(tmp_path, "h200x2")
    assert base is not None
    assert base.floors["small/warmup/2x1/6steps"].tokens_per_s > 30_000
    assert base.floors["small/warmup/2x1/6steps/workload=my.step:make"].tokens_per_s < 1_100
    assert not baselines.check(byo(make_record(tps=1_000.0)), base).failed
    assert baselines.check(make_record(tps=1_000.0), base).failed


def test_a_floor_judges_only_runs_of_its_own_length(tmp_path: Path) -> None:
    """A race case's 8 steps (mostly recompiles) are no throughput measurement: a floor from
    150-step runs of the same strategy and topology must not judge them."""
    runs = [make_record(tps=t, steps=150) for t in (39_000.0, 40_000.0, 41_000.0)]
    baselines.update_from_records([write(tmp_path / "r.jsonl", runs)], tmp_path)
    base = baselines.load(tmp_path, "h200x2")
    assert base is not None and base.floors["small/warmup/2x1/150steps"].steps == 150
    race_run = make_record(tps=9_000.0, steps=8)
    assert baselines.check(race_run, base).verdict is FloorCall.NO_BASELINE
    assert baselines.check(make_record(tps=9_000.0, steps=150), base).failed


def test_update_round_trip_and_checks(tmp_path: Path) -> None:
    runs = [make_record(tps=t) for t in (100.0, 110.0, 120.0)]
    runs.append(make_record(nested=1, tps=500.0))  # refused: did not pass
    runs.append(make_record(strategy="per_device", tps=90.0))
    paths = baselines.update_from_records(
        [write(tmp_path / "r.jsonl", runs)], tmp_path / "b", tolerance=0.05
    )
    assert paths == [tmp_path / "b" / "h200x2.json"]
    data = json.loads(paths[0].read_text())
    assert data["schema_version"] == baselines.SCHEMA_VERSION
    assert data["versions"]["torch"] == "2.11.0+cu130" and data["measured_at"]
    base = baselines.load(tmp_path / "b", "h200x2")
    assert base is not None
    floor = base.floors["small/warmup/2x1/6steps"]
    assert floor.tokens_per_s == 110.0  # median of the three passing runs, not the 500
    assert (floor.n_runs, floor.refused_runs, floor.tolerance) == (3, 1, 0.05)
    assert floor.spread == pytest.approx(20 / 110)
    assert floor.command.startswith("python -m racegate run")
    assert base.floors["small/per_device/2x1/6steps"].tokens_per_s == 90.0

    assert baselines.check(make_record(tps=106.0), base).verdict is FloorCall.PASS
    below = baselines.check(make_record(tps=100.0), base)
    assert below.verdict is FloorCall.BELOW_FLOOR and below.failed
    assert "9.1% below" in below.message and REFRESH_COMMAND in below.message
    above = baselines.check(make_record(tps=120.0), base)
    assert above.verdict is FloorCall.ABOVE_FLOOR and above.failed
    assert "stale" in above.message and REFRESH_COMMAND in above.message
    none = baselines.check(make_record(tps=None), base)
    assert none.verdict is FloorCall.NO_THROUGHPUT and none.failed
    other_key = baselines.check(make_record(preset="tiny"), base)
    assert other_key.verdict is FloorCall.NO_BASELINE and other_key.skipped
    no_file = baselines.check(make_record(), baselines.load(tmp_path / "b", "cpu"))
    assert no_file.verdict is FloorCall.NO_BASELINE
    assert "h200x2" in no_file.message and REFRESH_COMMAND in no_file.message


def test_update_keeps_other_floors_and_refuses_failed_runs(tmp_path: Path) -> None:
    out = tmp_path / "b"
    baselines.update_from_records([write(tmp_path / "a.jsonl", [make_record(tps=50.0)])], out)
    baselines.update_from_records(
        [write(tmp_path / "c.jsonl", [make_record(preset="tiny", tps=7.0)])], out
    )
    base = baselines.load(out, "h200x2")
    assert base is not None
    assert set(base.floors) == {"small/warmup/2x1/6steps", "tiny/warmup/2x1/6steps"}
    bad = write(tmp_path / "bad.jsonl", [make_record(fallback=2, tps=30.0)])
    with pytest.raises(ValueError, match=r"no run with outcome ok .*silent_fallback"):
        baselines.update_from_records([bad], out)
    with pytest.raises(ValueError, match="tolerance"):
        baselines.update_from_records([bad], out, tolerance=1.5)


def test_load_rejects_other_schema(tmp_path: Path) -> None:
    (tmp_path / "cpu.json").write_text(json.dumps({"schema_version": 99, "floors": {}}))
    with pytest.raises(ValueError, match="schema_version 99"):
        baselines.load(tmp_path, "cpu")
    assert baselines.load(tmp_path, "h200x2") is None


def test_describe(tmp_path: Path) -> None:
    assert REFRESH_COMMAND in baselines.describe(tmp_path / "none")
    records = write(tmp_path / "r.jsonl", [make_record(tps=4321.0)])
    baselines.update_from_records([records], tmp_path)
    text = baselines.describe(tmp_path)
    assert "NVIDIA H200" in text and "small/warmup/2x1/6steps: 4,321 tok/s ±10%" in text


def test_cli_baseline_update_then_show(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    records = write(tmp_path / "r.jsonl", [make_record(tps=t) for t in (10.0, 30.0)])
    base_dir = tmp_path / "b"
    assert cli.main(["baseline", "--update", str(records), "--baselines", str(base_dir)]) == 0
    assert "wrote" in capsys.readouterr().out
    assert cli.main(["baseline", "--baselines", str(base_dir)]) == 0
    assert "20 tok/s" in capsys.readouterr().out


def test_memory_flat() -> None:
    ok, why = baselines.memory_flat(make_record(mem_growth=0.01))
    assert ok and "1.00%" in why
    bad, why = baselines.memory_flat(make_record(mem_growth=0.05))
    assert not bad and "5.00% > 2%" in why and "cuda:0: [1,024, 1,075] MiB" in why
    assert baselines.memory_flat(make_record(mem_growth=None))[0]
    assert not baselines.memory_flat(make_record(mem_growth=0.01), limit=0.005)[0]


def test_read_records_from_folders(tmp_path: Path) -> None:
    write(tmp_path / "cell-a" / "records.jsonl", [make_record()])
    write(tmp_path / "cell-b" / "deep" / "records.jsonl", [make_record(), make_record()])
    assert len(baselines.read_records([tmp_path])) == 3
    assert len(read_jsonl(tmp_path / "cell-a" / "records.jsonl")) == 1
    with pytest.raises(FileNotFoundError):
        baselines.read_records([tmp_path / "missing"])
    (tmp_path / "empty").mkdir()
    with pytest.raises(ValueError, match="no run records"):
        baselines.read_records([tmp_path / "empty"])


def test_nested_fx_off_is_held_to_the_clean_compiled_floor(tmp_path: Path) -> None:
    """The incident's silent 'fix' loses ~13–36% of its speed: it must fail through throughput."""
    runs = [make_record(strategy="warmup", tps=t) for t in (19_000.0, 20_000.0, 21_000.0)]
    runs.append(make_record(strategy="nested_fx_off", tps=20_000.0))  # never a floor itself
    baselines.update_from_records([write(tmp_path / "r.jsonl", runs)], tmp_path)
    base = baselines.load(tmp_path, "h200x2")
    assert base is not None and set(base.floors) == {"small/warmup/2x1/6steps"}
    hack = baselines.check(make_record(strategy="nested_fx_off", tps=12_800.0), base)
    assert hack.verdict is FloorCall.BELOW_FLOOR and hack.key == "small/warmup/2x1/6steps"


def test_warmup_locked_is_held_to_warmups_floor(tmp_path: Path) -> None:
    """The production strategy's lock must not cost throughput: it meets warmup's floor."""
    runs = [make_record(strategy="warmup", tps=t) for t in (39_000.0, 40_000.0, 41_000.0)]
    runs.append(make_record(strategy="warmup_locked", tps=20_000.0))  # never a floor itself
    baselines.update_from_records([write(tmp_path / "r.jsonl", runs)], tmp_path)
    base = baselines.load(tmp_path, "h200x2")
    assert base is not None and set(base.floors) == {"small/warmup/2x1/6steps"}
    slow = baselines.check(make_record(strategy="warmup_locked", tps=30_000.0), base)
    assert slow.verdict is FloorCall.BELOW_FLOOR and slow.key == "small/warmup/2x1/6steps"
    same = baselines.check(make_record(strategy="warmup_locked", tps=40_500.0), base)
    assert same.verdict is FloorCall.PASS


def test_runs_under_the_test_slowdown_are_never_a_floor_nor_judged(tmp_path: Path) -> None:
    """A run whose environment set RACEGATE_TEST_SLOWDOWN (an A/B calibration's candidate, or a
    variable left exported) measured the step plus extra work: no floor comes from it."""
    tool = "RACEGATE_TEST_SLOWDOWN=0.05"
    slowed = [dataclasses.replace(make_record(tps=t), test_slowdown=tool) for t in (3e4, 3e4)]
    path = write(tmp_path / "r.jsonl", slowed)
    with pytest.raises(ValueError, match="test slowdown ×2"):
        baselines.update_from_records([path], tmp_path)
    alone = [make_record(tps=t) for t in (39_000.0, 40_000.0, 41_000.0)]
    baselines.update_from_records([write(tmp_path / "mixed.jsonl", alone + slowed)], tmp_path)
    base = baselines.load(tmp_path, "h200x2")
    assert base is not None
    floor = base.floors["small/warmup/2x1/6steps"]
    assert floor.tokens_per_s == 40_000.0 and floor.refused_runs == 2
    verdict = baselines.check(slowed[0], base)
    assert verdict.verdict is FloorCall.TIMING_VOID and not verdict.failed
    assert f"not gated: it ran under {tool}, a test tool" in verdict.message


def test_overlapped_runs_are_never_a_floor_nor_judged(tmp_path: Path) -> None:
    """A nightly cell's records mix lone throughput runs with xdist race runs of floor keys."""
    alone = [make_record(tps=t) for t in (39_000.0, 40_000.0, 41_000.0)]
    beside = [dataclasses.replace(make_record(tps=9_000.0), timing_valid=False) for _ in range(5)]
    baselines.update_from_records([write(tmp_path / "r.jsonl", alone + beside)], tmp_path)
    base = baselines.load(tmp_path, "h200x2")
    assert base is not None
    floor = base.floors["small/warmup/2x1/6steps"]
    assert floor.tokens_per_s == 40_000.0 and floor.n_runs == 3 and floor.refused_runs == 5
    verdict = baselines.check(beside[0], base)
    assert verdict.verdict is FloorCall.TIMING_VOID and verdict.skipped and not verdict.failed


def test_the_floors_folder_is_the_projects_own(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """baselines/ beside the project's pyproject.toml (absent: no floors, not an error); a
    folder [tool.racegate] or RACEGATE_BASELINES names must exist, else one line naming it."""
    monkeypatch.delenv("RACEGATE_BASELINES", raising=False)
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "p"\n')
    (tmp_path / "src").mkdir()
    assert baselines.project_folder(tmp_path / "src") == tmp_path / "baselines"
    assert baselines.load(baselines.project_folder(tmp_path), "cpu") is None
    (tmp_path / "pyproject.toml").write_text('[tool.racegate]\nbaselines = "perf/floors"\n')
    with pytest.raises(ValueError) as exc:
        baselines.project_folder(tmp_path)
    text = str(exc.value)
    assert "'perf/floors' (from pyproject [tool.racegate])" in text and "does not exist" in text
    assert "\n" not in text
    (tmp_path / "perf" / "floors").mkdir(parents=True)
    assert baselines.project_folder(tmp_path) == tmp_path / "perf" / "floors"
    monkeypatch.setenv("RACEGATE_BASELINES", "elsewhere")
    with pytest.raises(ValueError, match="'elsewhere' \\(from env RACEGATE_BASELINES\\)"):
        baselines.project_folder(tmp_path)
