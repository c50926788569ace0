"""racegate.harness.probes.runner without torch: registry, JSON, table, and the isolated runner's
recovery from a hang, a crash and a killed child (driven by a fake interpreter)."""

from __future__ import annotations

import json
import os
import stat
import sys
from pathlib import Path

import pytest

from racegate.harness.probes import runner as probes
from racegate.harness.probes.runner import ProbeResult, ProbeRun, Verdict
from racegate.harness.run import code_root

REQUIRED = (
    "compiled_call_during_make_fx",
    "compiled_call_during_compile",
    "is_compiling_leak",
    "module_call_patch_leak",
    "flag_stuck_after_overlap",
    "config_override_thread_scope",
    "fail_on_recompile_stance_thread_scope",
)

# A stand-in for `python -m racegate.harness.probes.runner ...`: follows a plan {probe: action} from
# $FAKE_PLAN.
FAKE = """#!{python}
import json, os, sys, time
args = sys.argv[1:]
only = args[args.index("--only") + 1:]
out = args[args.index("--json-out") + 1]
plan = json.load(open(os.environ["FAKE_PLAN"]))
with open(os.environ["FAKE_CALLS"], "a") as fh:
    fh.write(" ".join(only) + "\\n")
results = []
for name in only:
    print("racegate-probe: start " + name, file=sys.stderr, flush=True)
    action = plan.get(name, "safe")
    if action == "crash":
        sys.exit(3)
    if action == "kill":
        time.sleep(60)
    results.append(dict(name=name, verdict=action, detail="fake", seconds=0.0,
                        torch_version="2.13.0+cpu", device="cpu"))
    if action == "hang":
        break
doc = dict(schema_version=1, environment=dict(torch="2.13.0+cpu", device="cpu"), wall_s=0.1,
           results=results)
open(out, "w").write(json.dumps(doc))
"""


def test_registry_holds_the_required_probes_with_descriptions() -> None:
    assert set(REQUIRED) <= set(probes.PROBES)
    for name, probe in probes.PROBES.items():
        assert probe.name == name and probe.holds and probe.does and probe.hazard


def test_select_rejects_unknown_names_listing_the_choices() -> None:
    assert [p.name for p in probes.select(None)] == list(probes.PROBES)
    with pytest.raises(ValueError, match=r"unknown probe 'nope'; choose from: compiled_call"):
        probes.select(["is_compiling_leak", "nope"])


def test_result_round_trips_through_json() -> None:
    r = ProbeResult("is_compiling_leak", Verdict.NA, "absent", 0.25, "2.13.0+cpu", "cpu")
    doc = json.loads(json.dumps(probes.results_to_json(ProbeRun([r], {"torch": "2.13.0+cpu"}))))
    assert doc["schema_version"] == probes.SCHEMA_VERSION
    assert doc["environment"] == {"torch": "2.13.0+cpu"}
    assert doc["results"][0]["verdict"] == "n/a"
    assert ProbeResult.from_dict(doc["results"][0]) == r


def test_format_table_shows_each_probe_verdict_and_detail() -> None:
    run = ProbeRun(
        [
            ProbeResult("is_compiling_leak", Verdict.HAZARD, "B read True", 0.04, "2.13.0", "cpu"),
            ProbeResult("module_call_patch_leak", Verdict.SAFE, "plain", 0.01, "2.13.0", "cpu"),
        ],
        {"torch": "2.13.0", "python": "3.11.7", "device": "cpu", "device_name": "cpu"},
        wall_s=3.2,
    )
    text = probes.format_table(run)
    assert text.splitlines()[0].startswith("torch 2.13.0 · python 3.11.7")
    assert "2 probes in 3.2 s wall" in text
    assert "is_compiling_leak       hazard" in text and "B read True" in text


@pytest.fixture
def fake_python(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    exe = tmp_path / "python"
    exe.write_text(FAKE.format(python=sys.executable))
    exe.chmod(exe.stat().st_mode | stat.S_IEXEC)
    calls = tmp_path / "calls.txt"
    monkeypatch.setenv("FAKE_CALLS", str(calls))
    monkeypatch.setattr(probes, "_IMPORT_ALLOWANCE_S", 3.0)
    monkeypatch.setattr(probes, "_PER_PROBE_SLACK_S", 0.0)

    def run(plan: dict[str, str], names: list[str]) -> tuple[ProbeRun, list[str]]:
        (tmp_path / "plan.json").write_text(json.dumps(plan))
        monkeypatch.setenv("FAKE_PLAN", str(tmp_path / "plan.json"))
        result = probes.run_probes_isolated(names, timeout_s=0.5, python=str(exe))
        return result, calls.read_text().splitlines() if calls.exists() else []

    return run


@pytest.mark.process
def test_isolated_run_parses_the_child_json(fake_python) -> None:
    run, calls = fake_python({"is_compiling_leak": "hazard"}, list(REQUIRED[:3]))
    assert [(r.name, r.verdict) for r in run] == [
        (REQUIRED[0], "safe"), (REQUIRED[1], "safe"), (REQUIRED[2], "hazard")
    ]  # fmt: skip
    assert run.environment["torch"] == "2.13.0+cpu" and len(calls) == 1


@pytest.mark.process
def test_isolated_run_continues_after_a_hang_in_a_fresh_child(fake_python) -> None:
    names = list(REQUIRED[:4])
    run, calls = fake_python({names[1]: "hang"}, names)
    assert [r.verdict for r in run] == ["safe", "hang", "safe", "safe"]
    assert calls == [" ".join(names), " ".join(names[2:])]


@pytest.mark.process
def test_isolated_run_blames_the_running_probe_when_the_child_crashes(fake_python) -> None:
    names = list(REQUIRED[:3])
    run, calls = fake_python({names[1]: "crash"}, names)
    assert [r.name for r in run] == names  # registry order, whatever order the children ran
    assert [r.verdict for r in run] == ["safe", "error", "safe"]
    assert "exited 3" in run[1].detail
    assert calls == [" ".join(names), f"{names[0]} {names[2]}"]


@pytest.mark.process
def test_isolated_run_kills_a_stuck_child_and_reports_a_hang(fake_python) -> None:
    names = list(REQUIRED[:2])
    run, _ = fake_python({names[0]: "kill"}, names)
    by_name = {r.name: r for r in run}
    assert by_name[names[0]].verdict == "hang" and "killed after" in by_name[names[0]].detail
    assert by_name[names[1]].verdict == "safe"


@pytest.mark.process
def test_cli_lists_probes_without_importing_torch() -> None:
    import subprocess

    code = "import sys; from racegate.harness.probes import runner as probes; "
    code += "assert probes.main(['--list']) == 0; "
    code += "print('torch imported' if 'torch' in sys.modules else 'torch not imported')"
    env = {**os.environ, "PYTHONPATH": code_root.pythonpath()}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert out.returncode == 0, out.stderr
    assert "compiled_call_during_make_fx" in out.stdout
    assert out.stdout.strip().endswith("torch not imported")
