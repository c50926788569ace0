"""`make_workload()`: the built-in DFlash workload behind
racegate.harness.scenario.workload_api.Workload.

Importable in a spawned child: no state at import beyond module-level caches. Also holds the
injected-slowdown test tool (`slowdown=`, SlowedReplica) that A/B power tests use.
"""

from __future__ import annotations

import os
import statistics
import sys
import time
from collections.abc import Sequence
from typing import Any

import torch

from racegate.harness.scenario.vocab import TEST_SLOWDOWN_ENV
from racegate.model.config import DrafterConfig, from_name
from racegate.model.data import BatchSource, make_buckets
from racegate.model.flops import step_flops
from racegate.model.mask import visible_pairs
from racegate.model.strategies import CUDA_ONLY, STRATEGIES
from racegate.model.train_step import DFlashReplica

FLOPS_SAMPLE_SEED = 0  # anchors drawn to estimate the mask's density for flops_per_step


class DFlashWorkload:
    """DFlash drafter training on one preset; shapes are bucket ids (first = steady state)."""

    def __init__(self, config: DrafterConfig, slowdown: float = 0.0) -> None:
        self.config = config
        self.slowdown = slowdown
        self.name = f"dflash-{config.preset}" + (f"+slowdown{slowdown:g}" if slowdown else "")
        self.buckets = make_buckets(config)
        self._flops: dict[int, float] = {}

    def strategies(self) -> Sequence[str]:
        """All of racegate.model.strategies.STRATEGIES on CUDA; singleton and eager need CUDA."""
        if torch.cuda.is_available():
            return STRATEGIES
        return tuple(s for s in STRATEGIES if s not in CUDA_ONLY)

    def shapes(self) -> Sequence[int]:
        return [b.index for b in self.buckets]

    def make_replica(
        self,
        device: torch.device,
        strategy: str,
        *,
        seed: int,
        target_device: torch.device | None = None,
    ) -> DFlashReplica | SlowedReplica:
        """`target_device`: where the frozen target runs (default: `device`), as in the
        incident's topology (target on GPUs 0-4, drafter threads on 5-7)."""
        replica = DFlashReplica(
            self.config, device, strategy, seed=seed, target_device=target_device
        )
        if self.slowdown:
            return SlowedReplica(replica, self.slowdown)
        return replica

    def flops_per_step(self, shape: int) -> float | None:
        """Analytic FLOPs (racegate.model.flops) with the attention term at a sampled mask
        density."""
        if shape not in self._flops:
            bucket = self.buckets[shape]
            source = BatchSource(self.config, FLOPS_SAMPLE_SEED)
            _, loss_mask = source.sequences(bucket, 0)
            anchors, valid = source.anchors(bucket, loss_mask)
            pairs = visible_pairs(anchors, valid, self.config.block_size)
            self._flops[shape] = step_flops(self.config, bucket, pairs).total
        return self._flops[shape]

    def __repr__(self) -> str:
        sizes = ", ".join(
            f"{b.index}:S={b.seq_len}x{b.batch_size}x{b.micro_batches}" for b in self.buckets
        )
        return f"DFlashWorkload({self.name}; buckets {sizes})"


# ---- Injected slowdown: a TEST TOOL for A/B power measurements, not a production option ----
SLOWDOWN_ENV = TEST_SLOWDOWN_ENV  # racegate.harness.scenario.vocab: the A/B reads it too
CALIBRATION_STEPS = 2  # repeat steps (not the first on a shape) timed before extra work starts


def resolve_slowdown(explicit: float | None) -> float:
    """`slowdown=` if given, else $RACEGATE_TEST_SLOWDOWN, else 0; ValueError names a bad one."""
    value, where = (
        (explicit, "slowdown=")
        if explicit is not None
        else (os.environ.get(SLOWDOWN_ENV) or 0.0, SLOWDOWN_ENV)
    )
    try:
        out = float(value)
    except ValueError:
        out = -1.0
    if not 0.0 <= out <= 10.0:
        raise ValueError(
            f"invalid slowdown {value!r} from {where}; allowed: a fraction 0..10 "
            "of a step (0.05 = 5% more work per step)"
        )
    return out


class SlowedReplica:
    """A replica plus a fixed amount of real extra work per step: `slowdown` × one step's time.

    Test tool only: it makes a known regression for an A/B comparison to catch. The first
    CALIBRATION_STEPS repeat steps of the inner replica are timed (device-synchronised; a
    step on a shape not seen before compiles and is not timed) and run without extra work;
    from then on every step is followed by a fixed number of square matmuls (bf16 2048² on
    CUDA, fp32 128² on CPU, their cost timed once at construction) that add ≈ `slowdown` of
    the calibrated step time. Give the run `--warmup-steps ≥ 1 + CALIBRATION_STEPS` so the
    unslowed steps are not steady ones.
    """

    def __init__(self, inner: DFlashReplica, slowdown: float) -> None:
        self.inner = inner
        self.slowdown = slowdown
        self.device = inner.device
        cuda = self.device.type == "cuda"
        n = 2048 if cuda else 128
        dtype = torch.bfloat16 if cuda else torch.float32
        gen = torch.Generator(device=self.device).manual_seed(0)
        self._a = torch.randn(n, n, device=self.device, dtype=dtype, generator=gen) / n**0.5
        self._out = torch.empty_like(self._a)
        self._extra(3)  # warm: the first call of a kernel pays for its setup
        reps, t0 = 8, time.perf_counter()
        while True:
            self._extra(reps)
            elapsed = time.perf_counter() - t0
            if elapsed > 0.05:
                break
            reps, t0 = reps * 2, time.perf_counter()
        self.matmul_s = elapsed / reps
        self.matmul_shape = (n, n, str(dtype).removeprefix("torch."))
        self.reps: int | None = None  # extra matmuls per step, fixed once calibrated
        self._timed: list[float] = []
        self._seen: set[int] = set()

    def _sync(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    @torch.no_grad()
    def _extra(self, reps: int) -> None:
        for _ in range(reps):
            torch.mm(self._a, self._a, out=self._out)
        self._sync()

    def step(self, shape: int) -> Any:
        if self.reps is not None:
            result = self.inner.step(shape)
            self._extra(self.reps)
            return result
        t0 = time.perf_counter()
        result = self.inner.step(shape)
        self._sync()
        if shape in self._seen:
            self._timed.append(time.perf_counter() - t0)
        self._seen.add(shape)
        if len(self._timed) == CALIBRATION_STEPS:
            step_s = statistics.median(self._timed)
            self.reps = max(1, round(self.slowdown * step_s / self.matmul_s))
            print(
                f"racegate test slowdown {self.slowdown:g}: {self.reps} extra "
                f"{'x'.join(map(str, self.matmul_shape))} matmuls per step "
                f"({self.reps * self.matmul_s * 1e3:.1f} ms on a {step_s * 1e3:.1f} ms step)",
                file=sys.stderr,
                flush=True,
            )
        return result

    def eager_fallbacks(self) -> int:
        return self.inner.eager_fallbacks()

    def __getattr__(self, name: str) -> Any:  # the rest (counts_fallbacks, drafter) as inner's
        return getattr(self.inner, name)


def make_workload(
    preset: str = "tiny", *, slowdown: float | None = None, **overrides: Any
) -> DFlashWorkload:
    """The workload for `preset` (tiny, small, qwen3-8b-drafter, qwen3-4b-drafter) + overrides.

    `slowdown` (default $RACEGATE_TEST_SLOWDOWN, else 0) is a test tool: it adds that
    fraction of a step's time as real extra work per step (SlowedReplica), so an A/B
    comparison has a known regression to catch. Never set it for a production gate.
    """
    return DFlashWorkload(from_name(preset, **overrides), resolve_slowdown(slowdown))
