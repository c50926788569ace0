"""The report: matrix cells from records, DESIGN §5's gate per row, and the files written."""

from __future__ import annotations

import dataclasses
import json
import struct
from pathlib import Path

import pytest

from harness import cli
from harness.judge import baselines
from harness.judge.baselines import REFRESH_COMMAND
from harness.record import RunRecord
from harness.report import build as report
from harness.report.matrix import build_matrix, column_of
from tests.test_baselines import make_record, write

PROD = "warmup"


@pytest.fixture
def floors(tmp_path: Path) -> Path:
    """A baseline for h200x2 with the warmup floor at 40,000 tok/s (tolerance 10%)."""
    out = tmp_path / "baselines"
    runs = [make_record(tps=t) for t in (39_000.0, 40_000.0, 41_000.0)]
    baselines.update_from_records([write(tmp_path / "floor.jsonl", runs)], out, tolerance=0.10)
    return out


def clean_row(**versions: str) -> list[RunRecord]:
    """The production strategy clean in every cache state, plus a racing per_device."""
    runs = [make_record(cache_state=c, **versions) for c in ("cold", "warm", "deleted")]
    runs += [make_record(strategy="per_device", nested=1, tps=None, **versions) for _ in range(2)]
    return runs


def test_cell_counts_nested_fx_runs_and_threads(floors: Path) -> None:
    runs = [make_record(strategy="per_device", tpd=2, nested=n, tps=None) for n in (2, 3, 0)]
    m = build_matrix(runs, floors, PROD)
    cell = m.cells[m.rows[0], column_of(runs[0])]
    assert (cell.n, cell.nested_runs, cell.nested_threads, cell.threads) == (3, 2, 5, 12)
    assert not cell.passed
    assert report.outcome_text(cell)[0] == "❌ FX 2/3 runs · 5/12 thr"
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
    passed, reasons = report.gate([make_record(tps=1.0)], tmp_path / "none", PROD)
    assert passed
    assert any("gate skipped, no baseline for hardware 'h200x2'" in r for r in reasons)


def test_gate_fails_when_memory_grows(floors: Path) -> None:
    passed, reasons = report.gate([make_record(mem_growth=0.04)], floors, PROD)
    assert not passed and any("not flat" in r and "MiB" in r for r in reasons)


def test_gate_fails_without_production_runs(floors: Path) -> None:
    passed, reasons = report.gate([make_record(strategy="per_device")], floors, PROD)
    assert not passed and any("no runs of the production strategy 'warmup'" in r for r in reasons)
    assert report.gate([], floors, PROD)[0] is False


def test_gate_is_per_row(floors: Path) -> None:
    good = clean_row(transformers="5.8.1")
    bad = [*clean_row(transformers="5.6.0"), make_record(transformers="5.6.0", nested=1)]
    m = build_matrix(good + bad, floors, PROD)
    assert [r[1] for r in m.rows] == ["5.6.0", "5.8.1"]
    assert m.gates["2.11.0+cu130", "5.8.1"].passed
    assert not m.gates["2.11.0+cu130", "5.6.0"].passed
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
    paths = report.write_reports(
        [tmp_path / "results"], out, baselines_dir=floors, title="nightly", production_strategy=PROD
    )
    assert [p.name for p in paths] == list(report.FILES)
    assert all(p.is_file() and p.stat().st_size > 0 for p in paths)

    md = (out / "matrix.md").read_text()
    assert md.startswith("# nightly") and "**Gate: ❌ failed**" in md
    assert "| 2.11.0+cu130 | 5.8.1 | ✅ pass |" in md
    assert "| 2.11.0+cu130 | 5.6.0 | ❌ fail |" in md
    assert "## small · warmup (production)" in md and "### Legend" in md
    assert "❌ FX 2/2 runs · 2/4 thr" in md  # per_device, two runs, one thread each
    assert "40.0K tok/s at floor 40.0K (+0.0%)" in md
    assert len(md.encode()) < report.MAX_MARKDOWN_BYTES

    html = (out / "matrix.html").read_text()
    assert html.startswith("<!DOCTYPE html>") and "<style>" in html
    for external in ("<script", "<link", "src=", "http://", "https://", "url("):
        assert external not in html
    assert 'class="fail"' in html and 'class="pass"' in html

    width, height = _png_size(out / "throughput.png")
    assert width > 400 and height > 100

    gate = json.loads((out / "gate.json").read_text())
    assert gate["passed"] is False and gate["production_strategy"] == PROD
    by_row = {r["transformers"]: r for r in gate["rows"]}
    assert by_row["5.8.1"]["passed"] and not by_row["5.6.0"]["passed"]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["gate"] == gate
    cells = [c for c in summary["cells"] if c["transformers"] == "5.6.0" and c["status"] == "fail"]
    assert any(c["nested_fx"] == {"runs": 1, "threads": 1} for c in cells)


def test_markdown_drops_details_when_too_big(
    tmp_path: Path, floors: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(report, "MAX_MARKDOWN_BYTES", 1500)
    records = write(tmp_path / "r.jsonl", clean_row())
    paths = report.write_reports(
        [records], tmp_path / "out", baselines_dir=floors, title="t", production_strategy=PROD
    )
    md = paths[0].read_text()
    assert "see matrix.html" in md and "## small" not in md and "| 5.8.1 | ✅ pass |" in md


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
    """`--jobs`/xdist runs slow each other down: their tokens/s must never fail (or pass) a gate."""
    slow = make_record(tps=30_000.0)  # 25% below the 40,000 floor
    assert not report.gate([slow], floors, PROD)[0]
    overlapped = dataclasses.replace(slow, timing_valid=False)
    passed, reasons = report.gate([overlapped], floors, PROD)
    assert passed, reasons
    m = build_matrix([overlapped], floors, PROD)
    assert m.cells[m.rows[0], column_of(overlapped)].tokens_per_s is None
    notes = m.gates[m.rows[0]].notes
    assert any("1 of 1 cells not gated: their runs overlapped" in n for n in notes)
    # Records written before timing_valid existed: the report is told instead.
    report.write_reports(
        [], tmp_path / "out", baselines_dir=floors, title="t",
        overlapped_paths=[write(tmp_path / "old.jsonl", [slow])], production_strategy=PROD,
    )  # fmt: skip
    assert json.loads((tmp_path / "out" / "gate.json").read_text())["passed"]


def test_overlapped_paths_void_only_their_own_records(
    floors: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Old overlapped records (no timing_valid) beside runs timed alone: `--overlapped` voids the
    first and still shows and gates the second."""
    monkeypatch.setenv("RACEGATE_PRODUCTION_STRATEGY", PROD)
    recs = tmp_path / "records"
    recs.mkdir()
    old = write(recs / "old.jsonl", [make_record(tps=30_000.0)])  # below the 40,000 floor
    alone = write(recs / "alone.jsonl", clean_row())
    out = tmp_path / "out"
    common = ["--out-dir", str(out), "--baselines", str(floors)]
    assert cli.main(["report", str(alone), str(old), *common]) == 1  # old's tokens/s gated
    assert cli.main(["report", str(alone), "--overlapped", str(old), *common]) == 0
    cells = json.loads((out / "summary.json").read_text())["cells"]
    assert any(c.get("tokens_per_s") for c in cells)  # the alone runs' rate is still shown
    assert cli.main(["report", "--out-dir", str(out)]) == 2  # nothing to report: usage error
    # The overlapped file also under a folder given positionally: read once, as overlapped.
    assert cli.main(["report", str(recs), "--overlapped", str(old), *common]) == 0
    runs = sum(c["runs"] for c in json.loads((out / "summary.json").read_text())["cells"])
    assert runs == len(clean_row()) + 1
    assert cli.main(["report", str(alone), str(old), "--outcomes-only", *common]) == 0


def test_the_incident_topology_has_a_column_of_its_own(floors: Path) -> None:
    plain = make_record()
    incident = dataclasses.replace(plain, scenario={**plain.scenario, "target_devices": ["cuda:0"]})
    m = build_matrix([plain, incident], floors, PROD)
    labels = sorted(c.topology for c in m.columns)
    assert labels == ["h200x2 2×1", "h200x2 2×1 +target on 1"]


def test_a_run_that_never_reported_joins_its_rows_machine(floors: Path) -> None:
    hung = dataclasses.replace(
        make_record(strategy="per_device", other="hang", tps=None),
        hardware={"device_name": "unknown (child did not report)"},
    )
    cpu_run = make_record(devices="cpu", hardware={"device_name": "cpu"}, tps=None)
    cpu_run = dataclasses.replace(cpu_run, scenario={**cpu_run.scenario, "strategy": "eager"})
    runs = [*clean_row(), *[cpu_run] * 9, hung]  # the row's most common machine is the CPU
    m = build_matrix(runs, floors, PROD)
    per_device = [c for c in m.columns if c.strategy == "per_device" and c.devices == 2]
    assert {c.hardware for c in per_device} == {"h200x2"}  # a GPU run never lands under cpu
    assert not any(c.hardware.startswith("unknown") for c in m.columns)
