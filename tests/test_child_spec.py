"""The parent → child spec crosses the process edge as JSON and comes back the same typed spec;
a worker given a spec of another version, or a malformed one, says so in one line and exits 2."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from racegate.harness.run.child_spec import SPEC_VERSION, ChildSpec, ChildSpecError, Mode, StartGate
from racegate.harness.run.runner import child_specs
from racegate.harness.scenario.spec import make_scenario


def test_every_spec_the_runner_makes_reads_back_equal(tmp_path: Path) -> None:
    threads = make_scenario(strategy="warmup", devices="0,1", threads_per_device=2)
    processes = make_scenario(strategy="processes", devices="0,1", threads_per_device=2)
    specs = [*child_specs(threads, tmp_path), *child_specs(processes, tmp_path)]
    specs.append(ChildSpec(threads, Mode.PRIME))
    assert [s.mode for s in specs] == [Mode.RUN, *[Mode.PROCESS] * 4, Mode.PRIME]
    assert [s.thread_offset for s in specs[1:5]] == [0, 1, 2, 3]
    assert [s.devices for s in specs[1:5]] == [("cuda:0",)] * 2 + [("cuda:1",)] * 2
    assert specs[1].start_gate == StartGate(str(tmp_path / "start_gate"), 4)
    assert specs[0].devices == ("cuda:0", "cuda:1")
    for spec in specs:
        started = spec.started_at(12.5)
        started.write(tmp_path)
        back = ChildSpec.read(tmp_path)
        assert back == started and back.runner_t0 == 12.5
        assert json.loads(back.to_json())["version"] == SPEC_VERSION


def _spec_json(**changes: object) -> dict[str, object]:
    raw = json.loads(ChildSpec(make_scenario(), Mode.RUN).started_at(1.0).to_json())
    for key, value in changes.items():
        if value is ...:
            del raw[key]
        else:
            raw[key] = value
    return raw


@pytest.mark.parametrize(
    ("changes", "needle"),
    [
        ({"version": 2}, "child spec version 2; this worker reads 1"),
        ({"version": ...}, "child spec version None; this worker reads 1"),
        ({"mode": "fast"}, "mode is 'fast'; choose from: run, process, prime"),
        ({"mode": ...}, "a spec has scenario and mode"),
        ({"threads": 2}, "fields unknown ['threads']"),
        ({"thread_offset": -1}, "thread_offset is -1; expected an integer ≥ 0"),
        ({"process_devices": "cuda:0"}, "process_devices is 'cuda:0'; expected a non-empty list"),
        ({"start_gate": {"dir": "/x"}}, "start_gate.parties is None; expected an integer ≥ 1"),
        ({"runner_t0": "soon"}, "runner_t0 is 'soon'; expected null or a finite number"),
        ({"scenario": {"steps": 0}}, "steps must be ≥ 1, got 0"),
        ({"scenario": {"stepz": 1}}, "unknown scenario field(s) ['stepz']"),
    ],
    ids=lambda v: str(v)[:30],
)
def test_a_bad_spec_is_one_line_naming_the_file(
    tmp_path: Path, changes: dict[str, object], needle: str
) -> None:
    (tmp_path / "scenario.json").write_text(json.dumps(_spec_json(**changes)))
    with pytest.raises(ChildSpecError) as err:
        ChildSpec.read(tmp_path)
    line = str(err.value)
    assert line.startswith(f"{tmp_path / 'scenario.json'}: ") and needle in line, line
    assert "\n" not in line


def test_a_worker_given_another_versions_spec_exits_2_with_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    from racegate.harness.run import worker

    (tmp_path / "scenario.json").write_text(json.dumps(_spec_json(version=SPEC_VERSION + 1)))
    assert worker.main(tmp_path) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "child spec version 2; this worker reads 1" in err, err
    assert not (tmp_path / "result.json").exists()
