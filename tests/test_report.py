"""The report: cells and verdicts per hardware × torch × transformers, the gate, its files."""

from __future__ import annotations

import dataclasses
import json
import re
import shutil
import struct
from pathlib import Path
from typing import Any

import pytest

from racegate.harness.doors import cli
from racegate.harness.judge import baselines
from racegate.harness.judge.baselines import REFRESH_COMMAND
from racegate.harness.report import build as report
from racegate.harness.report import write as report_files
from racegate.harness.report.matrix import build_matrix, column_of
from racegate.harness.report.write import write_reports
from racegate.harness.run.record import Hardware, RunRecord
from racegate.harness.scenario.vocab import TEST_SLOWDOWN_ENV, Strategy
from tests.test_baselines import byo, make_record, write

PROD = "warmup"


@pytest.fixture(autouse=True)
def no_known_failures(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch):
    """These records' production strategy, `warmup` on cuda torch 2.11, is one race.toml row 9
    expects to fail (a spurious cache miss), which makes it UNSAFE whatever its runs show
    (tests/test_verdict.py tests that); the report's own rules are tested here, on no table."""
    from racegate.harness.judge import race_expectations

    empty = tmp_path_factory.mktemp("table") / "race.toml"
    empty.write_text("")
    monkeypatch.setattr(race_expectations, "DEFAULT_TABLE", empty)


@pytest.fixture
def floors(tmp_path: Path) -> Path:
    """A baseline for h200x2 with the warmup floor at 40,000 tok/s (tolerance 10%)."""
    out = tmp_path / "baselines"
    runs = [make_record(tps=t) for t in (39_000.0, 40_000.0, 41_000.0)]
    baselines.update_from_records([write(tmp_path / "floor.jsonl", runs)], out, tolerance=0.10)
    return out


def powered(record: RunRecord, runs: int = 5) -> list[RunRecord]:
    """`record` as `runs` runs, beside the control racing 8 of 8 runs in its cache state and
    topology: enough evidence for the verdict to call a clean production strategy SAFE."""
    s = record.scenario
    control = make_record(
        strategy="per_device", cache_state=s.cache_state, tpd=s.threads_per_device,
        torch=record.versions.torch, transformers=record.versions.transformers,
        devices=",".join(d.removeprefix("cuda:") for d in s.devices), nested=1, tps=None,
    )  # fmt: skip
    return again(record, runs) + again(control, 8)


def again(record: RunRecord, runs: int) -> list[RunRecord]:
    """`record` as `runs` runs: each a run of its own (a reader counts one run once)."""
    return [dataclasses.replace(record, run_id=f"{record.run_id}-{k}") for k in range(runs)]


def clean_row(**versions: str) -> list[RunRecord]:
    """The production strategy clean in every cache state, 5 runs each: as many as the control
    (per_device, racing in 8 of 8 runs per state: ≥ 68% at 95%) asks for 99% power."""
    states = ("cold", "warm", "deleted")
    runs = [make_record(cache_state=c, **versions) for c in states for _ in range(5)]
    runs += [
        make_record(strategy="per_device", cache_state=c, nested=1, tps=None, **versions)
        for c in states
        for _ in range(8)
    ]
    return runs


def test_cell_counts_nested_fx_runs_and_threads(floors: Path) -> None:
    runs = [make_record(strategy="per_device", tpd=2, nested=n, tps=None) for n in (2, 3, 0)]
    m = build_matrix(runs, floors, PROD)
    cell = m.cells[m.rows["h200x2"][0], column_of(runs[0])]
    assert (cell.n, cell.nested_runs, cell.nested_threads, cell.threads) == (3, 2, 5, 12)
    assert not cell.passed
    assert report.outcome_text(cell)[0] == "nested-FX 2/3 runs (5/12 thr)"
    assert cell.rates["nested_fx_error"][0] == pytest.approx(2 / 3)


def test_gate_passes_when_production_clean_and_at_floor(floors: Path) -> None:
    passed, reasons = report.gate(clean_row(), floors, PROD)
    assert passed, reasons
    assert not any("nested_fx_error" in r for r in reasons)  # per_device is not production


def test_gate_fails_on_nested_fx_in_production(floors: Path) -> None:
    runs = [*clean_row(), make_record(cache_state="deleted", tpd=2, nested=1)]
    passed, reasons = report.gate(runs, floors, PROD)
    assert not passed
    assert any(
        "torch 2.11.0+cu130 / transformers 5.8.1" in r
        and "warmup/deleted" in r
        and "nested_fx_error in 1/1 runs (1/4 threads)" in r
        for r in reasons
    ), reasons


def test_gate_fails_on_silent_fallback_and_other_outcomes(floors: Path) -> None:
    passed, reasons = report.gate([*clean_row(), make_record(fallback=2)], floors, PROD)
    assert not passed and any("silent_fallback in 1/" in r for r in reasons)
    passed, reasons = report.gate([*clean_row(), make_record(other="hang")], floors, PROD)
    assert not passed and any("hang in 1/" in r for r in reasons)


def test_gate_fails_below_floor(floors: Path) -> None:
    runs = [make_record(tps=35_000.0), make_record(cache_state="warm", tps=34_000.0)]
    passed, reasons = report.gate(runs, floors, PROD)
    assert not passed
    assert any("below the floor 40,000 tok/s" in r and "regression" in r for r in reasons)


def test_gate_fails_above_floor_with_refresh_command(floors: Path) -> None:
    passed, reasons = report.gate([make_record(tps=45_000.0)], floors, PROD)
    assert not passed
    assert any("above the floor" in r and REFRESH_COMMAND in r for r in reasons), reasons


def test_gate_without_baseline_skips_throughput_with_reason(tmp_path: Path) -> None:
    passed, reasons = report.gate(powered(make_record(tps=1.0)), tmp_path / "none", PROD)
    assert passed
    assert any("gate skipped, no baseline for hardware 'h200x2'" in r for r in reasons)


def test_gate_fails_when_memory_grows(floors: Path) -> None:
    passed, reasons = report.gate([make_record(mem_growth=0.04)], floors, PROD)
    assert not passed and any("not flat" in r and "MiB" in r for r in reasons)


def test_gate_fails_without_production_runs(floors: Path) -> None:
    """Nothing gated anywhere is a failure (fail closed), not a pass."""
    passed, reasons = report.gate([make_record(strategy="per_device")], floors, PROD)
    assert not passed and any("no runs of the production strategy 'warmup'" in r for r in reasons)
    assert report.gate([], floors, PROD)[0] is False


def test_gate_is_per_row(floors: Path) -> None:
    good = clean_row(transformers="5.8.1")
    bad = [*clean_row(transformers="5.6.0"), make_record(transformers="5.6.0", nested=1)]
    m = build_matrix(good + bad, floors, PROD)
    assert [r[1] for r in m.rows["h200x2"]] == ["5.6.0", "5.8.1"]
    assert m.gates["h200x2", ("2.11.0+cu130", "5.8.1")].passed
    assert not m.gates["h200x2", ("2.11.0+cu130", "5.6.0")].passed
    assert not m.passed


def _png_size(path: Path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    return struct.unpack(">II", data[16:24])


def test_write_reports(tmp_path: Path, floors: Path) -> None:
    records = tmp_path / "results" / "cell-a" / "records.jsonl"
    write(records, clean_row())
    write(tmp_path / "results" / "cell-b" / "records.jsonl", [
        *clean_row(transformers="5.6.0"),
        make_record(transformers="5.6.0", cache_state="warm", nested=1, tps=20_000.0),
    ])  # fmt: skip
    out = tmp_path / "report"
    paths = write_reports(
        [tmp_path / "results"], out, baselines_dir=floors, title="nightly", production_strategy=PROD
    )
    names = [p.name for p in paths]
    assert names[:3] == list(report.FILES[:3]) and names[-2:] == list(report.FILES[3:])
    assert "throughput-small.png" in names
    assert all(p.is_file() and p.stat().st_size > 0 for p in paths)

    md = (out / "matrix.md").read_text()
    assert md.startswith("# nightly") and "**UNSAFE: 1 of 2 gated groups SAFE.**" in md
    assert "| 2.11.0+cu130 | 5.8.1 | SAFE | SAFE 15 runs | UNSAFE 24/24 runs |" in md
    assert "| 2.11.0+cu130 | 5.6.0 | UNSAFE | UNSAFE 1/16 runs | UNSAFE 24/24 runs |" in md
    assert "## h200x2" in md and "### Legend" in md
    assert "UNSAFE torch 2.11.0+cu130 / transformers 5.6.0" in md
    assert "nested_fx_error in 1/6 runs (1/12 threads)" in md  # the failed cell, named
    assert len(md.encode()) < report_files.MAX_MARKDOWN_BYTES

    html = (out / "matrix.html").read_text()
    assert html.startswith("<!DOCTYPE html>") and "<style>" in html
    for external in ("<script", "<link", "src=", "http://", "https://", "url("):
        assert external not in html
    assert 'class="b fail"' in html and 'class="b pass"' in html
    assert "40.0K tok/s = 1.00x floor 40.0K ±10%: at floor" in html
    assert "nested-FX 8/8 runs (8/16 thr)" in html  # per_device: 8 runs a state, 1 of 2 threads hit

    width, height = _png_size(out / "throughput-small.png")
    assert 400 < width <= 1400 and 100 < height < 1200

    gate = json.loads((out / "gate.json").read_text())
    assert gate["passed"] is False and gate["production_strategy"] == PROD
    by_row = {r["transformers"]: r for r in gate["rows"]}
    assert {r["hardware"] for r in gate["rows"]} == {"h200x2"}
    assert by_row["5.8.1"]["passed"] and not by_row["5.6.0"]["passed"]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["gate"] == gate
    cells = [c for c in summary["cells"] if c["transformers"] == "5.6.0" and c["status"] == "fail"]
    assert any(c["nested_fx"] == {"runs": 1, "threads": 1} for c in cells)


def test_markdown_drops_details_when_too_big(
    tmp_path: Path, floors: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(report_files, "MAX_MARKDOWN_BYTES", 1500)
    records = write(tmp_path / "r.jsonl", clean_row())
    paths = write_reports(
        [records], tmp_path / "out", baselines_dir=floors, title="t", production_strategy=PROD
    )
    md = paths[0].read_text()
    assert "cut to fit a step summary" in md and "| 2.11.0+cu130 | 5.8.1 | SAFE |" in md


def test_cli_report_writes_files(
    tmp_path: Path, floors: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RACEGATE_PRODUCTION_STRATEGY", PROD)  # the rows' production strategy
    records = write(tmp_path / "r.jsonl", clean_row())
    out = tmp_path / "out"
    argv = ["report", str(records), "--out-dir", str(out), "--baselines", str(floors)]
    assert cli.main(argv) == 0
    assert json.loads((out / "gate.json").read_text())["passed"] is True


def test_overlapped_runs_count_for_outcomes_not_timings(floors: Path, tmp_path: Path) -> None:
    """`--jobs`/xdist runs slow each other down: their tokens/s must never fail (or pass) a gate.
    Where a floor exists and no run was timed, the gate fails unless it is race-only."""
    slow = make_record(tps=30_000.0)  # 25% below the 40,000 floor
    assert not report.gate([slow], floors, PROD)[0]
    overlapped = dataclasses.replace(slow, timing_valid=False)
    passed, reasons = report.gate(powered(overlapped), floors, PROD)
    assert not passed and any("no run was timed" in r for r in reasons), reasons
    passed, reasons = report.gate(powered(overlapped), floors, PROD, race_only=True)
    assert passed, reasons
    m = build_matrix([overlapped], floors, PROD)
    assert m.cells[m.rows["h200x2"][0], column_of(overlapped)].tokens_per_s is None
    notes = m.gates["h200x2", m.rows["h200x2"][0]].notes
    assert any("runs overlapped others: 1 of 1" in n for n in notes)


def test_production_runs_under_the_test_slowdown_fail_their_group(floors: Path) -> None:
    """Clean, powered production runs whose environment set the test slowdown measured another
    step than the workload's: the group fails and says why (before, it passed)."""
    tool = f"{TEST_SLOWDOWN_ENV}=0.05"
    runs = [dataclasses.replace(r, test_slowdown=tool) if r.scenario.strategy == PROD else r
            for r in powered(make_record())]  # fmt: skip
    passed, reasons = report.gate(runs, floors, PROD)
    assert not passed, reasons
    assert any("runs under the test slowdown (RACEGATE_TEST_SLOWDOWN, a test tool)" in r
               for r in reasons), reasons  # fmt: skip


def test_overlapped_records_void_only_their_own_timings(
    floors: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Records that say timing_valid false beside runs timed alone: the report voids the first
    (as its record says; nothing rewrites it at read time) and still shows and gates the second."""
    monkeypatch.setenv("RACEGATE_PRODUCTION_STRATEGY", PROD)
    recs = tmp_path / "records"
    recs.mkdir()
    # Below the 40,000 floor, and more of them than the 5 cold runs timed alone.
    slow = again(make_record(tps=30_000.0), 6)
    timed = write(recs / "timed.jsonl", slow)
    alone = write(recs / "alone.jsonl", clean_row())
    out = tmp_path / "out"
    common = ["--out-dir", str(out), "--baselines", str(floors)]
    assert cli.main(["report", str(alone), str(timed), *common]) == 1  # the slow tokens/s gated
    void = [dataclasses.replace(r, timing_valid=False) for r in slow]
    overlapped = write(tmp_path / "overlapped.jsonl", void)
    assert cli.main(["report", str(alone), str(overlapped), *common]) == 0
    cells = json.loads((out / "summary.json").read_text())["cells"]
    assert any(c.get("tokens_per_s") for c in cells)  # the alone runs' rate is still shown
    assert sum(c["runs"] for c in cells) == len(clean_row()) + 6
    monkeypatch.chdir(tmp_path)  # no checkout here: no latest run to fall back on
    assert cli.main(["report", "--out-dir", str(out)]) == 2  # nothing to report: usage error


def test_the_incident_topology_has_a_column_of_its_own(floors: Path) -> None:
    plain = make_record()
    incident = dataclasses.replace(
        plain, scenario=dataclasses.replace(plain.scenario, target_devices=("cuda:0",))
    )
    m = build_matrix([plain, incident], floors, PROD)
    labels = sorted(c.topology for c in m.columns)  # (the chart's rows, the details' lines)
    assert labels == ["h200x2 2×1", "h200x2 2×1 +target on 1"]


def test_a_run_that_never_reported_joins_its_rows_machine(floors: Path) -> None:
    hung = dataclasses.replace(
        make_record(strategy="per_device", other="hang", tps=None),
        hardware=Hardware(device_name="unknown (child did not report)"),
    )
    cpu_run = make_record(devices="cpu", hardware={"device_name": "cpu"}, tps=None)
    cpu_run = dataclasses.replace(
        cpu_run, scenario=dataclasses.replace(cpu_run.scenario, strategy=Strategy.EAGER)
    )
    runs = [*clean_row(), *again(cpu_run, 9), hung]  # the row's most common machine is the CPU
    m = build_matrix(runs, floors, PROD)
    per_device = [c for c in m.columns if c.strategy == "per_device" and c.devices == 2]
    assert {c.hardware for c in per_device} == {"h200x2"}  # a GPU run never lands under cpu
    assert not any(c.hardware.startswith("unknown") for c in m.columns)


CPU = {"device_name": "cpu"}
EMOJI = re.compile("[\U0001f000-\U0001faff\u2600-\u27bf\u2b50\u2b55\ufe0f]")


def cpu_record(**kw: Any) -> RunRecord:
    return make_record(devices="cpu", hardware=CPU, tps=None, **kw)


def test_cpu_and_gpu_records_of_one_version_pair_are_never_merged(floors: Path) -> None:
    """Same torch × transformers on a CPU and an H200: two groups, two verdicts, two gates."""
    gpu = clean_row()
    cpu = [cpu_record(strategy="per_device", nested=1), cpu_record(nested=1)]  # prod fails
    m = build_matrix(gpu + cpu, floors, PROD)
    assert m.hardware == ["h200x2", "cpu"]  # the GPU (production hardware) first
    row = ("2.11.0+cu130", "5.8.1")
    assert m.gates["h200x2", row].passed and m.gates["cpu", row].status == "fail"
    assert m.groups["h200x2", row].status(PROD).runs == 15  # only its own runs
    assert m.groups["cpu", row].status(PROD).runs == 1
    assert not m.passed
    passed, reasons = report.gate(gpu + cpu, floors, PROD)
    assert not passed and any(r.startswith("cpu torch 2.11.0+cu130") for r in reasons), reasons


def test_old_records_without_the_production_strategy_are_not_gated(
    floors: Path, tmp_path: Path
) -> None:
    """Older CPU records that never ran the production strategy neither fail nor pass."""
    old = [cpu_record(strategy="per_device", torch="2.10.0", transformers="5.6.0", nested=1)]
    m = build_matrix(clean_row() + old, floors, PROD)
    g = m.gates["cpu", ("2.10.0", "5.6.0")]
    assert g.status == "not gated" and not g.gated and not g.reasons
    assert m.passed  # the gated H200 row passed; the old row is no failure
    paths = write_reports(
        [write(tmp_path / "r.jsonl", clean_row() + old)], tmp_path / "out",
        baselines_dir=floors, title="t", production_strategy=PROD,
    )  # fmt: skip
    gate = json.loads(paths[-1].read_text())
    assert gate["passed"] is True
    cpu_rows = [r for r in gate["rows"] if r["hardware"] == "cpu"]
    assert cpu_rows == [{**cpu_rows[0], "status": "not gated", "gated": False, "passed": None}]
    html = (tmp_path / "out" / "matrix.html").read_text()
    cpu_section = html[html.index("<h2>cpu</h2>") : html.index("<h2>Details")]
    assert "not gated" in cpu_section and "b fail" not in cpu_section
    assert "<th>gate</th>" not in cpu_section  # no gate column where no row was gated
    # Nothing gated at all: that is a failure, not a pass.
    assert report.gate(old, floors, PROD)[0] is False


def test_masked_when_clean_but_a_probe_shows_the_hazard_on_this_torch(floors: Path) -> None:
    """per_device clean on CPU torch 2.13 (racegate/harness/expectations/probes.toml: the make_fx
    hazard)."""
    runs = [cpu_record(strategy="per_device", torch=t, tpd=2) for t in ("2.13.0+cpu", "2.14.1")]
    m = build_matrix(runs, floors, PROD)
    assert m.groups["cpu", ("2.13.0+cpu", "5.8.1")].status("per_device").status == "MASKED"
    assert m.groups["cpu", ("2.14.1", "5.8.1")].status("per_device").status == "SAFE"
    assert m.groups["cpu", ("2.14.1", "5.8.1")].status(PROD).status == "NOT RUN"


def _tables(html: str) -> list[list[list[str]]]:
    """Every <table> as rows of cell texts (tags stripped)."""
    out = []
    for table in re.findall(r"<table.*?</table>", html, flags=re.S):
        rows = re.findall(r"<tr>(.*?)</tr>", table, flags=re.S)
        cell = r"<t[dh][^>]*>(.*?)</t[dh]>"
        out.append(
            [[re.sub(r"<[^>]+>", "", c).strip() for c in re.findall(cell, r, re.S)] for r in rows]
        )
    return out


def test_no_empty_tables_rows_or_columns_and_no_emoji(floors: Path, tmp_path: Path) -> None:
    gpu = [*clean_row(), make_record(strategy="singleton", nested=1, tps=None)]
    cpu = [cpu_record(strategy="per_device", torch="2.10.0"), cpu_record(strategy="processes")]
    paths = write_reports(
        [write(tmp_path / "r.jsonl", gpu + cpu)], tmp_path / "out",
        baselines_dir=floors, title="t", production_strategy=PROD,
    )  # fmt: skip
    html = (tmp_path / "out" / "matrix.html").read_text()
    tables = _tables(html)
    assert tables
    for table in tables:
        header, *body = table
        assert body, f"a table with no rows: {header}"
        for row in body:
            assert any(c not in ("", "-", "no data") for c in row[2:]), f"an empty row: {row}"
        for j in range(len(header)):  # no column that is empty in every row
            assert any(row[j] not in ("", "-", "no data") for row in body), f"empty {header[j]}"
    cpu_section = html[html.index("<h2>cpu</h2>") : html.index("<h2>Details")]
    assert "singleton" not in cpu_section  # a strategy only where it ran
    for p in paths:
        if p.suffix in (".html", ".md", ".json"):
            text = p.read_text()
            assert not EMOJI.search(text), f"{p.name}: {EMOJI.search(text)}"
    runs = (tmp_path / "out" / "runs.html").read_text()
    assert not EMOJI.search(runs)
    # Every link to a run lands on that run's anchor.
    links = set(re.findall(r'href="runs\.html#(run-\d+)"', html))
    anchors = set(re.findall(r'id="(run-\d+)"', runs))
    assert links and links <= anchors and len(anchors) == len(gpu + cpu)
    # Every badge in a verdict table leads to a cell fold.
    folds = set(re.findall(r'<details class="cell" id="([^"]+)"', html))
    assert set(re.findall(r'href="#(c-[^"]+)"', html)) == folds


def test_run_page_shows_error_text_and_stacks(floors: Path, tmp_path: Path) -> None:
    hung = make_record(strategy="per_device", other="hang", tps=None)
    hung = dataclasses.replace(hung, stacks="Thread 0x1 (most recent call first):\n  File x.py")
    hung.threads[0].error = "Hang: no step in 60 s"  # thread 0 is the one that hung
    hung.threads[0].error_text = "Hang: no step in 60 s\nfull chain"
    write_reports(
        [write(tmp_path / "r.jsonl", [*clean_row(), hung])], tmp_path / "out",
        baselines_dir=floors, title="t", production_strategy=PROD,
    )  # fmt: skip
    html = (tmp_path / "out" / "matrix.html").read_text()
    assert "<b>hang</b> in 1 run: Hang: no step in 60 s" in html
    runs = (tmp_path / "out" / "runs.html").read_text()
    assert "Thread 0x1 (most recent call first)" in runs and "full chain" in runs
    assert "r.jsonl#6" in runs  # where the record lies: file and position


def test_one_readable_chart_per_preset(tmp_path: Path) -> None:
    """Each preset with a floor gets its own chart, 1,200 px wide, ratios to the floor."""
    floors_dir = tmp_path / "baselines"
    sources = [make_record(tps=40_000.0), make_record(preset="tiny", tps=9_000.0)]
    baselines.update_from_records([write(tmp_path / "f.jsonl", sources)], floors_dir)
    many = [
        make_record(preset=p, transformers=f"5.{i}.0", tps=t * (0.8 + 0.04 * i))
        for p, t in (("small", 40_000.0), ("tiny", 9_000.0))
        for i in range(12)
    ]  # 12 version pairs: more than a 10-colour cycle
    paths = write_reports(
        [write(tmp_path / "r.jsonl", many)], tmp_path / "out",
        baselines_dir=floors_dir, title="t", production_strategy=PROD,
    )  # fmt: skip
    charts = sorted(p.name for p in paths if p.suffix == ".png")
    assert charts == ["throughput-small.png", "throughput-tiny.png"]
    for name in charts:
        width, height = _png_size(tmp_path / "out" / name)
        assert width == 1200 and height < 1000, (name, width, height)
    from racegate.harness.report.png import MARKERS

    assert len(MARKERS) * 10 >= 12  # colour × marker pairs never repeat within 12 rows


def write_ab(
    folder: Path,
    candidate_tps: list[float],
    *,
    memory: int | None = 4_000_000_000,
    candidate_env: dict[str, str] | None = None,
    same_versions: bool = False,
    **fields: Any,
) -> Path:
    """An A/B result as `racegate.harness.ab compare --out` writes it, its calls made by the real
    statistics from these per-run numbers; its one-thread runs' records in `ab-records/`.
    `same_versions`: 5.6.0 on both sides, one python (an A/A or, with `candidate_env`, a
    calibration of the test slowdown)."""
    from racegate.harness.ab.result import ABResult
    from racegate.harness.ab.stats import RunSample, compare_samples

    versions = {"reference": "5.6.0", "candidate": "5.6.0" if same_versions else "5.8.1"}
    envs = {"reference": {}, "candidate": candidate_env or {}}
    tps = {"reference": [40_000.0, 40_400.0, 39_800.0], "candidate": candidate_tps}
    samples = [
        RunSample(side, i, t, memory, {"torch": "2.11.0+cu130", "transformers": v}, 30.0)
        for side, v in versions.items()
        for i, t in enumerate(tps[side])
    ]
    result = ABResult(
        ["--preset", "small", "--devices", "0", "--threads-per-device", "1"],
        {
            s: {"python": "python3", "env": envs[s], "versions": {"transformers": v}}
            for s, v in versions.items()
        },
        samples,
    )
    if min(len(t) for t in tps.values()) >= 2:
        result.throughput, result.memory, result.memory_note = compare_samples(samples, 0.03, 0.95)
    folder.mkdir(parents=True, exist_ok=True)
    for side, v in versions.items():
        runs = [make_record(transformers=v, devices="0", tpd=1, tps=t) for t in tps[side]]
        write(folder / "ab-records" / f"{side}.jsonl", runs)
    (folder / "ab.json").write_text(json.dumps({**result.to_json(), **fields}))
    return folder / "ab.json"


def report_md(results: Path, out: Path, floors: Path) -> tuple[int, str]:
    argv = ["report", str(results), "--out-dir", str(out), "--baselines", str(floors)]
    return cli.main(argv), (out / "matrix.md").read_text()


def line_of(md: str, text: str) -> str:
    return next(line for line in md.splitlines() if text in line)


def test_the_report_shows_an_ab_and_a_slower_candidate_fails_its_gate(
    tmp_path: Path, floors: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An ab.json among the report's paths: a table row with its ratio and call, its runs kept
    out of the race tables (one thread: no race evidence), and its call in the gate."""
    monkeypatch.setenv("RACEGATE_PRODUCTION_STRATEGY", PROD)
    results, out = tmp_path / "results", tmp_path / "out"
    write(results / "cell" / "records.jsonl", clean_row())
    write_ab(results / "ab-same", [40_100.0, 39_900.0, 40_300.0])
    rc, md = report_md(results, out, floors)
    assert rc == 0, md
    assert "A/B: 1 of 1 comparison passed" in md and "## A/B comparisons" in md
    row = line_of(md, "ab-same")
    assert row.startswith("| ab-same/ab.json | small | transformers 5.6.0 → 5.8.1 |"), row
    assert "no significant change" in row and row.endswith("| 3 vs 3 | PASS |"), row
    # The A/B's 6 one-thread runs are not a race row of their own: only the cell's row is there.
    assert "| 2.11.0+cu130 | 5.8.1 | SAFE | SAFE 15 runs |" in md and "| 5.6.0 |" not in md
    assert "the 6 runs of these comparisons are shown here" in md

    write_ab(results / "ab-slower", [36_000.0, 36_300.0, 35_900.0])  # ≈ −10%
    rc, md = report_md(results, out, floors)
    assert rc == 1
    row = line_of(md, "ab-slower")
    assert ": slower |" in row and row.endswith("| FAIL |"), row
    assert "A/B: 1 of 2 comparisons passed" in md
    why = line_of(md, "**FAIL ab-slower")  # the reason says what regressed, and by how much
    assert re.search(r"tokens_per_s: 0\.9\d\dx \[.*\): slower$", why), why
    gate = json.loads((out / "gate.json").read_text())
    assert gate["passed"] is False
    assert [(a["path"], a["passed"]) for a in gate["ab"]] == [
        ("ab-same/ab.json", True),
        ("ab-slower/ab.json", False),
    ]
    html = (out / "matrix.html").read_text()
    assert "<h2>A/B comparisons</h2>" in html and "ab-slower" in html
    assert "ab-slower/ab.json: tokens_per_s: 0.900x" in html


def test_an_ab_fails_the_report_but_never_stands_in_for_a_gated_group(
    tmp_path: Path, floors: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A passing A/B alone (no race run of the production strategy) is no pass; race records
    beside an ab.json stay race evidence; a gpu_ab folder cut before its ab.json, and an A/B
    that lost a run before each side had two, are failed comparisons."""
    monkeypatch.setenv("RACEGATE_PRODUCTION_STRATEGY", PROD)
    results, out = tmp_path / "results", tmp_path / "out"
    write_ab(results / "ab", [40_100.0, 39_900.0, 40_300.0])
    rc, md = report_md(results, out, floors)
    # No race evidence: UNDECIDED (7), never a pass, and never UNSAFE for a passing A/B.
    assert rc == 7 and "UNDECIDED: no group ran the production strategy" in md, md
    assert line_of(md, "ab/ab.json").endswith("| PASS |")

    write(results / "ab" / "records.jsonl", clean_row())  # race records beside the ab.json
    rc, md = report_md(results, out, floors)
    assert rc == 0 and "| 2.11.0+cu130 | 5.8.1 | SAFE | SAFE 15 runs |" in md, md

    cut = write_ab(results / "cut", [40_000.0, 40_100.0])
    cut.unlink()  # killed before it wrote its result: only ab-records/ is left
    short = write_ab(
        results / "short",
        [40_000.0],
        failure="candidate run 2 of 3: the run crashed",
    )
    rc, md = report_md(results, out, floors)
    assert rc == 1 and "A/B: 1 of 3 comparisons passed" in md, md
    cut_row = line_of(md, "| cut/ab-records |")
    assert "| unknown: no run reported its versions |" in cut_row, cut_row
    assert cut_row.endswith("| 5 runs, no result | FAIL |"), cut_row
    assert "**FAIL cut/ab-records**: runs in ab-records/ but no ab.json beside them" in md
    row = line_of(md, "| short/ab.json |")
    assert "| not compared | not compared (a run failed) | 3 vs 1 | FAIL |" in row, row
    assert f"**FAIL {short.relative_to(results)}**: candidate run 2 of 3: the run crashed" in md
    assert "| 5.6.0 |" not in md  # none of the three comparisons' runs is a race row
    assert "the 15 runs of these comparisons are shown here" in md  # 6 + 4 + 5


def test_an_interrupted_ab_leaves_the_report_undecided_not_unsafe(
    tmp_path: Path, floors: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An A/B stopped before its call (Ctrl-C, a CI runner's SIGTERM: `racegate.harness.ab` and
    `racegate upgrade` exit 130 there) decided nothing and found nothing worse: beside a SAFE
    group the report is UNDECIDED (7), asks for the A/B again, and its gate cell and badge say
    INTERRUPTED, not FAIL; a failed one beside it still makes it UNSAFE."""
    monkeypatch.setenv("RACEGATE_PRODUCTION_STRATEGY", PROD)
    results, out = tmp_path / "results", tmp_path / "out"
    write(results / "cell" / "records.jsonl", clean_row())
    cut = write_ab(
        results / "cut", [40_000.0],
        failure="interrupted after 2 of 6 runs (reference 1, candidate 1); no call is made",
        interrupted=True,
    )  # fmt: skip
    rc, md = report_md(results, out, floors)
    gate = json.loads((out / "gate.json").read_text())
    assert rc == 7 and gate["decision"] == "UNDECIDED", (rc, gate)
    assert gate["next"] == f"run the A/B of {cut.relative_to(results)} again, to its end", gate
    assert "interrupted after 2 of 6 runs" in gate["reason"], gate
    row = line_of(md, "| cut/ab.json |")
    assert row.endswith("| not compared (interrupted) | 3 vs 1 | INTERRUPTED |"), row
    assert f"**INTERRUPTED {cut.relative_to(results)}**: interrupted after 2 of 6" in md, md
    html = (out / "matrix.html").read_text()
    assert '<span class="b masked">INTERRUPTED</span>' in html
    assert '<span class="b fail">FAIL</span>' not in html

    write_ab(results / "slower", [36_000.0, 36_100.0, 35_900.0])  # −10%: a regression
    rc, md = report_md(results, out, floors)
    assert rc == 1 and json.loads((out / "gate.json").read_text())["decision"] == "UNSAFE"


def test_a_calibration_is_shown_with_its_call_and_gates_nothing(
    tmp_path: Path, floors: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A/B calibrations (one python, the same versions: an A/A, or the candidate under the
    test slowdown) are rows that say whether they came out as they must, and never fail the
    gate (the committed report failed on the 8B's caught 5%); the test slowdown in a
    comparison of other versions fails it."""
    monkeypatch.setenv("RACEGATE_PRODUCTION_STRATEGY", PROD)
    results, out = tmp_path / "results", tmp_path / "out"
    write(results / "cell" / "records.jsonl", clean_row())
    slowed = {TEST_SLOWDOWN_ENV: "0.05"}
    five = [38_000.0, 38_200.0, 37_900.0]  # ≈ −5%
    write_ab(results / "caught", five, candidate_env=slowed, same_versions=True)
    write_ab(results / "aa", [40_100.0, 39_900.0, 40_300.0], same_versions=True)
    write_ab(results / "missed", [40_100.0, 39_900.0, 40_300.0], candidate_env=slowed,
             same_versions=True)  # fmt: skip
    rc, md = report_md(results, out, floors)
    assert rc == 0, md
    assert "SAFE: 1 of 1 gated group SAFE; A/B calibrations (not gated): 2 of 3" in md
    assert line_of(md, "| caught/ab.json |").endswith("| calibration: as it must |")
    assert line_of(md, "| aa/ab.json |").endswith("| calibration: as it must |")
    assert line_of(md, "| missed/ab.json |").endswith("| calibration: missed |")
    why = line_of(md, "**Calibration not as it must, missed/ab.json**")
    assert "the slowdown was not caught: tokens_per_s: 1.00" in why, why
    gate = json.loads((out / "gate.json").read_text())
    assert gate["passed"] is True
    assert {a["path"]: a["calibration"] for a in gate["ab"]}["aa/ab.json"] == "A/A"

    write_ab(results / "misused", five, candidate_env=slowed)  # other versions: no calibration
    rc, md = report_md(results, out, floors)
    assert rc == 1 and "A/B: 0 of 1 comparison passed" in md, md
    assert line_of(md, "| misused/ab.json |").endswith("| FAIL |")
    why = line_of(md, "**FAIL misused/ab.json**")
    assert f"the candidate ran under {TEST_SLOWDOWN_ENV}=0.05, a test tool" in why, why
    html = (out / "matrix.html").read_text()
    assert "calibration: as it must" in html and "misused/ab.json: the candidate ran" in html


def test_a_calibrations_pools_get_their_power_row(
    tmp_path: Path, floors: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The pools beside an injected-slowdown calibration (`compare --records`, several calls
    concatenated) are drawn into disjoint 2-vs-2 comparisons as `racegate.harness.ab power` draws
    them, and the report shows the false alarms and catches; a pool with a failed run says so."""
    monkeypatch.setenv("RACEGATE_PRODUCTION_STRATEGY", PROD)
    results, out = tmp_path / "results", tmp_path / "out"
    write(results / "cell" / "records.jsonl", clean_row())
    slowed = {TEST_SLOWDOWN_ENV: "0.05"}
    pool = results / "pool"
    write_ab(pool, [38_000.0, 38_200.0, 37_900.0], candidate_env=slowed, same_versions=True)
    shutil.rmtree(pool / "ab-records")  # compare --records keeps its runs beside the ab.json
    ref = [40_000.0, 40_100.0, 39_900.0, 40_050.0, 39_950.0, 40_020.0, 39_980.0, 40_010.0]
    write(pool / "reference.jsonl", [make_record(tps=t, transformers="5.6.0") for t in ref])
    cand = [t * 0.95 for t in ref]  # the injected 5%
    write(pool / "candidate.jsonl", [make_record(tps=t, transformers="5.6.0") for t in cand])
    rc, md = report_md(results, out, floors)
    assert rc == 0, md
    row = next(line for line in md.splitlines() if line.startswith("| pool | 8 + 8 |"))
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert cells[3:6] == ["0 of 4", "4 of 4 (5%)", "2 / 2"], row
    pools = json.loads((out / "summary.json").read_text())["calibration_pools"]
    assert pools[0]["A/A false alarms"] == "0 of 4", pools
    assert "Calibration pools" in (out / "matrix.html").read_text()

    write(pool / "candidate.jsonl", [make_record(tps=None, other="hang", transformers="5.6.0")])
    rc, md = report_md(results, out, floors)
    row = next(line for line in md.splitlines() if line.startswith("| pool | not read: "))
    assert "candidate.jsonl record 9: outcome hang" in row, row


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"schema_version": 7}, "schema_version is 7"),
        ({"samples": "none"}, "samples is 'none'"),
        ({"failure": 5}, "failure is 5"),
        ({"sides": {"reference": "x"}}, "sides has ['reference']; expected exactly"),
        ({"run_args": "--preset small"}, "run_args is '--preset small'; expected a list"),
    ],
)
def test_a_bad_ab_json_is_a_usage_error_in_one_line(
    tmp_path: Path,
    floors: Path,
    fields: dict[str, Any],
    message: str,
    capsys: pytest.CaptureFixture[str],
) -> None:
    path = write_ab(tmp_path / "ab", [40_000.0, 40_100.0, 39_900.0], **fields)
    argv = ["report", str(path.parent), "--out-dir", str(tmp_path / "out")]
    assert cli.main([*argv, "--baselines", str(floors)]) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and str(path) in err and len(err.splitlines()) == 1, err


def test_an_ab_json_whose_stored_call_its_samples_do_not_give_is_refused(tmp_path: Path) -> None:
    """The calls are made again from the runs (one decision point): a stored call that the
    samples do not give, for either metric, fails closed, naming the field."""
    from racegate.harness.ab.store import read_ab

    path = write_ab(tmp_path / "ab", [40_000.0, 40_100.0, 39_900.0])
    assert read_ab(path).throughput.word == "no significant change"  # type: ignore[union-attr]
    good = json.loads(path.read_text())
    for name, change in (("throughput", "higher"), ("memory", "lower")):
        data = json.loads(json.dumps(good))
        data[name]["change"] = change
        path.write_text(json.dumps(data))
        with pytest.raises(ValueError, match=re.escape(f"{name}.change is '{change}', but its")):
            read_ab(path)
    # A memory call stored over runs that measured no memory (CPU): nothing gives it.
    cpu = write_ab(tmp_path / "cpu", [40_000.0, 40_100.0, 39_900.0], memory=None)
    data = json.loads(cpu.read_text())
    data["memory"] = {**good["memory"], "change": "higher"}
    cpu.write_text(json.dumps(data))
    with pytest.raises(
        ValueError, match=re.escape("memory.change is 'higher', but its samples give None")
    ):
        read_ab(cpu)


def test_an_ab_json_whose_runs_stepped_on_two_gpus_fails_its_gate(tmp_path: Path) -> None:
    """Samples of two GPUs make no A/B, whatever call the file stores: read back, it fails."""
    from racegate.harness.ab.store import read_ab

    path = write_ab(tmp_path / "ab", [40_000.0, 40_100.0, 39_900.0])
    data = json.loads(path.read_text())
    for sample in data["samples"]:
        sample["gpus"] = ["GPU-a" if sample["side"] == "reference" else "GPU-b"]
    path.write_text(json.dumps(data))
    result = read_ab(path)
    assert result.failed and result.failure is not None
    assert "run 1 (reference) on GPU-a" in result.failure and "GPU-b" in result.failure
    data["samples"][0]["gpus"] = "GPU-a"
    path.write_text(json.dumps(data))
    with pytest.raises(ValueError, match=re.escape("samples[0].gpus is 'GPU-a'; expected a list")):
        read_ab(path)


def test_another_workloads_runs_get_a_section_and_a_verdict_of_their_own(
    floors: Path, tmp_path: Path
) -> None:
    """A `--workload` step that serialises its threads fails its own group; the drafter's clean
    row beside it, on the same hardware and versions, still passes, and the other step's runs
    are neither in its cells nor judged by its floor."""
    theirs = [byo(make_record(other="not_concurrent", tps=900.0)) for _ in range(3)]
    m = build_matrix([*clean_row(), *theirs], floors, PROD)
    assert m.hardware == ["h200x2", "h200x2 · workload my.step:make"]
    row = ("2.11.0+cu130", "5.8.1")
    assert m.groups["h200x2", row].gate.passed
    mine = m.groups["h200x2 · workload my.step:make", row]
    assert not mine.gate.passed and all(r.scenario.workload == "my.step:make" for r in mine.records)
    assert any("not_concurrent in 3/3 runs" in r for r in mine.gate.reasons), mine.gate.reasons
    assert not any("below the floor" in r for r in mine.gate.reasons)  # the drafter's 40,000
    path = write(tmp_path / "runs.jsonl", [*clean_row(), *theirs])
    out = tmp_path / "out"
    write_reports([path], out, baselines_dir=floors, title="t", production_strategy=PROD)
    md = (out / "matrix.md").read_text()
    assert "## h200x2 · workload my.step:make" in md
    assert "no floor in baselines/h200x2.json" in md and "baselines/h200x2 · " not in md


def test_the_ab_table_shows_each_devices_peak_and_growth_and_fails_on_one(
    tmp_path: Path, floors: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An A/B of real two-GPU records whose candidate needs a quarter more memory on cuda:1
    (and less on cuda:0: the sum moves +2.5%, no call): the memory cell shows each device's
    peak and growth, and the gate fails naming cuda:1 and by how much."""
    from tests.test_ab import _peaks, _two_gpu_ab

    monkeypatch.setenv("RACEGATE_PRODUCTION_STRATEGY", PROD)
    results, out = tmp_path / "results", tmp_path / "out"
    write(results / "cell" / "records.jsonl", clean_row())
    (results / "ab-device").mkdir(parents=True)
    moved = _two_gpu_ab(_peaks(0.8, 1.25)).to_json()
    (results / "ab-device" / "ab.json").write_text(json.dumps(moved))
    rc, md = report_md(results, out, floors)
    assert rc == 1, md
    row = line_of(md, "| ab-device/ab.json |")
    assert (
        ": no significant change; cuda:0 2.94 → 2.35 GiB, growth +0.0% → +0.0%; "
        "cuda:1 2.94 → 3.67 GiB (more memory), growth +0.0% → +0.0% |"
    ) in row, row
    assert row.endswith("| 3 vs 3 | FAIL |"), row
    why = line_of(md, "**FAIL ab-device/ab.json**")
    assert "peak_mem_bytes on cuda:1: 1.250x [1.250, 1.250] (2.94 → 3.67 GiB" in why, why
    html = (out / "matrix.html").read_text()
    assert "cuda:1 2.94 → 3.67 GiB (more memory)" in html


def test_detected_counts_only_runs_that_show_the_hazard() -> None:
    """A control cell's `detected k/n` is race evidence only
    (racegate/harness/judge/race_evidence.py): a timeout and a crash with no fault dump failed, but
    caught nothing. Before, it counted every failed run: 4/5 here."""
    from racegate.harness.report.build import outcome_text
    from racegate.harness.report.matrix import column_of, make_cell, row_of
    from tests.test_control_evidence import NOT_THE_RACE, RACE
    from tests.test_verdict import record

    runs = [
        RACE["nested-FX error"](),
        RACE["stall in the compiler"](),
        NOT_THE_RACE["timeout"](),
        NOT_THE_RACE["crash without stacks"](),
        record("per_device"),
    ]
    cell = make_cell(row_of(runs[0]), column_of(runs[0]), runs, None)
    text = outcome_text(cell)
    assert "detected 2/5 [12%-77%]" in text, text
    assert not any(t.startswith("detected 4/") for t in text), text


def test_an_undecided_groups_gate_badge_is_amber_not_red(tmp_path: Path, floors: Path) -> None:
    """UNDECIDED shows no failure: its badge is the MASKED/INCONCLUSIVE amber, never UNSAFE's
    red (it was `fail`, red, wherever the group's gate did not pass)."""
    records = write(tmp_path / "r.jsonl", [make_record() for _ in range(3)])  # no control ran
    write_reports(
        [records], tmp_path / "out", baselines_dir=floors, title="t", production_strategy=PROD
    )
    html = (tmp_path / "out" / "matrix.html").read_text()
    assert '<span class="b masked">UNDECIDED</span>' in html, html
    assert '<span class="b fail">UNDECIDED</span>' not in html
