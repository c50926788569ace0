"""A workload names its roles: its production strategy, its positive control and its own
strategies' specs; [tool.racegate] and the command line override them; a role it lacks is a
usage error at start naming the strategies it has; the verdict names only its strategies."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from racegate.harness.doors import options
from racegate.harness.doors.cli import main
from racegate.harness.judge.gate import decide_gate
from racegate.harness.judge.verdict import Calibration, decide, render
from racegate.harness.run.record import read_jsonl
from racegate.harness.scenario import env_names
from racegate.harness.scenario.spec import Scenario, make_scenario
from racegate.harness.scenario.vocab import STRATEGIES, Strategy, StrategySpec
from racegate.harness.scenario.workload_api import (
    BUILTIN_ROLES,
    WorkloadError,
    WorkloadRoles,
    WorkloadSpec,
    check_workload,
    load_workload,
    roles_of,
)

pytest_plugins = ["pytester"]
ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = "examples.qwen3_flex_workload:make_workload"
MINE = replace(STRATEGIES[Strategy.WARMUP_LOCKED], judged_by=None, has_floor=False)


class Light:
    """Fits the interface without torch; its roles are its own unless `roles` is None."""

    name = "light"

    def __init__(self, roles: WorkloadRoles | None, strategies: tuple[str, ...]) -> None:
        self._strategies = strategies
        if roles is not None:
            self.roles = lambda: roles

    def strategies(self) -> tuple[str, ...]:
        return self._strategies

    def shapes(self) -> list[int]:
        return [0, 1]

    def make_replica(self, device: object, strategy: str, *, seed: int) -> None:
        raise NotImplementedError

    def flops_per_step(self, shape: int) -> None:
        return None


OWN = WorkloadRoles(production="upfront", control="singleton", strategies={"upfront": MINE})


def light(roles: WorkloadRoles | None = OWN, strategies=("singleton", "upfront")) -> Light:
    return Light(roles, strategies)


@pytest.fixture
def no_settings(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """No env and no [tool.racegate] role settings: a folder of its own as the project."""
    for name in env_names.SETTING.values():
        monkeypatch.delenv(name, raising=False)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "pyproject.toml").write_text("[tool.racegate]\n")
    return tmp_path


def resolved(flags: dict[str, str] | None = None, *, for_cli: bool = False) -> options.RunOptions:
    return options.resolve(flags or {}, gpus=0, for_cli=for_cli)


def test_a_workload_without_roles_gets_the_builtin_ones(no_settings: Path) -> None:
    assert roles_of(light(None), "w") is BUILTIN_ROLES
    opts = options.bind_roles(resolved(), light(None, ("per_device", "warmup")), for_cli=False)
    assert (opts.production, opts.control) == ("warmup_locked", "per_device")
    # Checked only where a strategy to run is named: the suite runs what the workload has.
    assert opts.strategies == ("per_device", "warmup", "processes")


def test_a_workload_names_its_roles_and_its_own_strategies(no_settings: Path) -> None:
    opts = options.bind_roles(resolved(), light(), for_cli=False)
    assert (opts.production, opts.control) == ("upfront", "singleton")
    assert opts.strategy_specs == {"upfront": MINE}
    # On CPU the suite's strategies are those that train there (singleton's spec says no).
    assert opts.strategies == ("upfront", "processes")
    cli = options.bind_roles(resolved(for_cli=True), light(), for_cli=True)
    assert cli.strategies == ("upfront",)  # harness run measures what ships


def test_settings_and_flags_override_the_workloads_roles(
    no_settings: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    both = light(strategies=("singleton", "upfront", "warmup"))
    (no_settings / "pyproject.toml").write_text(
        '[tool.racegate]\nproduction_strategy = "warmup"\ncontrol_strategy = "processes"\n'
    )
    opts = options.bind_roles(resolved(), both, for_cli=False)
    assert (opts.production, opts.control) == ("warmup", "processes")
    monkeypatch.setenv("RACEGATE_CONTROL_STRATEGY", "upfront")
    assert options.bind_roles(resolved(), both, for_cli=False).control == "upfront"
    flags = {"production_strategy": "singleton", "control_strategy": "warmup"}
    opts = options.bind_roles(resolved(flags), both, for_cli=False)
    assert (opts.production, opts.control) == ("singleton", "warmup")


@pytest.mark.parametrize(
    ("flags", "needle"),
    [
        ({"production_strategy": "warmup_locked"}, "production strategy 'warmup_locked' (from "
         "--production-strategy) is not a strategy of workload 'light'; it has: singleton, "
         "upfront, processes"),
        ({"control_strategy": "per_device"}, "control strategy 'per_device' (from "
         "--control-strategy) is not a strategy of workload 'light'; it has: singleton, upfront"),
        ({"control_strategy": "upfront"}, "the production strategy and the positive control are "
         "both 'upfront'"),
    ],
)  # fmt: skip
def test_a_role_the_workload_lacks_is_one_line_naming_what_it_has(
    no_settings: Path, flags: dict[str, str], needle: str
) -> None:
    with pytest.raises(ValueError) as info:
        options.bind_roles(resolved(flags), light(), for_cli=False)
    assert needle in str(info.value) and "\n" not in str(info.value)


def test_roles_naming_a_strategy_the_workload_lacks_is_an_error(no_settings: Path) -> None:
    wrong = light(
        WorkloadRoles(production="upfront", control="per_device", strategies=OWN.strategies)
    )
    with pytest.raises(ValueError, match=r"control strategy 'per_device' \(from workload 'light' "):
        options.bind_roles(resolved(), wrong, for_cli=False)


# ids of their own: the messages say "racegate", which `-k race` would select.
@pytest.mark.parametrize(
    ("workload", "needle"),
    [
        (light(strategies=("singleton", "mine")), "strategy 'mine' is not racegate's and has no"),
        (light(WorkloadRoles(strategies={"warmup": MINE})), "a racegate strategy whose spec is"),
        (light(WorkloadRoles(strategies={"x": "fast"})), "spec of 'x' is str; expected a"),  # type: ignore[dict-item]
    ],
    ids=["unknown name without a spec", "built-in name respecified", "spec not a spec"],
)  # fmt: skip
def test_bad_roles_are_workload_errors(workload: Light, needle: str) -> None:
    with pytest.raises(WorkloadError, match=needle):
        check_workload(workload, "w")


def test_a_scenario_carries_its_own_strategys_spec() -> None:
    sc = make_scenario(strategy="upfront", strategy_spec=MINE)
    assert sc.spec == MINE and sc.spec.warmed_up
    again = Scenario.from_json(json.loads(json.dumps(sc.to_json())))
    assert again == sc and again.spec is not None
    # A racegate strategy's spec is the registry's, and its record keeps its old form.
    builtin = make_scenario(strategy="processes")
    assert builtin.spec.one_process_per_worker and "strategy_spec" not in builtin.to_json()
    with pytest.raises(ValueError, match="unknown strategy 'upfront'; choose from: per_device"):
        make_scenario(strategy="upfront")


def test_the_verdict_names_the_workloads_own_control() -> None:
    verdict = decide(
        [], production="compiled_upfront", calibration=Calibration(control="singleton")
    )
    text = "\n".join(render(verdict, decide_gate(verdict)))
    assert "positive control singleton: no run of it here" in text
    assert "compiled_upfront (production)" in text
    assert "per_device" not in text and "warmup_locked" not in text


def test_the_example_names_its_roles() -> None:
    workload = load_workload(WorkloadSpec(EXAMPLE, {"preset": "tiny"}))
    roles = roles_of(workload, EXAMPLE)
    assert (roles.production, roles.control) == ("compiled_upfront", "singleton")
    spec = roles.strategies["compiled_upfront"]
    assert isinstance(spec, StrategySpec) and spec.warmed_up and spec.locked
    assert set(workload.strategies()) == {"singleton", "compiled_upfront", "processes"}


def test_the_cli_refuses_a_production_strategy_the_example_lacks(
    capsys: pytest.CaptureFixture,
) -> None:
    rc = main(["run", "--workload", EXAMPLE, "--production-strategy", "warmup"])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and len(err.splitlines()) == 1, err
    assert err.endswith(
        "production strategy 'warmup' (from --production-strategy) is not a strategy of workload "
        "'qwen3-flex-tiny'; it has: singleton, compiled_upfront, processes"
    )


@pytest.mark.process
def test_pytest_refuses_a_control_the_workload_lacks_at_start(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytester.makeconftest((ROOT / "conftest.py").read_text())
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    monkeypatch.setenv("RACEGATE_WORKLOAD", EXAMPLE)
    monkeypatch.setenv("RACEGATE_CONTROL_STRATEGY", "per_device")
    pytester.makepyfile("def test_never(): assert False")
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-m", "race")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        ["ERROR: racegate: control strategy 'per_device' (from env RACEGATE_CONTROL_STRATEGY) is "
         "not a strategy of workload 'qwen3-flex-tiny'; it has: singleton, compiled_upfront, "
         "processes"]
    )  # fmt: skip


@pytest.mark.process
def test_the_example_runs_through_the_harness_to_a_verdict_of_its_own(tmp_path: Path) -> None:
    """A tiny real CPU run of the example's control and production strategy (forward only:
    flex has no CPU backward): the verdict names only the example's strategies."""
    out = tmp_path / "runs.jsonl"
    proc = subprocess.run(
        [sys.executable, "-m", "racegate", "run", "--workload", EXAMPLE,
         "--strategies", "singleton,compiled_upfront", "--threads-per-device", "2",
         "--steps", "6", "--run-timeout", "420", "--results", str(out)],
        cwd=ROOT, capture_output=True, text=True, timeout=1000,
    )  # fmt: skip
    # The word depends on whether the race showed on this torch (masked on 2.13): SAFE, UNSAFE
    # or UNDECIDED, and the exit is the one the verdict block's last line says.
    assert proc.returncode in (0, 1, 7), proc.stderr[-2000:]
    records = read_jsonl(out)
    assert {r.scenario.strategy for r in records} == {"singleton", "compiled_upfront"}
    upfront = next(r for r in records if r.scenario.strategy == "compiled_upfront")
    assert upfront.scenario.spec.warmed_up is True
    # Clean: on a loaded 2-core host its short steps may not show enough overlap to count as
    # a race (not_concurrent, which proves nothing either way), but it never fails.
    assert upfront.outcome in ("ok", "not_concurrent"), upfront.detail
    verdict = proc.stdout[proc.stdout.index(" racegate verdict ") :]
    assert "compiled_upfront (production)" in verdict
    assert "positive control singleton" in verdict
    assert f"(exit {proc.returncode}; racegate explain " in " ".join(verdict.split()), verdict
    for other in ("per_device", "warmup_locked", "warmup ", "nested_fx_off"):
        assert other not in verdict, verdict
