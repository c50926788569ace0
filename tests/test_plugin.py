"""The root conftest as a plugin, exercised with pytester: options, markers, skips, bad input."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from harness.judge.suite import RacegateConfig
from harness.vocab import Schedule, Strategy

pytest_plugins = ["pytester"]
ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def suite(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> pytest.Pytester:
    pytester.makeconftest((ROOT / "conftest.py").read_text())
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    monkeypatch.setenv("PATH", "/nonexistent")  # no nvidia-smi: a CPU-only machine
    pytester.makepyfile(
        """
        import pytest

        @pytest.mark.gpu
        def test_needs_gpu():
            assert False, "must never run without a GPU"

        @pytest.mark.multi_gpu
        def test_needs_two():
            assert False

        def test_cpu(racegate_config):
            assert racegate_config.devices == ("cpu",)
            assert racegate_config.repeat == 1 and racegate_config.preset == "tiny"
        """
    )
    return pytester


def test_gpu_cases_skip_with_a_reason(suite: pytest.Pytester) -> None:
    result = suite.runpytest_subprocess("-rs", "--strict-markers", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=1, skipped=2)
    result.stdout.fnmatch_lines(["*needs a CUDA GPU; this machine has none*"])
    result.stdout.fnmatch_lines(["*needs ≥ 2 CUDA GPUs; this machine has 0*"])


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--strategies", "fast"], "unknown strategy 'fast'; choose from: per_device"),
        (["--cache-states", "hot"], "unknown cache state 'hot'"),
        (["--schedule", "random"], "unknown schedule 'random'"),
        (["--threads-per-device", "two"], "expected positive integers"),
        (["--devices", "0"], "names GPUs but this machine has none"),
        (["--repeat", "0"], "--repeat must be ≥ 1"),
        (["--switch-interval", "0"], "--switch-interval must be > 0"),
        (["--run-timeout", "-5"], "--run-timeout must be > 0"),
    ],
)
def test_bad_options_are_usage_errors(
    suite: pytest.Pytester, args: list[str], message: str
) -> None:
    result = suite.runpytest_subprocess(*args, "-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"*{message}*"])


def test_run_timeout_only_shortens_a_cases_share() -> None:
    fields = dict(
        gpus=0, devices=("cpu",), threads_per_device=(2,), cache_states=(), strategies=(),
        schedule=Schedule.RECOMPILE, switch_interval=1e-5, preset="tiny", repeat=1,
        results=None, workload="model.workload:make_workload", production=Strategy.WARMUP,
        expectations=[], versions={},
    )  # fmt: skip
    assert RacegateConfig(run_timeout=None, **fields).run_timeout_within(240) == 240
    assert RacegateConfig(run_timeout=90, **fields).run_timeout_within(240) == 90
    assert RacegateConfig(run_timeout=500, **fields).run_timeout_within(240) == 240


@pytest.mark.parametrize("share", [False, True], ids=["sliced", "shared"])
def test_xdist_workers_slice_or_share_the_gpus(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, share: bool
) -> None:
    """A stand-in nvidia-smi lists two GPUs; no test here touches CUDA."""
    pytester.makeconftest((ROOT / "conftest.py").read_text())
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    bin_dir = pytester.mkdir("bin")
    smi = bin_dir / "nvidia-smi"
    smi.write_text("#!/bin/sh\n" + "".join(f"echo 'GPU {i}: NVIDIA H200'\n" for i in (0, 1)))
    smi.chmod(0o755)
    monkeypatch.setenv("PATH", os.pathsep.join([str(bin_dir), os.environ["PATH"]]))
    pytester.makepyfile(
        f"""
        import os
        import pytest

        @pytest.mark.gpu
        def test_worker_sees(racegate_config):
            assert racegate_config.gpus == {2 if share else 1}
            assert racegate_config.overlapping  # its records: timings void

        @pytest.mark.multi_gpu
        def test_sees_both(racegate_config):
            assert racegate_config.gpus == 2

        @pytest.mark.gpu
        @pytest.mark.throughput
        def test_timed():
            assert False, "timings are void beside other workers: must skip"
        """
    )
    args = ["-rs", "-p", "no:cacheprovider", "-n", "2", "--devices", "0,1"]
    result = pytester.runpytest_subprocess(*args, *(["--share-gpus"] if share else []))
    result.stdout.fnmatch_lines(["*pytest-xdist runs other cases on this host*"])
    if share:
        result.assert_outcomes(passed=2, skipped=1)
    else:  # each worker sees one GPU: the two-GPU case skips
        result.assert_outcomes(passed=1, skipped=2)
        result.stdout.fnmatch_lines(["*needs ≥ 2 CUDA GPUs; this machine has 1*"])
