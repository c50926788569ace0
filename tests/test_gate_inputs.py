"""Bad gate inputs fail closed: baselines and records with odd values are one-line errors.

NaN/inf tokens/s or floors passed anything, `baseline --update` wrote a floor
"fast", a tolerance of 5.0 was accepted, a floor of 0 raised ZeroDivisionError and a baselines
file that was a folder counted as "no baseline" (the gate skipped).
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

from racegate.harness.doors import cli
from racegate.harness.judge import baselines
from racegate.harness.judge.baselines import FloorCall
from racegate.harness.judge.inputs import read_records
from racegate.harness.run.checked import GateInputError
from tests.test_baselines import make_record, write

KEY = "small/warmup/2x1/6steps"


def floor(**fields: Any) -> dict[str, Any]:
    return {"tokens_per_s": 100.0, "tolerance": 0.1, **fields}


def baseline_file(folder: Path, floors: Any, **top: Any) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "h200x2.json"
    doc = {"schema_version": baselines.SCHEMA_VERSION, "hardware": "h200x2", "floors": floors}
    path.write_text(json.dumps({**doc, **top}))
    return path


def one_line_error(folder: Path) -> str:
    with pytest.raises(GateInputError) as info:
        baselines.load(folder, "h200x2")
    message = str(info.value)
    assert "\n" not in message and "h200x2.json" in message
    return message


@pytest.mark.parametrize(
    ("floors", "needle"),
    [
        ({KEY: floor(tokens_per_s="fast")}, "tokens_per_s is 'fast'; expected a finite number > 0"),
        ({KEY: floor(tokens_per_s=0)}, "tokens_per_s is 0; expected a finite number > 0"),
        ({KEY: floor(tokens_per_s=-5.0)}, "tokens_per_s is -5.0; expected a finite number > 0"),
        ({KEY: floor(tokens_per_s=True)}, "tokens_per_s is True; expected a finite number > 0"),
        ({KEY: floor(tokens_per_s=1e400)}, "tokens_per_s is inf; expected a finite number > 0"),
        ({KEY: floor(tolerance=5.0)}, "tolerance is 5.0; expected a fraction in (0, 0.5]"),
        ({KEY: floor(tolerance=0)}, "tolerance is 0; expected a fraction in (0, 0.5]"),
        ({KEY: floor(tolerance="10%")}, "tolerance is '10%'; expected a fraction in (0, 0.5]"),
        ({KEY: floor(spread="wide")}, "spread is 'wide'; expected null or a finite number"),
        ({KEY: floor(n_runs=2.5)}, "n_runs is 2.5; expected an integer"),
        ({KEY: floor(tolernce=0.1)}, "unknown key 'tolernce'; allowed:"),
        ({KEY: {"tolerance": 0.1}}, "missing tokens_per_s"),
        ({KEY: "fast"}, "floors['small/warmup/2x1/6steps'] is 'fast'; expected a table"),
        ({KEY: 100.0}, "is 100.0; expected a table"),
        ([floor()], "floors is [{"),
    ],
)
def test_bad_floors_are_one_line_errors_naming_file_and_field(
    tmp_path: Path, floors: Any, needle: str
) -> None:
    baseline_file(tmp_path, floors)
    assert needle in one_line_error(tmp_path)


def test_nan_and_infinity_in_a_baseline_file_are_refused(tmp_path: Path) -> None:
    path = baseline_file(tmp_path, {KEY: floor()})
    for token in ("NaN", "Infinity", "-Infinity"):
        path.write_text(
            path.read_text().replace('"tokens_per_s": 100.0', f'"tokens_per_s": {token}')
        )
        shown = {"NaN": "nan", "Infinity": "inf", "-Infinity": "-inf"}[token]
        assert f"tokens_per_s is {shown}; expected a finite number > 0" in one_line_error(tmp_path)
        path.write_text(
            path.read_text().replace(f'"tokens_per_s": {token}', '"tokens_per_s": 100.0')
        )


def test_a_baselines_path_that_is_not_a_readable_file_is_an_error_not_no_baseline(
    tmp_path: Path,
) -> None:
    (tmp_path / "h200x2.json").mkdir()  # a folder where the file should be
    assert "cannot read this baseline" in one_line_error(tmp_path)
    (tmp_path / "h200x2.json").rmdir()
    (tmp_path / "h200x2.json").symlink_to(tmp_path / "gone.json")  # unreadable: dangling
    assert "cannot read this baseline" in one_line_error(tmp_path)
    (tmp_path / "h200x2.json").unlink()
    (tmp_path / "h200x2.json").write_bytes(b"\xff\xfe{")
    assert "cannot read this baseline" in one_line_error(tmp_path)
    folder_file = tmp_path / "not-a-folder"
    folder_file.write_text("")
    with pytest.raises(GateInputError, match="is not a folder"):
        baselines.load(folder_file, "h200x2")
    assert baselines.load(tmp_path / "absent", "h200x2") is None  # nothing there: no baseline


@pytest.mark.parametrize("tps", [math.nan, math.inf, -math.inf, 0.0, -1.0])
def test_a_rate_that_is_not_a_finite_positive_number_never_passes(
    tmp_path: Path, tps: float
) -> None:
    baseline_file(tmp_path, {KEY: floor()})
    base = baselines.load(tmp_path, "h200x2")
    result = baselines.check_tokens(KEY, "h200x2", tps, base)
    assert result.verdict is FloorCall.NO_THROUGHPUT and result.failed
    assert "not a finite number > 0" in result.message


def test_a_hand_built_zero_floor_is_an_input_error_not_zero_division() -> None:
    base = baselines.Baseline("h200x2", "NVIDIA H200", "", {}, {KEY: baselines.Floor(0.0)})
    with pytest.raises(GateInputError, match="expected a number > 0"):
        baselines.check_tokens(KEY, "h200x2", 100.0, base)


def _raw_records(path: Path, **changes: Any) -> Path:
    record = make_record(tps=100.0).to_json()
    path.write_text(json.dumps({**record, **changes}) + "\n")
    return path


@pytest.mark.parametrize(
    ("changes", "needle"),
    [
        ({"outcome": "fine"}, "r.jsonl:1: outcome is 'fine'; choose from: ok, nested_fx_error"),
        ({"outcome_counts": {"okay": 2}}, "outcome_counts key 'okay' is 'okay'; choose from: ok"),
        (
            {"tokens_per_s": "fast"},
            "r.jsonl:1: tokens_per_s is 'fast'; expected a finite number > 0",
        ),
        (
            {"tokens_per_s": math.nan},
            "r.jsonl:1: tokens_per_s is nan; expected a finite number > 0",
        ),
        (
            {"tokens_per_s": math.inf},
            "r.jsonl:1: tokens_per_s is inf; expected a finite number > 0",
        ),
        ({"timing_valid": "yes"}, "r.jsonl:1: timing_valid is 'yes'; expected true or false"),
    ],
)
def test_bad_records_are_refused_by_report_and_baseline(
    tmp_path: Path, changes: dict[str, Any], needle: str, capsys: pytest.CaptureFixture
) -> None:
    records = _raw_records(tmp_path / "r.jsonl", **changes)
    with pytest.raises(GateInputError) as info:
        read_records([records])
    assert needle in str(info.value) and "r.jsonl" in str(info.value)
    out = tmp_path / "b"
    assert cli.main(["baseline", "--update", str(records), "--baselines", str(out)]) == 2
    err = capsys.readouterr().err
    assert needle in err and len(err.strip().splitlines()) == 1
    assert not out.exists()  # nothing written: never a floor "fast"


def test_a_bad_thread_outcome_is_refused(tmp_path: Path) -> None:
    record = make_record(tps=100.0).to_json()
    record["threads"][1]["outcome"] = "meh"
    (tmp_path / "r.jsonl").write_text(json.dumps(record) + "\n")
    with pytest.raises(GateInputError, match=r"threads\[1\]\.outcome is 'meh'; choose from: ok"):
        read_records([tmp_path / "r.jsonl"])


@pytest.mark.parametrize("tolerance", ["5.0", "0", "-0.1", "nan", "0.51"])
def test_baseline_update_refuses_a_tolerance_outside_0_to_half(
    tmp_path: Path, tolerance: str, capsys: pytest.CaptureFixture
) -> None:
    records = write(tmp_path / "r.jsonl", [make_record(tps=100.0)])
    argv = ["baseline", "--update", str(records), "--baselines", str(tmp_path / "b")]
    assert cli.main([*argv, "--tolerance", tolerance]) == 2
    assert "--tolerance is" in capsys.readouterr().err
    assert not (tmp_path / "b").exists()


def test_update_writes_only_floors_that_load_again(tmp_path: Path) -> None:
    records = write(tmp_path / "r.jsonl", [make_record(tps=t) for t in (90.0, 100.0)])
    (path,) = baselines.update_from_records([records], tmp_path / "b", tolerance=0.5)
    base = baselines.load(tmp_path / "b", "h200x2")
    assert base is not None and base.floors[KEY].tokens_per_s == 95.0
    assert json.loads(path.read_text())["floors"][KEY]["tolerance"] == 0.5
