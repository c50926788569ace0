"""One A/B comparison's result: sides, samples, calls, and whether its gate fails and why.

A calibration (ABResult.calibration: an A/A, or the candidate alone under the test slowdown)
passes when it came out as it must (no change; slower) and gates no upgrade; any other
comparison fails on a failed run, a test tool in it, or a metric that regressed.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from racegate.harness.ab.stats import SIDES, DeviceMemory, RunSample, compare_devices
from racegate.harness.judge.compare import Change, Comparison
from racegate.harness.scenario.vocab import TEST_SLOWDOWN_ENV, injected_slowdown

SCHEMA_VERSION = 1


@dataclass
class ABResult:
    """A whole comparison: sides, every run's sample, both metrics compared, or why not."""

    run_args: list[str]
    sides: dict[str, dict[str, Any]]  # name -> python, env, versions
    samples: list[RunSample] = field(default_factory=list)
    throughput: Comparison | None = None
    memory: Comparison | None = None
    memory_note: str | None = None  # why memory was not compared
    failure: str | None = None  # a run failed or gave no number: no call is made
    interrupted: bool = False  # Ctrl-C stopped it (failure says after how many runs)
    schema_version: int = SCHEMA_VERSION

    @property
    def calibration_kind(self) -> str | None:
        """AA, INJECTED, or None where the comparison gates a change (an upgrade, or a setting
        of the candidate's environment). Both kinds have one interpreter on both sides (two
        venvs may differ in packages no record names) and the same recorded versions: A/A (the
        same environment too, less a zero test slowdown) must call no change, INJECTED (the
        candidate alone under the test slowdown) must call slower. Anything else gates."""
        ref, cand = (self.sides.get(s) or {} for s in SIDES)
        versions = ref.get("versions") or {}
        if ref.get("python") != cand.get("python"):
            return None
        if not versions or versions != (cand.get("versions") or {}):
            return None
        tools = [injected_slowdown(side.get("env") or {}) for side in (ref, cand)]
        if tools == [None, None]:
            return AA if _settings(ref) == _settings(cand) else None
        return INJECTED if tools[0] is None else None

    @property
    def calibration(self) -> str | None:
        """The calibration as the report names it ("injected slowdown (RACEGATE_TEST_SLOWDOWN=
        0.05)", "A/A"), or None: calibration_kind with the candidate's setting."""
        kind = self.calibration_kind
        if kind != INJECTED:
            return kind
        return f"{kind} ({injected_slowdown(self.sides['candidate'].get('env') or {})})"

    @property
    def as_calibrated(self) -> bool:
        """A calibration came out as it must: every run made, and the A/A called no change of
        tokens/s or the injected slowdown was called slower."""
        kind = self.calibration_kind
        if kind is None or self.failure is not None or self.throughput is None:
            return False
        return self.throughput.change is (Change.NONE if kind == AA else Change.LOWER)

    def test_tool_misuse(self) -> str | None:
        """Why no gate rests on this comparison's runs: a side under the test slowdown in a
        comparison that is no calibration (other versions, or the reference slowed), or None."""
        if self.calibration is not None:
            return None
        for name in SIDES:
            if tool := injected_slowdown((self.sides.get(name) or {}).get("env") or {}):
                return (
                    f"the {name} ran under {tool}, a test tool that adds work to every step, "
                    "in a comparison that is no calibration (only the candidate may carry it, "
                    "with the reference's python and versions): no gate rests on these runs"
                )
        return None

    @property
    def device_memory(self) -> list[DeviceMemory]:
        """Each device's peak and growth compared (compare_devices), at the throughput's
        tolerance and confidence; empty where no throughput was compared or no run measured
        memory per device."""
        if self.throughput is None:
            return []
        return compare_devices(self.samples, self.throughput.tolerance, self.throughput.confidence)

    @property
    def failed(self) -> bool:
        """Its own gate fails. A comparison that gates a change: a run failed, a test tool ran
        in it, or either metric regressed significantly. A calibration: it did not come out as
        it must (as_calibrated); the report shows that, and gates no upgrade on it."""
        if self.calibration is not None:
            return not self.as_calibrated
        return self.why_failed is not None

    @property
    def why_failed(self) -> str | None:
        """Why its gate fails, in one line: the failure, the misuse, each regressed metric's
        comparison, or the calibration's miss (None: it passes)."""
        if self.failure is not None:
            return self.failure
        if self.throughput is None:
            return "no throughput was compared"
        if self.calibration is not None:
            if self.as_calibrated:
                return None
            miss = "a false alarm" if self.calibration_kind == AA else "the slowdown was not caught"
            return f"{self.calibration}: {miss}: {self.throughput.line()}"
        if misuse := self.test_tool_misuse():
            return misuse
        bad = [c.line() for c in (self.throughput, self.memory) if c is not None and c.regressed]
        devices = self.device_memory
        if any(d.peak.regressed for d in devices):  # it says which device, and by how much
            bad = [c for c in bad if not c.startswith(f"{self.memory.metric}:")]  # type: ignore[union-attr]
        bad += [d.peak_line() for d in devices if d.peak.regressed]
        bad += [d.growth_line() for d in devices if d.grows]
        return "; ".join(bad) or None

    def lines(self) -> list[str]:
        """The verdict lines, the decision last."""
        out = [
            f"{name}: {info['python']} {' '.join(f'{k}={v}' for k, v in info['env'].items())}"
            f" — {_versions(info.get('versions', {}))}"
            for name, info in self.sides.items()
        ]
        versions = [info.get("versions") for info in self.sides.values()]
        if versions[0] and versions[0] == versions[1]:
            out.append("(the same package versions on both sides)")
        if self.throughput is not None:
            out.append(self.throughput.line())
        if self.memory is not None:
            out.append(self.memory.line())
        elif self.memory_note:
            out.append(f"peak_mem_bytes: not compared ({self.memory_note})")
        for device in self.device_memory:
            out += [device.peak_line(), device.growth_line()]
        if (
            self.interrupted
        ):  # no call either way: not a failed comparison (racegate.harness.judge.gate)
            out.append(f"A/B INTERRUPTED: {self.failure}")
        elif self.failure:
            out.append(f"A/B FAILED: {self.failure}")
        elif self.calibration is not None and self.throughput is not None:
            word = "as it must" if self.as_calibrated else f"NOT as it must ({self.why_failed})"
            out.append(
                f"A/B calibration, {self.calibration}: candidate {self.throughput.word}, "
                f"{word}; it gates no upgrade"
            )
        elif misuse := self.test_tool_misuse():
            out.append(f"A/B FAILED: {misuse}")
        elif self.throughput is not None:
            memory = self.memory.word if self.memory else "memory not compared"
            if worse := [d.device for d in self.device_memory if d.regressed]:
                memory = f"more memory or growth on {', '.join(worse)}"
            gate = "FAILS" if self.failed else "passes"
            out.append(f"A/B: candidate {self.throughput.word}, {memory}: the gate {gate}")
        return out

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["throughput"] = self.throughput.to_json() if self.throughput else None
        data["memory"] = self.memory.to_json() if self.memory else None
        data["device_memory"] = [d.to_json() for d in self.device_memory]
        return data


def _versions(versions: dict[str, str]) -> str:
    keys = ("torch", "transformers", "triton", "python")
    return ", ".join(f"{k} {versions[k]}" for k in keys if k in versions) or "versions unknown"


# The kinds of calibration (ABResult.calibration): comparisons that test the comparison itself.
AA = "A/A"
INJECTED = "injected slowdown"


def _settings(side: dict[str, Any]) -> dict[str, str]:
    """A side's environment less the test slowdown (a zero one is no setting)."""
    return {k: v for k, v in (side.get("env") or {}).items() if k != TEST_SLOWDOWN_ENV}
