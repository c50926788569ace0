"""racegate's pytest plugin: options, markers, GPU discovery and skips, scenario fixtures.

Options live in one group; values are validated in `pytest_configure` (a bad value is a
`pytest.UsageError` naming it and the allowed ones); plugin state lives in `config.stash`.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tomllib
from importlib import metadata
from pathlib import Path

import pytest

from harness import settings
from harness.judge import race_expectations
from harness.judge.suite import RacegateConfig, racegate_key
from harness.vocab import CacheState, Schedule, Strategy, parse_choice, strategies_where

MARKERS = {
    "race": "race(): a cross-thread tracing race case (what `pytest -k race` selects)",
    "gpu": "gpu(): needs at least one CUDA GPU; skipped with a reason otherwise",
    "multi_gpu": "multi_gpu(): needs at least two CUDA GPUs; skipped with a reason otherwise",
    "throughput": "throughput(): gates tokens/s against baselines/<hardware>.json",
    "slow": "slow(): takes minutes; deselect with -m 'not slow'",
}
pytest_plugins = ["harness.report.terminal"]  # the verdict block and its calibration options
CPU_PRESET, GPU_PRESET = "tiny", "small"
# The suite's strategies per device kind, from the registry (flex has no CPU backward).
CPU_STRATEGIES = strategies_where(in_suite=True, trains_on_cpu=True)
GPU_STRATEGIES = strategies_where(in_suite=True)


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("racegate", "racegate: cross-thread compile race gate")
    group.addoption(
        "--devices",
        dest="racegate_devices",
        default=None,
        help="'cpu' or GPU indices '0,1' (default: all GPUs, else cpu)",
    )
    group.addoption(
        "--threads-per-device",
        dest="racegate_tpd",
        default=None,
        help="comma list of threads per device (default: 2 on CPU, 1,2 on GPU)",
    )
    group.addoption(
        "--cache-states",
        dest="racegate_cache_states",
        default=None,
        help=f"comma list of {', '.join(CacheState)} (default: all on GPU, cold on CPU)",
    )
    group.addoption(
        "--strategies",
        dest="racegate_strategies",
        default=None,
        help=f"comma list of {', '.join(Strategy)} (default: those the device can train)",
    )
    group.addoption(
        "--schedule",
        dest="racegate_schedule",
        default=str(Schedule.RECOMPILE),
        help=f"start schedule, one of {', '.join(Schedule)} (default: %(default)s)",
    )
    group.addoption(
        "--switch-interval",
        dest="racegate_switch_interval",
        type=float,
        default=1e-5,
        help="sys.setswitchinterval in each run: short GIL slices let steady threads call "
        "compiled code while another thread traces (default: %(default)s)",
    )
    group.addoption(
        "--preset",
        dest="racegate_preset",
        default=None,
        help=f"workload preset (default: {CPU_PRESET} on CPU, {GPU_PRESET} on GPU)",
    )
    group.addoption(
        "--repeat",
        dest="racegate_repeat",
        type=int,
        default=None,
        help="isolated runs per race case; a case fails if any run does "
        "(default: 3 on GPU, where one run finds the race 40-80% of the time; 1 on CPU)",
    )
    group.addoption(
        "--run-timeout",
        dest="racegate_run_timeout",
        type=float,
        default=None,
        help="seconds one isolated run may take before it counts as a hang "
        "(default: 80%% of the case's timeout, split over its runs)",
    )
    group.addoption(
        "--share-gpus",
        dest="racegate_share_gpus",
        action="store_true",
        help="under pytest-xdist, let every worker use every GPU instead of a slice of them, "
        "so race cases on all GPUs run side by side (outcomes stay valid; throughput cases "
        "skip under any -n above 1, as their timings would not be)",
    )
    group.addoption(
        "--results",
        dest="racegate_results",
        default=None,
        help="append every run record to this JSON Lines file (default: none)",
    )
    group.addoption(
        "--workload",
        dest="racegate_workload",
        default=None,
        help="module:factory of the workload (default: [tool.racegate] or model/)",
    )


def _csv(text: str) -> list[str]:
    return [s.strip() for s in text.split(",") if s.strip()]


def count_gpus() -> int:
    """GPUs visible to this process, without initialising CUDA here (children use them)."""
    if shutil.which("nvidia-smi") is None:
        return 0
    try:
        out = subprocess.run(
            ["nvidia-smi", "-L"], capture_output=True, text=True, timeout=30
        ).stdout
    except (OSError, subprocess.TimeoutExpired):
        return 0
    n = sum(1 for line in out.splitlines() if line.startswith("GPU "))
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    return min(n, len(_csv(visible))) if visible is not None else n


def _xdist_workers(config: pytest.Config) -> int:
    """How many pytest-xdist workers run this session (1 without xdist)."""
    worker = getattr(config, "workerinput", None)
    if worker is not None:
        return int(worker["workercount"])
    n = config.getoption("numprocesses", None) if config.pluginmanager.has_plugin("xdist") else None
    return n if isinstance(n, int) and n > 1 else 1


def _assign_worker_gpus(config: pytest.Config, gpus: int) -> int:
    """Under pytest-xdist each worker gets its own slice of GPUs through CUDA_VISIBLE_DEVICES,
    unless --share-gpus lets them all use every GPU."""
    worker = getattr(config, "workerinput", None)
    if worker is None or gpus == 0 or config.getoption("racegate_share_gpus"):
        return gpus
    n_workers = int(worker["workercount"])
    idx = int(worker["workerid"].removeprefix("gw"))
    per = max(1, gpus // n_workers)
    visible = _csv(os.environ.get("CUDA_VISIBLE_DEVICES", ",".join(map(str, range(gpus)))))
    mine = visible[(idx * per) % len(visible) :][:per]
    os.environ["CUDA_VISIBLE_DEVICES"] = ",".join(mine)
    return len(mine)


def _versions() -> dict[str, str]:
    out = {}
    for dist in ("torch", "transformers"):
        try:
            out[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            out[dist] = "0"
    return out


def _resolve(config: pytest.Config) -> RacegateConfig:
    gpus = _assign_worker_gpus(config, count_gpus())
    opt = config.getoption
    try:
        devices_text = opt("racegate_devices") or (",".join(map(str, range(gpus))) or "cpu")
        from harness.scenario import parse_devices

        devices = parse_devices(devices_text)
        on_gpu = devices != ("cpu",)
        if on_gpu and gpus == 0:
            raise ValueError(f"--devices {devices_text!r} names GPUs but this machine has none")
        tpd_text = opt("racegate_tpd") or ("1,2" if on_gpu else "2")
        tpd = tuple(int(t) for t in _csv(tpd_text) if t.isdigit() and int(t) > 0)
        if len(tpd) != len(_csv(tpd_text)):
            raise ValueError(
                f"--threads-per-device {tpd_text!r}: expected positive integers like '1,2'"
            )
        cache_text = opt("racegate_cache_states") or (",".join(CacheState) if on_gpu else "cold")
        cache_states = tuple(parse_choice(CacheState, c, "cache state") for c in _csv(cache_text))
        default_strats = GPU_STRATEGIES if on_gpu else CPU_STRATEGIES
        strat_text = opt("racegate_strategies") or ",".join(default_strats)
        strategies = tuple(parse_choice(Strategy, s, "strategy") for s in _csv(strat_text))
        schedule = parse_choice(Schedule, opt("racegate_schedule"), "schedule")
        switch_interval = opt("racegate_switch_interval")
        if switch_interval <= 0:
            raise ValueError(f"--switch-interval must be > 0 seconds, got {switch_interval}")
        run_timeout = opt("racegate_run_timeout")
        if run_timeout is not None and run_timeout <= 0:
            raise ValueError(f"--run-timeout must be > 0 seconds, got {run_timeout}")
        repeat = opt("racegate_repeat")
        repeat = (3 if on_gpu else 1) if repeat is None else repeat
        if repeat < 1:
            raise ValueError(f"--repeat must be ≥ 1, got {repeat}")
        workload, _ = settings.setting("workload", opt("racegate_workload"))
        production = settings.production_strategy()
        expectations = race_expectations.load(production=production)  # bad table: usage error
    except (ValueError, tomllib.TOMLDecodeError) as exc:
        raise pytest.UsageError(f"racegate: {exc}") from None
    results = opt("racegate_results")
    return RacegateConfig(
        gpus=gpus,
        devices=devices,
        threads_per_device=tpd,
        cache_states=cache_states,
        strategies=strategies,
        schedule=schedule,
        preset=opt("racegate_preset") or (GPU_PRESET if on_gpu else CPU_PRESET),
        repeat=repeat,
        run_timeout=run_timeout,
        switch_interval=switch_interval,
        results=Path(results) if results else None,
        workload=workload,
        production=production,
        expectations=expectations,
        versions=_versions(),
        overlapping=_xdist_workers(config) > 1,  # runs from here overlap other workers' runs
    )


def pytest_configure(config: pytest.Config) -> None:
    for text in MARKERS.values():
        config.addinivalue_line("markers", text)
    config.stash[racegate_key] = _resolve(config)


def pytest_report_header(config: pytest.Config) -> list[str]:
    rc = config.stash[racegate_key]
    return [
        f"racegate: torch {rc.versions['torch']}, transformers {rc.versions['transformers']}, "
        f"{rc.gpus} GPU(s), devices {','.join(rc.devices)}, preset {rc.preset}, "
        f"production strategy {rc.production}, schedule {rc.schedule}, "
        f"switch interval {rc.switch_interval:g} s, workload {rc.workload}"
    ]


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    rc = config.stash[racegate_key]
    gpus, chosen = rc.gpus, 0 if rc.devices == ("cpu",) else len(rc.devices)
    for item in items:
        if item.get_closest_marker("multi_gpu") and gpus < 2:
            reason = f"needs ≥ 2 CUDA GPUs; this machine has {gpus}"
        elif item.get_closest_marker("gpu") and gpus < 1:
            reason = "needs a CUDA GPU; this machine has none"
        elif item.get_closest_marker("multi_gpu") and chosen < 2:
            reason = f"needs ≥ 2 CUDA GPUs; --devices chose {chosen}"
        elif item.get_closest_marker("gpu") and chosen < 1:
            reason = "needs a CUDA GPU; --devices chose cpu"
        elif item.get_closest_marker("throughput") and rc.overlapping:
            reason = "pytest-xdist runs other cases on this host at the same time, so timings "
            reason += "are invalid (a host-bound step slows with them); run throughput cases "
            reason += "without -n"
        else:
            continue
        item.add_marker(pytest.mark.skip(reason=reason))


@pytest.fixture(scope="session")
def racegate_config(pytestconfig: pytest.Config) -> RacegateConfig:
    return pytestconfig.stash[racegate_key]
