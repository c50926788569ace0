"""The parent → child spec: what one worker process runs, typed and versioned.

racegate.harness.run.runner makes one `ChildSpec` per child and writes it as JSON to the child's
RUN_DIR/scenario.json; racegate.harness.run.worker reads it back once (`ChildSpec.read`), and a spec
of another version or a malformed one is a ChildSpecError of one line. Nothing else crosses the
process edge as a spec.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, replace
from enum import StrEnum
from pathlib import Path
from typing import Any

from racegate.harness.run import checked
from racegate.harness.scenario.spec import Scenario

SPEC_VERSION = 1
FILE_NAME = "scenario.json"  # in the child's run dir: the worker's one input


class ChildSpecError(ValueError):
    """A child's spec is not one this worker reads (version, fields or values): one line."""


class Mode(StrEnum):
    RUN = "run"  # a run's one child: every thread of the scenario
    PROCESS = "process"  # one worker of a run with one process per worker: one thread
    PRIME = "prime"  # the priming run of a primed cache state: one replica per device


@dataclass(frozen=True)
class StartGate:
    """The start barrier of a run's processes (racegate.harness.run.worker.wait_for_siblings): a
    folder each marks `ready-<i>` and `done-<i>` in, and how many processes take part."""

    dir: str
    parties: int


@dataclass(frozen=True)
class ChildSpec:
    scenario: Scenario
    mode: Mode
    # This process's devices (Mode.PROCESS); None: the scenario's.
    process_devices: tuple[str, ...] | None = None
    thread_offset: int = 0  # the run-wide index of this child's first thread
    start_gate: StartGate | None = None  # Mode.PROCESS: the processes start their steps together
    # When the runner started the child (time.monotonic(), system-wide on Linux): the child
    # budgets its deadline from it. None: not started yet (the runner sets it at the start).
    runner_t0: float | None = None
    version: int = SPEC_VERSION

    @property
    def devices(self) -> tuple[str, ...]:
        """The devices this child steps on."""
        return self.scenario.devices if self.process_devices is None else self.process_devices

    def started_at(self, t0: float) -> ChildSpec:
        return replace(self, runner_t0=t0)

    def to_json(self) -> str:
        data: dict[str, Any] = {**asdict(self), "scenario": self.scenario.to_json()}
        data["mode"] = str(self.mode)
        return json.dumps(data)  # tuples (process_devices) write as lists

    def write(self, run_dir: Path) -> None:
        (run_dir / FILE_NAME).write_text(self.to_json())

    @classmethod
    def read(cls, run_dir: Path) -> ChildSpec:
        """The spec in `run_dir`; ChildSpecError naming the file and what is wrong."""
        path = run_dir / FILE_NAME
        try:
            return cls.from_json(path.read_text())
        except (OSError, ValueError) as exc:
            raise ChildSpecError(f"{path}: {exc}") from None

    @classmethod
    def from_json(cls, text: str) -> ChildSpec:
        """The spec in `text`: its version first (another racegate's runner and worker do not
        mix), then every field; ChildSpecError, one line, on the first thing wrong."""
        try:
            raw = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ChildSpecError(f"not JSON ({exc})") from None
        if not isinstance(raw, dict):
            raise ChildSpecError(f"is {checked.shown(raw)}; expected a child spec (an object)")
        if raw.get("version") != SPEC_VERSION:
            raise ChildSpecError(
                f"child spec version {checked.shown(raw.get('version'))}; this worker reads "
                f"{SPEC_VERSION} (a runner and a worker of different racegate versions?)"
            )
        try:
            return cls._checked(raw)
        except (checked.GateInputError, TypeError, ValueError) as exc:
            raise ChildSpecError(str(exc).splitlines()[0]) from None

    @classmethod
    def _checked(cls, raw: dict[str, Any]) -> ChildSpec:
        known = {"scenario", "mode", "process_devices", "thread_offset", "start_gate"}
        unknown = sorted(set(raw) - known - {"runner_t0", "version"})
        if unknown or "scenario" not in raw or "mode" not in raw:
            raise ChildSpecError(
                f"fields unknown {unknown or 'none'}; a spec has scenario and mode, and may "
                f"have {', '.join(sorted(known - {'scenario', 'mode'}))}, runner_t0, version"
            )
        gate = raw.get("start_gate")
        if gate is not None:
            gate = checked.table(gate, "start_gate")
            gate = StartGate(
                checked.text(gate.get("dir"), "start_gate.dir"),
                checked.integer(gate.get("parties"), "start_gate.parties", low=1),
            )
        devices = raw.get("process_devices")
        if devices is not None:
            if not isinstance(devices, list) or not devices:
                shown = checked.shown(devices)
                raise ChildSpecError(f"process_devices is {shown}; expected a non-empty list")
            devices = tuple(checked.text(d, "process_devices[]") for d in devices)
        t0 = raw.get("runner_t0")
        if t0 is not None:
            t0 = checked.optional_number(t0, "runner_t0")
        return cls(
            scenario=Scenario.from_json(checked.table(raw["scenario"], "scenario")),
            mode=checked.choice(Mode, raw["mode"], "mode"),
            process_devices=devices,
            thread_offset=checked.integer(raw.get("thread_offset", 0), "thread_offset"),
            start_gate=gate,
            runner_t0=t0,
        )
