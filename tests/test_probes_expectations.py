"""racegate/harness/expectations/probes.toml: the loader's validation, range matching, and the
committed data."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path

import pytest

from racegate.harness.judge import probe_expectations as pe
from racegate.harness.probes.runner import PROBES, ProbeResult, Verdict
from racegate.harness.run.checked import GateInputError

ROOT = Path(__file__).resolve().parent.parent
PROBE = "compiled_call_during_make_fx"


def entry(torch: str = ">=2.10,<2.14", verdict: str = "hazard", **extra: str) -> dict:
    return {
        "name": PROBE,
        "torch": torch,
        "verdict": verdict,
        "reason": "r",
        "source": "s",
        **extra,
    }


def parse(*entries: dict) -> list[pe.Expectation]:
    return pe.parse({"probe": list(entries)})


def result(version: str, verdict: Verdict = Verdict.HAZARD, device: str = "cpu") -> ProbeResult:
    return ProbeResult(
        PROBE, verdict, "B's compiled call raised RuntimeError", 0.1, version, device
    )


@pytest.mark.parametrize(
    ("first", "second"),
    [
        (">=2.10,<2.14", ">=2.13,<2.16"),  # partial overlap
        (">=2.10,<2.16", ">=2.12,<2.13"),  # nested
        ("<2.14", ">=2.0,<2.11"),  # open lower bound
        (">=2.14", ">=2.20"),  # open upper bounds
    ],
)
def test_overlapping_ranges_are_rejected(first: str, second: str) -> None:
    with pytest.raises(ValueError, match=r"entry 2 overlaps entry 1"):
        parse(entry(first), entry(second, "safe"))


def test_adjacent_ranges_and_other_devices_are_accepted() -> None:
    table = parse(
        entry(">=2.10,<2.14"),
        entry(">=2.14,<2.16", "safe"),
        entry(">=2.16", "n/a", device="cpu"),
        entry(">=2.16", "hazard", device="cuda"),
    )
    assert [e.verdict for e in table] == ["hazard", "safe", "n/a", "hazard"]


def test_device_any_overlaps_a_specific_device() -> None:
    with pytest.raises(ValueError, match="overlaps"):
        parse(entry(">=2.10,<2.14", device="cuda"), entry(">=2.12,<2.13", "safe"))


@pytest.mark.parametrize("verdict", ["hang", "error", "Hazard", "unsafe", ""])
def test_unknown_verdicts_are_rejected(verdict: str) -> None:
    with pytest.raises(ValueError, match=r"entry 1: verdict is .*; choose from: hazard, safe, n/a"):
        parse(entry(verdict=verdict))


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ({**entry(), "name": "no_such_probe"}, "unknown probe 'no_such_probe'"),
        ({**entry(), "devcie": "cpu"}, "unknown key 'devcie'"),
        ({k: v for k, v in entry().items() if k != "source"}, "missing source"),
        (entry(device="tpu"), "device is 'tpu'; choose from: cpu, cuda, any"),
        ({**entry(), "reason": "  "}, "reason is '  '; expected a non-empty string"),
        (entry(torch="==2.13"), "unsupported clause '==2.13'"),
        (entry(torch=">=2.10,<=2.13"), "unsupported clause '<=2.13'"),
        (entry(torch="~=2.13"), "unsupported clause"),
        (entry(torch=">=2.14,<2.12"), "empty torch range"),
        (entry(torch=""), "empty torch range"),
        (entry(torch="2.13"), "bad torch range"),
        ({**entry(), "torch": 2.13}, "torch is 2.13; expected a string range"),
        ({**entry(), "verdict": ["safe"]}, "verdict is ['safe']; choose from"),
    ],
)
def test_bad_entries_name_the_entry_and_the_problem(raw: dict, message: str) -> None:
    with pytest.raises(ValueError, match=r"probes\.toml entry 1") as info:
        parse(raw)
    assert message in str(info.value)


@pytest.mark.parametrize(
    ("version", "verdict"),
    [
        ("2.10.0", "hazard"),
        ("2.13.0+cpu", "hazard"),
        ("2.13.1+cu130", "hazard"),
        ("2.14.0", "safe"),  # the upper bound is exclusive
        ("2.14.0.dev20260101+cu130", "safe"),  # a nightly counts as its release
        ("2.15.0", "safe"),
    ],
)
def test_lookup_matches_the_release_ignoring_local_and_dev_tags(version: str, verdict: str) -> None:
    table = parse(entry(">=2.10,<2.14"), entry(">=2.14,<2.16", "safe"))
    found = pe.lookup(table, PROBE, version, "cpu")
    assert found is not None and found.verdict == verdict


def test_lookup_outside_every_range_finds_nothing() -> None:
    table = parse(entry(">=2.10,<2.14"))
    assert pe.lookup(table, PROBE, "2.9.1", "cpu") is None
    assert pe.lookup(table, PROBE, "2.14.1", "cpu") is None
    assert pe.lookup(table, "is_compiling_leak", "2.13.0", "cpu") is None


def test_lookup_respects_the_device() -> None:
    table = parse(entry(device="cuda"), entry(verdict="n/a", device="cpu"))
    assert pe.lookup(table, PROBE, "2.11.0+cu130", "cuda").verdict == "hazard"
    assert pe.lookup(table, PROBE, "2.11.0+cu130", "cpu").verdict == "n/a"


def test_compare_mismatch_says_which_way_and_how_to_update() -> None:
    table = parse(entry())
    status, message = pe.compare(result("2.13.0+cpu", Verdict.SAFE), table)
    assert status is pe.Status.MISMATCH
    for part in (PROBE, "expected hazard, saw safe", "2.13.0+cpu", "entry 1",
                 "racegate/harness/expectations/probes.toml", 'verdict = "safe"',
                 "source"):  # fmt: skip
        assert part in message


def test_compare_match_no_entry_and_broken() -> None:
    table = parse(entry())
    assert pe.compare(result("2.12.1"), table)[0] is pe.Status.MATCH
    status, message = pe.compare(result("2.17.0"), table)
    assert status is pe.Status.MISSING  # fails, never skips (racegate/cases/test_race_probes.py)
    assert message.startswith(
        "add a row for torch 2.17.0 (racegate/harness/expectations/probes.toml)"
    )
    for verdict in (Verdict.HANG, Verdict.ERROR):  # never pass, even where the table is silent
        assert pe.compare(result("2.17.0", verdict), table)[0] is pe.Status.BROKEN
        assert pe.compare(result("2.12.1", verdict), table)[0] is pe.Status.BROKEN


def test_committed_table_is_valid_and_covers_every_probe_on_measured_releases() -> None:
    table = pe.load()
    for version in ("2.10.0", "2.11.0", "2.12.1", "2.13.0", "2.14.1", "2.15.0"):
        for device in ("cpu", "cuda"):
            missing = [n for n in PROBES if pe.lookup(table, n, version, device) is None]
            assert not missing, f"no entry for {missing} on torch {version} ({device})"


def test_committed_table_entries_cite_sources() -> None:
    raw = tomllib.loads(
        (ROOT / "racegate" / "harness" / "expectations" / "probes.toml").read_text()
    )
    for item in raw["probe"]:
        assert len(item["reason"]) > 20 and len(item["source"]) > 10, item["name"]


# Probes added after a committed file was recorded, on a machine not at hand since: named here
# per file, so any other gap still fails. Every committed file has every probe now.
NOT_RUN_IN: dict[str, frozenset[str]] = {}


@pytest.mark.parametrize(
    "path", sorted((ROOT / "results").glob("probes-*.json")), ids=lambda p: p.name
)
def test_committed_results_agree_with_the_table(path: Path) -> None:
    doc = json.loads(path.read_text())
    assert doc["schema_version"] == 1
    table = pe.load()
    not_run = NOT_RUN_IN.get(path.name, frozenset())
    assert {r["name"] for r in doc["results"]} == set(PROBES) - not_run
    for raw in doc["results"]:
        status, message = pe.compare(ProbeResult.from_dict(raw), table)
        assert status is pe.Status.MATCH, message


def test_a_release_without_entries_fails_every_probe_naming_the_row_to_add() -> None:
    # a torch release the table has no entry for used to skip every probe
    table = pe.load()
    for name in PROBES:
        res = ProbeResult(name, Verdict.SAFE, "d", 0.1, "2.99.0+cu130", "cuda")
        status, message = pe.compare(res, table)
        assert status is pe.Status.MISSING
        assert message.startswith(
            "add a row for torch 2.99.0 (racegate/harness/expectations/probes.toml)"
        )
        assert name in message


def test_an_unknown_top_level_key_or_unreadable_table_is_an_input_error(tmp_path: Path) -> None:
    with pytest.raises(GateInputError, match="unknown key 'probes'; allowed: probe"):
        pe.parse({"probes": []})
    with pytest.raises(GateInputError, match="cannot read the probe table"):
        pe.load(tmp_path)
