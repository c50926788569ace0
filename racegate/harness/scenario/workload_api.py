"""The workload interface: what the harness needs from any training step.

The harness talks to a workload only through these protocols; `model/` is the
built-in implementation and user code plugs in by import path
(`mypkg.train:make_workload`). Loading and checking a workload lives here too.
"""

from __future__ import annotations

import contextlib
import importlib
import inspect
import operator
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from racegate.harness.scenario.vocab import Strategy, StrategySpec

if TYPE_CHECKING:  # torch is imported only where a workload runs: reports need no torch
    import torch

DEFAULT_WORKLOAD = "racegate.model.workload:make_workload"


@dataclass(frozen=True)
class StepResult:
    """What one train step reports back."""

    tokens: int  # tokens this step processed (the unit of tokens/s; the workload says which)
    loss: float | None = None

    def __post_init__(self) -> None:
        # ≥ 1, here where the step makes it: a step of 0 tokens made a run's tokens/s 0, which
        # `run` judged while the report and pytest refused the same record (one answer).
        try:
            ok = not isinstance(self.tokens, bool) and operator.index(self.tokens) >= 1
        except TypeError:
            ok = False
        if not ok:
            raise ValueError(
                f"StepResult(tokens={self.tokens!r}): a step reports the tokens it processed, "
                "an int ≥ 1"
            )


@dataclass(frozen=True)
class WorkloadRoles:
    """Which of a workload's strategies is its production strategy, which its positive control
    (the known-bad one, docs/gate.md), and the specs of strategies it names beyond racegate's
    registry (racegate.harness.scenario.vocab.STRATEGIES). A workload returns one from an optional
    `roles()`; without it, the built-in drafter's roles apply. `[tool.racegate]` and the command
    line (--production-strategy, --control-strategy) override both names
    (racegate.harness.doors.options)."""

    production: str = str(Strategy.WARMUP_LOCKED)
    control: str = str(Strategy.PER_DEVICE)
    strategies: Mapping[str, StrategySpec] = field(default_factory=dict)  # its own names only


BUILTIN_ROLES = WorkloadRoles()  # the built-in drafter's, and any workload's without roles()


@runtime_checkable
class Replica(Protocol):
    """One trainable copy of the workload on one device, driven by one thread."""

    def step(self, shape: int) -> StepResult:
        """Run one full train step (forward, backward, optimizer) on a batch of bucket `shape`."""
        ...

    def eager_fallbacks(self) -> int:
        """How many compiled-attention calls ran uncompiled so far (silent fallback detector).

        Return 0 if the workload cannot tell; the harness then relies on throughput.
        """
        ...


@runtime_checkable
class Workload(Protocol):
    """A factory of replicas plus what the harness needs to schedule them."""

    name: str

    def strategies(self) -> Sequence[str]:
        """Compile strategies this workload implements: racegate's names
        (racegate.harness.scenario.vocab.Strategy) or its own, each with a spec in
        `roles().strategies`. `processes` (one process per worker) is always available; a workload
        that does not list it gets `per_device`."""
        ...

    # Optional: `def roles(self) -> WorkloadRoles` names its production strategy, its positive
    # control and its own strategies' specs (default: BUILTIN_ROLES).

    def shapes(self) -> Sequence[int]:
        """Bucket ids this workload will step on; the `warmup` strategy compiles each up front.

        The first is the steady-state shape; `recompile` schedules switch to the next one.
        """
        ...

    def make_replica(self, device: torch.device, strategy: str, *, seed: int) -> Replica:
        # Scenarios with target devices (`--target-devices`) also pass `target_device=`; a
        # workload without a separate target may leave that keyword out.
        """Build one replica on `device` compiled with `strategy` (ValueError if unsupported)."""
        ...

    def flops_per_step(self, shape: int) -> float | None:
        """Analytic FLOPs of one train step on bucket `shape`, or None if unknown (no MFU)."""
        ...


@dataclass(frozen=True)
class WorkloadSpec:
    """Where a workload comes from and the keyword options passed to its factory."""

    path: str = DEFAULT_WORKLOAD
    options: dict[str, Any] = field(default_factory=dict)


class WorkloadError(ValueError):
    """The workload path does not import or the object does not fit the interface."""


REQUIRED_WORKLOAD_METHODS = ("strategies", "shapes", "make_replica", "flops_per_step")
REQUIRED_REPLICA_METHODS = ("step", "eager_fallbacks")


def _one_line(exc: BaseException) -> str:
    """`Type: first line of the message`, and for a syntax error where it is."""
    if isinstance(exc, SyntaxError):
        return f"SyntaxError: {exc.msg} ({exc.filename}, line {exc.lineno})"
    first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    return f"{type(exc).__name__}: {first}" if first else type(exc).__name__


@contextlib.contextmanager
def no_exit(where: str, what: str) -> Iterator[None]:
    """A workload's code run here (importing it, its factory, its methods) that exits
    (sys.exit, SystemExit, as a training script "with nothing to do" does) is a WorkloadError,
    one line naming where: never the process's own exit, status 0 and no decision."""
    try:
        yield
    except SystemExit as exc:
        raise WorkloadError(
            f"workload {where!r}: {what} called sys.exit({exc.code!r}); a workload must not "
            "exit: return or raise instead"
        ) from None


def _import(spec: WorkloadSpec, module_name: str) -> object:
    try:
        with no_exit(spec.path, f"importing {module_name!r}"):
            return importlib.import_module(module_name)
    except WorkloadError:
        raise
    except ModuleNotFoundError as exc:
        if exc.name is not None and module_name.startswith(exc.name):  # the module itself
            raise WorkloadError(
                f"workload {spec.path!r}: cannot import {module_name!r}: no module named "
                f"{exc.name!r}; check the path and that its package is on sys.path"
            ) from None
        raise WorkloadError(
            f"workload {spec.path!r}: importing {module_name!r} failed: {_one_line(exc)}"
        ) from None
    # Importing runs the user's module: anything it raises (a syntax error, a failed import
    # inside it, an exception at top level) is a bad workload, reported on one line.
    except Exception as exc:
        raise WorkloadError(
            f"workload {spec.path!r}: importing {module_name!r} failed: {_one_line(exc)}"
        ) from None


def load_workload(spec: WorkloadSpec) -> Workload:
    """Import `module:factory`, call it with the spec's options, check the result fits."""
    module_name, sep, attr = spec.path.partition(":")
    if not sep or not module_name or not attr:
        raise WorkloadError(
            f"workload {spec.path!r} is not an import path; expected 'package.module:factory'"
        )
    module = _import(spec, module_name)
    factory = getattr(module, attr, None)
    if factory is None:
        raise WorkloadError(f"workload {spec.path!r}: module {module_name!r} has no {attr!r}")
    if not callable(factory):
        raise WorkloadError(f"workload {spec.path!r}: {attr!r} is not callable")
    try:
        inspect.signature(factory).bind(**spec.options)
    except TypeError as exc:
        raise WorkloadError(
            f"workload {spec.path!r}: factory {attr}() does not take options "
            f"{sorted(spec.options)} ({exc}); give it a 'preset' keyword"
        ) from None
    except ValueError:  # no signature to read (a builtin): let the call say
        pass
    options = ", ".join(f"{k}={v!r}" for k, v in sorted(spec.options.items()))
    try:
        with no_exit(spec.path, f"factory {attr}({options})"):
            workload = factory(**spec.options)
    except WorkloadError:
        raise
    except Exception as exc:  # the user's factory: its failure is a bad workload, one line
        raise WorkloadError(
            f"workload {spec.path!r}: factory {attr}({options}) raised {_one_line(exc)}"
        ) from None
    check_workload(workload, spec.path)
    return workload


def _call(workload: object, method: str, where: str) -> object:
    try:
        with no_exit(where, f"{method}()"):
            return getattr(workload, method)()
    except WorkloadError:
        raise
    except Exception as exc:
        raise WorkloadError(f"workload {where!r}: {method}() raised {_one_line(exc)}") from None


def check_workload(workload: object, where: str) -> None:
    """Raise WorkloadError naming the first member of the Workload interface that is missing
    or returns something that does not fit."""
    if not isinstance(getattr(workload, "name", None), str):
        raise WorkloadError(
            f"workload {where!r}: the factory returned {type(workload).__name__}, which has no "
            "attribute 'name' (a str); return an object with the Workload interface "
            "(racegate/harness/scenario/workload_api.py)"
        )
    for method in REQUIRED_WORKLOAD_METHODS:
        if not callable(getattr(workload, method, None)):
            raise WorkloadError(f"workload {where!r}: missing method {method}()")
    strategies = _call(workload, "strategies", where)
    if (
        isinstance(strategies, str | bytes)
        or not isinstance(strategies, Sequence)
        or not strategies
        or not all(isinstance(s, str) for s in strategies)
    ):
        raise WorkloadError(
            f"workload {where!r}: strategies() returned {strategies!r}; expected a non-empty "
            "list of strategy names"
        )
    roles = roles_of(workload, where)
    unknown = [s for s in strategies if s not in set(Strategy) and s not in roles.strategies]
    if unknown:
        raise WorkloadError(
            f"workload {where!r}: strategy {unknown[0]!r} is not racegate's and has no spec; give "
            "it one in roles().strategies (a racegate.harness.scenario.vocab.StrategySpec)"
        )
    shapes = _call(workload, "shapes", where)
    if (
        not isinstance(shapes, Sequence)
        or isinstance(shapes, str | bytes)
        or not all(isinstance(s, int) and not isinstance(s, bool) for s in shapes)
    ):
        raise WorkloadError(
            f"workload {where!r}: shapes() returned {shapes!r}; expected a list of bucket ids "
            "(ints)"
        )
    if not shapes:
        raise WorkloadError(f"workload {where!r}: shapes() returned no bucket")
    try:
        params = inspect.signature(workload.make_replica).parameters  # type: ignore[attr-defined]
    except (TypeError, ValueError):
        params = {}
    if "seed" not in params:
        raise WorkloadError(f"workload {where!r}: make_replica() must accept a 'seed' keyword")


def roles_of(workload: object, where: str) -> WorkloadRoles:
    """The workload's roles(), checked (BUILTIN_ROLES where it has none): its own strategies'
    specs are StrategySpec objects under names racegate's registry does not use."""
    if getattr(workload, "roles", None) is None:
        return BUILTIN_ROLES
    roles = _call(workload, "roles", where)
    if not isinstance(roles, WorkloadRoles):
        raise WorkloadError(
            f"workload {where!r}: roles() returned {type(roles).__name__}; expected a "
            "racegate.harness.scenario.workload_api.WorkloadRoles"
        )
    for name in (roles.production, roles.control):
        if not isinstance(name, str) or not name:
            raise WorkloadError(
                f"workload {where!r}: roles() names strategy {name!r}; expected a name"
            )
    for name, spec in roles.strategies.items():
        if name in set(Strategy):
            raise WorkloadError(
                f"workload {where!r}: roles() gives a spec for {name!r}, a racegate strategy "
                "whose spec is the registry's (racegate.harness.scenario.vocab.STRATEGIES); "
                "give yours a new name"
            )
        if not isinstance(spec, StrategySpec):
            raise WorkloadError(
                f"workload {where!r}: roles() spec of {name!r} is {type(spec).__name__}; "
                "expected a racegate.harness.scenario.vocab.StrategySpec"
            )
    return roles


def has_strategies(workload: Workload) -> tuple[str, ...]:
    """The strategies a workload can run: its own list, and `processes` (harness-level)."""
    return tuple(dict.fromkeys([*workload.strategies(), str(Strategy.PROCESSES)]))


def check_replica(replica: object, where: str) -> None:
    """Raise WorkloadError naming the first missing member of the Replica interface."""
    for method in REQUIRED_REPLICA_METHODS:
        if not callable(getattr(replica, method, None)):
            raise WorkloadError(f"workload {where!r}: replica is missing method {method}()")
