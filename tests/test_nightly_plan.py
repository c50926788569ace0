"""The nightly's fan-out, checked without a runner: the plan lists every nox gpu_matrix cell once,
each cell job runs exactly its nox cell, and the report job's merge of the cells' artifacts is
the report of one merged run, with a cell that sent nothing as a failed row.
"""

from __future__ import annotations

import fnmatch
import importlib.util
import json
import re
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import yaml

from racegate.harness.run.record import Hardware, RunRecord, ThreadRecord, Versions, append_jsonl
from racegate.harness.scenario import matrix_plan, settings
from racegate.harness.scenario.spec import Scenario
from racegate.harness.scenario.vocab import CacheState, Outcome, Schedule, Strategy

ROOT = Path(__file__).resolve().parent.parent
WORKFLOW = ROOT / ".github" / "workflows" / "nightly-gpu.yml"
SCRIPT = ROOT / "scripts" / "nightly_plan.py"
NOXFILE = ROOT / "noxfile.py"
SUPPORT = ROOT / "nox_support.py"
PROCESS_FIXTURES = ("plan",)  # runs the plan script: its tests are in the process tier


def _load(name: str, path: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def plan_mod() -> ModuleType:
    return _load("racegate_nightly_plan", SCRIPT)


@pytest.fixture(scope="module")
def plan() -> list[dict[str, Any]]:
    """What the plan job prints: `scripts/nightly_plan.py plan`, no filter."""
    out = subprocess.run(
        [sys.executable, str(SCRIPT), "plan"], capture_output=True, text=True, check=True, cwd=ROOT
    )
    return json.loads(out.stdout)


@pytest.fixture(scope="module")
def workflow() -> dict[Any, Any]:
    return yaml.safe_load(WORKFLOW.read_text())


def _nox_list(*args: str) -> list[dict[str, Any]]:
    out = subprocess.run(
        [sys.executable, "-m", "nox", "-f", str(NOXFILE), "-l", "--json", *args],
        capture_output=True, text=True, check=True, cwd=ROOT,
    )  # fmt: skip
    return json.loads(out.stdout)


@pytest.mark.process
def test_plan_lists_every_gpu_matrix_cell_exactly_once(plan: list[dict[str, Any]]) -> None:
    sessions = [c["session"] for c in plan]
    assert len(sessions) == len(set(sessions))
    listed = _nox_list("-s", "gpu_matrix")
    assert sorted(sessions) == sorted(s["session"] for s in listed)
    torches = {s["call_spec"]["torch"] for s in listed}
    tfs = {s["call_spec"]["transformers"] for s in listed}
    # the whole torch × transformers grid of racegate/harness/expectations/versions.toml
    assert len(sessions) == len(torches) * len(tfs) == matrix_plan.load().gpu_cells
    (gpus,) = {t for s in listed for t in s["tags"] if t.startswith("gpus_")}
    assert len({c["artifact"] for c in plan}) == len(plan)  # no cell overwrites another's
    for c in plan:
        assert (
            c["session"] == f"gpu_matrix(torch={c['torch']!r}, transformers={c['transformers']!r})"
        )
        assert f"gpus_{c['gpus']}" == gpus
        assert re.fullmatch(r"racegate-cell-[A-Za-z0-9._-]+", c["artifact"]), c["artifact"]


@pytest.mark.process
def test_plan_filters_by_tags_and_rejects_a_filter_that_picks_nothing() -> None:
    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, str(SCRIPT), "plan", *args], capture_output=True, text=True, cwd=ROOT
        )

    one = run("-k", "torch_system and transformers_5_8_1")
    assert one.returncode == 0
    assert [c["session"] for c in json.loads(one.stdout)] == [
        "gpu_matrix(torch='system', transformers='5.8.1')"
    ]
    for bad in ("torch_9_9_9", "torch_system and ("):
        out = run("-k", bad)
        assert out.returncode == 2 and out.stdout == ""
        assert len(out.stderr.strip().splitlines()) == 1 and repr(bad) in out.stderr


@pytest.mark.process
def test_plan_writes_github_outputs(tmp_path: Path) -> None:
    out_file = tmp_path / "github_output"
    subprocess.run(
        [sys.executable, str(SCRIPT), "plan", "-k", "torch_2_11_0", "--github-output"],
        check=True, capture_output=True, cwd=ROOT, env={"GITHUB_OUTPUT": str(out_file)},
    )  # fmt: skip
    outputs = dict(line.split("=", 1) for line in out_file.read_text().splitlines())
    transformers = matrix_plan.load().gpu_transformers  # one torch: a cell per transformers
    assert outputs["count"] == str(len(transformers))
    assert {c["transformers"] for c in json.loads(outputs["cells"])} == set(transformers)


def _step(job: dict[str, Any], name_start: str) -> dict[str, Any]:
    (step,) = [s for s in job["steps"] if str(s.get("name", "")).startswith(name_start)]
    return step


def test_plan_job_feeds_the_cell_matrix(workflow: dict[Any, Any]) -> None:
    plan_job, cell = workflow["jobs"]["plan"], workflow["jobs"]["cell"]
    step = _step(plan_job, "Cells from nox")
    assert step["id"] == "plan"
    assert step["run"] == 'python3 scripts/nightly_plan.py plan -k "$CELLS" --github-output'
    assert (
        "inputs.cells" in plan_job["env"]["CELLS"]
        and "vars.RACEGATE_CELLS" in (plan_job["env"]["CELLS"])
    )
    assert plan_job["outputs"]["cells"] == "${{ steps.plan.outputs.cells }}"
    assert cell["needs"] == "plan"
    strategy = cell["strategy"]
    assert strategy["fail-fast"] is False
    assert "vars.RACEGATE_MAX_PARALLEL" in strategy["max-parallel"]
    assert strategy["matrix"] == {"cell": "${{ fromJSON(needs.plan.outputs.cells) }}"}
    assert cell["runs-on"] == ["self-hosted", "gpu", "gpus-${{ matrix.cell.gpus }}"]


@pytest.mark.process
def test_each_cell_job_runs_exactly_its_nox_cell(
    workflow: dict[Any, Any], plan: list[dict[str, Any]]
) -> None:
    cell = workflow["jobs"]["cell"]
    assert cell["env"]["SESSION"] == "${{ matrix.cell.session }}"
    run = _step(cell, "nox -s")["run"]
    nox_lines = [line.strip() for line in run.splitlines() if "nox" in line]
    assert nox_lines == ['python3 -m nox -s "$SESSION" -- "${args[@]}"']  # no -k, no other -s
    # What that line selects when SESSION holds each planned cell's name: that cell and no other.
    selected = _nox_list("-s", *(c["session"] for c in plan))
    assert sorted(s["session"] for s in selected) == sorted(c["session"] for c in plan)
    for c in (plan[0], plan[len(plan) // 2], plan[-1]):  # alone: a name matching two lists two
        assert [s["session"] for s in _nox_list("-s", c["session"])] == [c["session"]]
    upload = _step(cell, "Upload records")
    assert upload["if"] == "always()"
    assert upload["with"]["name"] == "${{ matrix.cell.artifact }}"
    assert upload["with"]["path"] == "${{ env.RACEGATE_RESULTS_DIR }}"
    assert "RUNNER_TEMP" in _step(cell, "Results folder")["run"]
    # The nox step stops before the job does, so the upload runs after a timed-out cell.
    assert _step(cell, "nox -s")["timeout-minutes"] < cell["timeout-minutes"]


def test_report_job_merges_every_artifact_and_publishes_junit(
    workflow: dict[Any, Any], plan_mod: ModuleType
) -> None:
    report = workflow["jobs"]["report"]
    assert report["needs"] == ["plan", "cell"] and report["if"] == "always()"
    download = _step(report, "Download every cell's artifact")
    assert download["with"]["pattern"] == plan_mod.ARTIFACT_PREFIX + "*"
    assert "merge-multiple" not in download["with"]  # one folder per artifact
    merge = " ".join(_step(report, "Merge into one report")["run"].split())
    assert merge.startswith("python3 scripts/nightly_plan.py report --plan")
    assert f"--artifacts {download['with']['path']} " in merge and "--via nox" in merge
    assert report["env"]["CELLS_PLAN"] == "${{ needs.plan.outputs.cells }}"
    junit = _step(report, "Publish JUnit")
    assert junit["uses"].startswith("EnricoMi/publish-unit-test-result-action@")
    assert junit["if"] == "always()" and report["permissions"]["checks"] == "write"
    names = re.findall(r"""junit[\w-]*\.xml""", SUPPORT.read_text())  # the sessions' helpers
    assert {"junit.xml", "junit-throughput.xml", "junit-race.xml"} <= set(names)
    pattern = junit["with"]["files"].removeprefix("artifacts/**/")
    assert all(fnmatch.fnmatch(n, pattern) for n in names)


def test_schedules_keep_the_weekday_and_sunday_selections(workflow: dict[Any, Any]) -> None:
    crons = [s["cron"] for s in workflow[True]["schedule"]]  # YAML reads `on:` as True
    assert crons == ["17 2 * * 1-6", "17 2 * * 0"]
    args = workflow["jobs"]["cell"]["env"]["PYTEST_ARGS"]
    sunday = re.search(r"github\.event\.schedule == '([^']+)' && '([^']+)'", args)
    assert sunday and sunday.groups() == (
        "17 2 * * 0",
        "--racegate-repeat 3 --racegate-run-timeout 120",
    )
    assert (
        "'--racegate-repeat 3 --racegate-run-timeout 120 -m \"not slow\"'" in args
    )  # Mon-Sat, the fallback


# ---- The report job's merge, on synthetic records written through racegate.harness.run.record.
# ----

PRODUCTION = settings.production_strategy()
OTHER = next(s for s in Strategy if s != PRODUCTION)


def _record(torch: str, tf: str, strategy: Strategy, outcome: Outcome, i: int) -> RunRecord:
    scenario = Scenario(
        preset="tiny", strategy=strategy, cache_state=CacheState.COLD,
        schedule=Schedule.RECOMPILE, devices=("cuda:0", "cuda:1"), threads_per_device=2, steps=3,
    )  # fmt: skip
    threads = [
        ThreadRecord(index=t, device=scenario.devices[t // 2], outcome=str(outcome), steps_done=4)
        for t in range(scenario.threads)
    ]
    return RunRecord(
        scenario=scenario,
        outcome=str(outcome),
        outcome_counts={str(outcome): scenario.threads},
        threads=threads,
        threads_asked=scenario.threads,
        threads_concurrent=scenario.threads,
        versions=Versions(torch=torch, transformers=tf, python="3.11.7"),
        hardware=Hardware(device_name="NVIDIA H200", cuda_device_count=2),
        wall_s=12.5 + i,
        repeat_index=i,
        timing_valid=False,
    )


def _cell_records(cell: dict[str, Any]) -> list[RunRecord]:
    """The production strategy clean in 5 runs beside the control (the first other strategy,
    per_device) failing 8 of 8: enough evidence for the verdict to call the row SAFE."""
    torch = "2.11.0+cu130" if cell["torch"] == "system" else cell["torch"]
    runs = [_record(torch, cell["transformers"], PRODUCTION, Outcome.OK, i) for i in range(5)]
    runs += [
        _record(torch, cell["transformers"], OTHER, Outcome.NESTED_FX_ERROR, i) for i in range(8)
    ]
    return runs


def _write_artifact(artifacts: Path, cell: dict[str, Any]) -> None:
    """The folder download-artifact makes: <artifact>/<nox cell folder>/records.jsonl + JUnit."""
    folder = artifacts / cell["artifact"] / cell["artifact"].removeprefix("racegate-cell-")
    for r in _cell_records(cell):
        append_jsonl(folder / "records.jsonl", r)
    (folder / "junit-race.xml").write_text('<testsuites><testsuite name="pytest"/></testsuites>')


def _report(plan: list[dict[str, Any]] | str, artifacts: Path, out: Path) -> Any:
    text = plan if isinstance(plan, str) else json.dumps(plan)
    return subprocess.run(
        [sys.executable, str(SCRIPT), "report", "--plan", text, "--artifacts", str(artifacts),
         "--out-dir", str(out), "--summary", str(out / "summary.md")],
        capture_output=True, text=True, cwd=ROOT,
    )  # fmt: skip


def _comparable(summary: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in summary.items() if k not in ("generated_at", "inputs")}


@pytest.fixture(scope="module")
def three_cells(plan: list[dict[str, Any]]) -> list[dict[str, Any]]:
    by_name = {c["session"]: c for c in plan}
    return [
        by_name[f"gpu_matrix(torch={t!r}, transformers={tf!r})"]
        for t, tf in (("system", "5.8.1"), ("2.11.0", "5.6.0"), ("2.13.0", "5.24.0"))
    ]


@pytest.mark.process
def test_merging_cell_artifacts_gives_the_report_of_one_merged_run(
    three_cells: list[dict[str, Any]], tmp_path: Path
) -> None:
    artifacts = tmp_path / "artifacts"
    for cell in three_cells:
        _write_artifact(artifacts, cell)
    fanned = _report(three_cells, artifacts, tmp_path / "fanned")

    merged = tmp_path / "one-run" / "records.jsonl"  # the same runs, as one sequential run wrote
    for cell in three_cells:
        for r in _cell_records(cell):
            append_jsonl(merged, r)
    one = subprocess.run(
        [sys.executable, "-m", "racegate", "report", str(merged), "--out-dir",
         str(tmp_path / "one"), "--title", "racegate nightly"],
        capture_output=True, text=True, cwd=ROOT,
    )  # fmt: skip

    assert fanned.returncode == one.returncode == 0, fanned.stderr + one.stderr
    for name in ("gate.json", "summary.json"):
        a = json.loads((tmp_path / "fanned" / name).read_text())
        b = json.loads((tmp_path / "one" / name).read_text())
        assert _comparable(a) == _comparable(b), name
    gate = json.loads((tmp_path / "fanned" / "gate.json").read_text())
    assert [(r["torch"], r["passed"]) for r in gate["rows"]] == [
        ("2.11.0", True), ("2.11.0+cu130", True), ("2.13.0", True)
    ]  # fmt: skip
    summary = json.loads((tmp_path / "fanned" / "summary.json").read_text())
    assert sum(c["runs"] for c in summary["cells"]) == 3 * 13  # 3 cells × (5 + 8 runs)
    assert any(c["nested_fx"]["runs"] == 8 for c in summary["cells"])  # the control hit
    text = (tmp_path / "fanned" / "summary.md").read_text()
    assert text.startswith((tmp_path / "fanned" / "matrix.md").read_text())
    assert all(f"`{c['session']}`: 13 run records" in text for c in three_cells)


@pytest.mark.process
def test_a_cell_that_sent_no_records_is_a_failed_row(
    three_cells: list[dict[str, Any]], plan_mod: ModuleType, tmp_path: Path
) -> None:
    artifacts = tmp_path / "artifacts"
    present, died, empty = three_cells
    _write_artifact(artifacts, present)
    # Another cell's job stopped before pytest wrote a record: an artifact with JUnit only.
    (artifacts / empty["artifact"]).mkdir(parents=True)
    (artifacts / empty["artifact"] / "junit.xml").write_text("<testsuites/>")
    out = tmp_path / "report"
    result = _report(three_cells, artifacts, out)  # `died`: its runner vanished, no artifact

    assert result.returncode == 1, result.stderr
    gate = json.loads((out / "gate.json").read_text())
    assert gate["passed"] is False
    rows = {(r["torch"], r["transformers"]): r for r in gate["rows"]}
    assert set(rows) == {("2.11.0+cu130", "5.8.1"), ("2.11.0", "5.6.0"), ("2.13.0", "5.24.0")}
    assert rows["2.11.0+cu130", "5.8.1"]["passed"] is True
    for cell in (died, empty):
        row = rows[cell["torch"], cell["transformers"]]
        assert row["passed"] is False
        assert any(
            f"{plan_mod.LOST_PRESET}/{PRODUCTION}/" in r and "crash in 1/1 runs" in r
            for r in row["reasons"]
        ), row["reasons"]
    text = (out / "summary.md").read_text()
    assert f"❌ `{died['session']}`: cell failed: no artifact" in text
    assert f"❌ `{empty['session']}`: cell failed: artifact without run records" in text
    assert "cell failed" in result.stderr
    # The marker is a record of the report's own: a rerun of the report job finds and keeps it.
    again = _report(three_cells, artifacts, tmp_path / "again")
    assert again.returncode == 1
    assert json.loads((tmp_path / "again" / "gate.json").read_text()) == gate


@pytest.mark.process
def test_report_rejects_a_missing_or_bad_plan(tmp_path: Path) -> None:
    for bad in ("[]", "not json", '[{"session": "x"}]'):
        out = _report(bad, tmp_path, tmp_path / "o")
        assert out.returncode == 2, (bad, out.stderr)
        assert len(out.stderr.strip().splitlines()) == 1 and "--plan" in out.stderr
