"""racegate.harness.ab: the interleaved order, fail-closed samples, the pool split, and real A/B
runs.

The end-to-end test runs real `python -m racegate run` subprocesses of `tiny` on CPU through
`python -m racegate.harness.ab compare`; it takes a few minutes on a loaded 2-core machine.
"""

from __future__ import annotations

import dataclasses
import json
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from racegate.harness.ab.cli import EXIT_USAGE, main
from racegate.harness.ab.result import AA, ABResult
from racegate.harness.ab.run import Side, check_run_args, order, run_ab, run_once
from racegate.harness.ab.stats import (
    SIDES,
    RunSample,
    compare_samples,
    gpu_mismatch,
    power_comparisons,
    power_summary,
    sample_of,
)
from racegate.harness.ab.store import read_ab, write_ab
from racegate.harness.judge.compare import Change
from racegate.harness.judge.gate import EXIT_INTERRUPTED
from racegate.harness.run import checked
from racegate.harness.run.record import Hardware, RunRecord, ThreadRecord, Versions, read_jsonl
from racegate.harness.scenario.spec import Scenario
from racegate.harness.scenario.vocab import TEST_SLOWDOWN_ENV

REPO = Path(__file__).resolve().parents[1]


def _record(**kw: object) -> RunRecord:
    scenario = Scenario(threads_per_device=1)
    done = scenario.warmup_steps + scenario.steps
    base: dict[str, object] = dict(
        scenario=scenario,
        outcome="ok",
        outcome_counts={"ok": 1},
        threads=[ThreadRecord(0, "cpu", "ok", steps_done=done)],
        threads_asked=1,
        threads_concurrent=1,
        versions=Versions(torch="x", transformers="y"),
        hardware=Hardware(),
        tokens_per_s=100.0,
    )
    return RunRecord(**{**base, **kw})  # type: ignore[arg-type]


def test_order_interleaves_and_counterbalances() -> None:
    seq = order(4)
    assert [s[0][0] for s in seq] == list("rccrrccr")
    assert sorted(k for side, k in seq if side == "reference") == [0, 1, 2, 3]
    # counterbalanced: the mean position of each side is the same
    pos = {side: [i for i, (s, _) in enumerate(seq) if s == side] for side in SIDES}
    assert sum(pos["reference"]) == sum(pos["candidate"])


@pytest.mark.parametrize("arg", ["--out", "--out=x.jsonl", "--jobs", "--repeat", "--json"])
def test_run_args_that_ab_owns_are_refused(arg: str) -> None:
    with pytest.raises(ValueError, match="set by ab itself"):
        check_run_args(["--preset", "tiny", arg])


@pytest.mark.parametrize(
    ("kw", "match"),
    [
        ({"outcome": "hang", "detail": "deadline"}, "outcome hang: deadline"),
        ({"timing_valid": False}, "overlapped another run"),
        ({"tokens_per_s": None}, "no steady-state tokens/s"),
    ],
)
def test_a_run_without_a_clean_number_fails_closed(kw: dict[str, object], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        sample_of(_record(**kw), "candidate", 0)


def test_sample_sums_device_peaks_and_none_without_memory() -> None:
    rec = _record(peak_mem_bytes={"cuda:0": 10, "cuda:1": 5})
    assert sample_of(rec, "reference", 0).peak_mem_bytes == 15
    assert sample_of(_record(), "reference", 0).peak_mem_bytes is None


def _samples(side: str, values: list[float]) -> list[RunSample]:
    return [RunSample(side, i, v, None, {}, 1.0) for i, v in enumerate(values)]


def test_power_draws_disjoint_comparisons() -> None:
    ref = _samples("reference", [100.0, 101.0, 99.0, 100.5] * 3)  # 12 runs
    slow = _samples("candidate", [90.0, 90.5, 89.5, 91.0, 90.2, 89.8, 90.1])  # 7 runs
    aa, vs = power_comparisons(ref, slow, 2)
    assert len(aa) == 3 + 1 and len(vs) == 3  # 12 // 4 + 7 // 4 A/A, min(12, 7) // 2 A/B
    assert all(c.change is Change.NONE for c in aa)
    assert all(c.change is Change.LOWER for c in vs)
    assert aa[0].reference == [100.0, 99.0] and aa[0].candidate == [101.0, 100.5]


def test_runs_on_other_gpus_are_named_and_none_recorded_is_no_mismatch() -> None:
    one = [RunSample(s, i, 100.0, None, {}, 1.0, ("GPU-a",)) for i, s in enumerate("rc")]
    assert gpu_mismatch(one) is None
    assert gpu_mismatch(_samples("reference", [1.0, 2.0])) is None  # CPU: none recorded
    other = [*one, RunSample("candidate", 2, 100.0, None, {}, 1.0, ("GPU-b",))]
    why = gpu_mismatch(other)
    assert why is not None and "run 1 (r) on GPU-a, run 3 (candidate) on GPU-b" in why


@pytest.mark.process
def test_a_side_on_another_gpu_fails_the_ab(tmp_path: Path) -> None:
    """Each side's runs write a record of the GPU its environment names (a stand-in for
    `harness run`: CI has no GPU to put a UUID in a real record): the A/B stops at the first
    run on another GPU and makes no call."""
    for gpu in ("a", "b"):
        rec = _record(hardware=Hardware(device_uuids=(f"GPU-{gpu}",)), wall_s=1.0)
        (tmp_path / f"{gpu}.jsonl").write_text(json.dumps(rec.to_json()) + "\n")
    child = tmp_path / "python"
    child.write_text(
        f"#!{sys.executable}\nimport os, shutil, sys\n"
        "shutil.copy(os.environ['RECORD'], sys.argv[sys.argv.index('--out') + 1])\n"
    )
    child.chmod(0o700)
    res = run_ab(
        Side("reference", str(child), {"RECORD": str(tmp_path / "a.jsonl")}),
        Side("candidate", str(child), {"RECORD": str(tmp_path / "b.jsonl")}),
        ["--preset", "tiny"],
        runs=2,
    )
    assert res.failed and res.throughput is None and len(res.samples) == 2
    assert res.failure is not None and "not all step on the same GPU" in res.failure
    assert "GPU-a" in res.failure and "GPU-b" in res.failure


def test_power_names_the_gpus_its_pools_span() -> None:
    ref = [RunSample("reference", i, 100.0 + i % 2, None, {}, 1.0, ("GPU-a",)) for i in range(4)]
    cand = [RunSample("candidate", i, 90.0 + i % 2, None, {}, 1.0, ("GPU-b",)) for i in range(4)]
    lines = power_summary(ref, cand, 2).lines()
    assert "the pools span 2 GPUs: GPU-a (4 runs); GPU-b (4 runs)" in lines
    assert not any("span" in x for x in power_summary(ref, ref, 2).lines())


def test_usage_errors_exit_2_before_any_run(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["compare", "--candidate", sys.executable, "--runs", "1"]) == EXIT_USAGE
    assert "runs must be ≥ 2" in capsys.readouterr().err
    assert main(["compare", "--candidate", sys.executable, "--", "--out", "x"]) == 2
    assert main(["compare", "--candidate-env", "NOEQUALS", "--candidate", "p"]) == 2


@pytest.mark.process
def test_a_failing_side_fails_the_ab_with_its_reason(tmp_path: Path) -> None:
    """A candidate interpreter that cannot run the harness: exit 1, no call, reason named."""
    bogus = tmp_path / "python"
    bogus.write_text("#!/bin/sh\necho 'no torch here' >&2\nexit 3\n")
    bogus.chmod(0o700)
    res = run_ab(
        Side("reference", str(bogus)),
        Side("candidate", str(bogus)),
        ["--preset", "tiny"],
        runs=2,
    )
    assert res.failed and res.throughput is None
    assert res.failure is not None and "reference run 1 of 2" in res.failure
    assert "exited 3" in res.failure and "no torch here" in res.failure


def test_slowdown_knob_resolves_and_names_a_bad_value(monkeypatch: pytest.MonkeyPatch) -> None:
    from racegate.model.workload import SLOWDOWN_ENV, make_workload, resolve_slowdown

    monkeypatch.delenv(SLOWDOWN_ENV, raising=False)
    assert resolve_slowdown(None) == 0.0 and resolve_slowdown(0.05) == 0.05
    monkeypatch.setenv(SLOWDOWN_ENV, "0.3")
    assert resolve_slowdown(None) == 0.3 and resolve_slowdown(0.0) == 0.0  # explicit wins
    assert make_workload("tiny").name == "dflash-tiny+slowdown0.3"
    monkeypatch.setenv(SLOWDOWN_ENV, "fast")
    with pytest.raises(ValueError, match=f"invalid slowdown 'fast' from {SLOWDOWN_ENV}"):
        resolve_slowdown(None)
    with pytest.raises(ValueError, match="invalid slowdown -1 from slowdown="):
        resolve_slowdown(-1)


def test_slowed_replica_calibrates_then_adds_fixed_work() -> None:
    """Real tiny replica on CPU: no extra work until two repeat steps are timed, then a fixed
    number of matmuls sized to the slowdown fraction of the calibrated step."""
    import torch

    from racegate.model.workload import CALIBRATION_STEPS, SlowedReplica, make_workload

    replica = make_workload("tiny", slowdown=0.5).make_replica(
        torch.device("cpu"), "sdpa_dense", seed=0
    )
    assert isinstance(replica, SlowedReplica) and replica.reps is None
    for _ in range(CALIBRATION_STEPS):  # step 0 compiles nothing here but is never timed
        replica.step(0)
    assert replica.reps is None
    replica.step(0)
    assert replica.reps is not None and replica.reps >= 1
    step_s = sorted(replica._timed)[len(replica._timed) // 2]
    assert replica.reps * replica.matmul_s == pytest.approx(0.5 * step_s, rel=0.5, abs=2e-3)
    fixed = replica.reps
    replica.step(0)
    assert replica.reps == fixed and replica.eager_fallbacks() == 0


# The CPU here is shared and contended: one run's steady tokens/s moves 2-3x with the
# neighbours' load, so the injected slowdown is large (3.0: 4x the work per step) and each
# run keeps one intra-op thread (OMP_NUM_THREADS=1) so it does not spin against the others.
SLOWDOWN = "3.0"
RUN_ARGS = [
    "--preset",
    "tiny",
    "--strategy",
    "sdpa_dense",
    "--threads-per-device",
    "1",
    "--steps",
    "40",
    "--warmup-steps",
    "3",
]  # 3 = step 0 + the 2 calibration steps
ONE_THREAD = ["--reference-env", "OMP_NUM_THREADS=1", "--candidate-env", "OMP_NUM_THREADS=1"]


def _ab(tmp_path: Path, runs: int, *extra: str) -> tuple[subprocess.CompletedProcess[str], dict]:
    out = tmp_path / "ab.json"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "racegate.harness.ab",
            "compare",
            "--candidate",
            sys.executable,
            "--runs",
            str(runs),
            "--out",
            str(out),
            *ONE_THREAD,
            *extra,
            "--",
            *RUN_ARGS,
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=1150,
    )
    assert out.exists(), proc.stderr
    return proc, json.loads(out.read_text())


@pytest.mark.timeout(1200)
@pytest.mark.process
def test_cpu_ab_calls_an_injected_slowdown_slower(tmp_path: Path) -> None:
    """Real interleaved `harness run` processes, 4 per side: tiny vs tiny + slowdown is called
    slower, which is the calibration as it must be (exit 0); `power` reads the pooled
    records."""
    records = tmp_path / "records"
    proc, result = _ab(
        tmp_path,
        4,
        "--records",
        str(records),
        "--candidate-env",
        f"RACEGATE_TEST_SLOWDOWN={SLOWDOWN}",
    )
    assert result["failure"] is None, proc.stderr
    tput = result["throughput"]
    assert len(tput["reference"]) == len(tput["candidate"]) == 4
    assert tput["change"] == "lower" and tput["high"] < 1.0, proc.stdout
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "candidate slower, as it must; it gates no upgrade" in proc.stdout, proc.stdout
    # Each record says whether its run ran under the test tool (floors and gates refuse those).
    slowed = {side: {r.test_slowdown for r in read_jsonl(records / f"{side}.jsonl")}
              for side in SIDES}  # fmt: skip
    assert slowed == {"reference": {None}, "candidate": {f"RACEGATE_TEST_SLOWDOWN={SLOWDOWN}"}}
    pool = subprocess.run(
        [
            sys.executable,
            "-m",
            "racegate.harness.ab",
            "power",
            "--per-side",
            "2",
            "--reference",
            str(records / "reference.jsonl"),
            "--candidate",
            str(records / "candidate.jsonl"),
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert pool.returncode == 0, pool.stderr
    assert "A/A false alarms: " in pool.stdout and " of 2; candidate called slower: " in pool.stdout


@pytest.mark.timeout(1200)
@pytest.mark.process
def test_cpu_aa_is_no_significant_change(tmp_path: Path) -> None:
    """The same versions on both sides, 3 runs each, through the same driver: no call, exit 0.

    At 99%, not 95%: at this machine's noise an A/A alarm is then one suite run in 100."""
    proc, result = _ab(
        tmp_path, 3, "--confidence", "0.99", "--candidate-env", "RACEGATE_TEST_SLOWDOWN=0"
    )
    assert result["failure"] is None, proc.stderr
    assert result["throughput"]["change"] == "no significant change", proc.stdout
    assert result["memory"] is None and "not compared" in proc.stdout
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_result_lines_end_with_the_decision() -> None:
    ref = _samples("reference", [100.0, 101.0, 99.0])
    same = _samples("candidate", [100.0, 100.5, 99.5])
    slow = _samples("candidate", [90.0, 90.5, 89.5])
    # Two venvs: the same recorded versions, but no calibration (they may differ elsewhere).
    sides = {n: {"python": f"{n}/bin/python", "env": {}, "versions": {"torch": "2.11"}}
             for n in SIDES}  # fmt: skip
    for cand, word, gate in ((same, "no significant change", "passes"), (slow, "slower", "FAILS")):
        res = ABResult([], sides, [*ref, *cand])
        res.throughput, res.memory, res.memory_note = compare_samples(res.samples, 0.03, 0.95)
        assert res.lines()[-1] == f"A/B: candidate {word}, memory not compared: the gate {gate}"
        assert "the same package versions" in "\n".join(res.lines())
    mem_ref = [RunSample("reference", i, 100.0, 1000, {}, 1.0) for i in range(3)]
    mem_more = [RunSample("candidate", i, 100.0, 1200, {}, 1.0) for i in range(3)]
    res = ABResult([], sides, [*mem_ref, *mem_more])
    res.throughput, res.memory, res.memory_note = compare_samples(res.samples, 0.03, 0.95)
    assert res.failed and res.lines()[-1].endswith("more memory: the gate FAILS")
    failed = ABResult([], sides, failure="candidate run 1 of 3: outcome hang")
    assert failed.failed and failed.lines()[-1].startswith("A/B FAILED: candidate run 1")


def _result(sides: dict[str, dict], cand: list[float]) -> ABResult:
    res = ABResult([], sides, [*_samples("reference", [100.0, 101.0, 99.0]),
                                  *_samples("candidate", cand)])  # fmt: skip
    res.throughput, res.memory, res.memory_note = compare_samples(res.samples, 0.03, 0.95)
    return res


SAME, SLOW = [100.0, 100.5, 99.5], [95.0, 95.5, 94.5]  # no change; 5% slower


def _sides(ref_env: dict, cand_env: dict, cand_python: str = "py", cand_tf: str = "5.6.0") -> dict:
    return {
        "reference": {"python": "py", "env": ref_env, "versions": {"transformers": "5.6.0"}},
        "candidate": {"python": cand_python, "env": cand_env,
                      "versions": {"transformers": cand_tf}},
    }  # fmt: skip


def test_a_calibration_passes_when_it_comes_out_as_it_must_and_gates_no_upgrade() -> None:
    """One python, the same versions: the candidate under the test slowdown must be called
    slower (then it passes: before, its own catch failed it), an A/A must call no change."""
    slowed = {TEST_SLOWDOWN_ENV: "0.05"}
    caught = _result(_sides({}, slowed), SLOW)
    assert caught.calibration == f"injected slowdown ({TEST_SLOWDOWN_ENV}=0.05)"
    assert caught.as_calibrated and not caught.failed and caught.why_failed is None
    assert caught.lines()[-1] == (
        f"A/B calibration, injected slowdown ({TEST_SLOWDOWN_ENV}=0.05): candidate slower, "
        "as it must; it gates no upgrade"
    )
    missed = _result(_sides({}, slowed), SAME)
    assert missed.failed and "the slowdown was not caught" in (missed.why_failed or "")
    aa = _result(_sides({}, {TEST_SLOWDOWN_ENV: "0"}), SAME)  # a zero slowdown is none
    assert aa.calibration == AA and not aa.failed
    alarm = _result(_sides({}, {}), SLOW)
    assert alarm.calibration == AA and alarm.failed
    assert "A/A: a false alarm: tokens_per_s: 0.95" in (alarm.why_failed or "")


@pytest.mark.parametrize(
    ("sides", "who"),
    [
        (_sides({}, {TEST_SLOWDOWN_ENV: "0.05"}, cand_tf="5.8.1"), "candidate"),  # versions
        (_sides({}, {TEST_SLOWDOWN_ENV: "0.05"}, cand_python="venv/bin/python"), "candidate"),
        (_sides({TEST_SLOWDOWN_ENV: "0.05"}, {}), "reference"),  # the reference slowed
        (_sides({}, {TEST_SLOWDOWN_ENV: "fast"}, cand_tf="5.8.1"), "candidate"),  # unreadable
    ],
)
def test_the_test_slowdown_in_a_comparison_that_gates_fails_it(sides: dict, who: str) -> None:
    """A side under the test tool where no calibration is made: no gate rests on its runs,
    whatever they measured (no change here)."""
    res = _result(sides, SAME)
    assert res.calibration is None and res.failed
    assert (res.why_failed or "").startswith(f"the {who} ran under {TEST_SLOWDOWN_ENV}=")
    assert res.lines()[-1].startswith(f"A/B FAILED: the {who} ran under")


def test_two_venvs_of_the_same_versions_gate_not_calibrate() -> None:
    """The same recorded versions from two interpreters is a comparison that gates: a 5% drop
    fails it (a venv can differ in packages no record names)."""
    res = _result(_sides({}, {}, cand_python="venv/bin/python"), SLOW)
    assert res.calibration is None and res.failed and "slower" in (res.why_failed or "")


def _argv_of_one_run(tmp_path: Path, run_args: list[str]) -> list[str]:
    """The argv run_once gives `harness run`, from a stand-in python that records it (and
    fails, so no record is expected)."""
    argv = tmp_path / "argv"
    fake = tmp_path / "python"
    fake.write_text(f'#!/bin/sh\nprintf "%s\\n" "$@" > {argv}\nexit 3\n')
    fake.chmod(0o700)
    with pytest.raises(ValueError, match="exited 3"):
        run_once(Side("candidate", str(fake)), run_args, tmp_path / "r.jsonl", 30)
    return argv.read_text().split("\n")


@pytest.mark.process
def test_each_run_is_one_run_whatever_the_device(tmp_path: Path) -> None:
    """`harness run` repeats each scenario 3 times on a GPU by default: ab asks for one."""
    args = _argv_of_one_run(tmp_path, ["--devices", "0"])
    assert args[:5] == ["-m", "racegate", "run", "--devices", "0"]
    assert args[args.index("--repeat") + 1] == "1"
    assert args[args.index("--cache-states") + 1] == "cold"  # not all three states of a GPU


@pytest.mark.process
def test_a_cache_state_the_user_names_is_kept(tmp_path: Path) -> None:
    args = _argv_of_one_run(tmp_path, ["--cache-states=warm"])
    assert "--cache-states=warm" in args and "cold" not in args


@pytest.mark.parametrize(
    "args",
    [
        ["--cache-states", "cold,warm"],
        ["--strategies=warmup,per_device"],
        ["--threads-per-device", "1,2"],
    ],
)
def test_a_list_option_with_more_than_one_value_is_refused(args: list[str]) -> None:
    with pytest.raises(ValueError, match="takes one value"):
        check_run_args(["--preset", "tiny", *args])


@pytest.mark.timeout(900)
@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
@pytest.mark.process
def test_an_interrupted_ab_makes_no_call_and_shows_the_runs_it_made(
    tmp_path: Path, signum: int
) -> None:
    """A real SIGINT (what `timeout -s INT` sends nox's children) or SIGTERM (what nox sends
    after it) after two runs a side: no traceback, no call (exit 130, as `racegate upgrade`),
    and the four runs made are compared and kept in ab.json."""
    records, out = tmp_path / "records", tmp_path / "ab.json"
    command = [
        sys.executable,
        "-m",
        "racegate.harness.ab",
        "compare",
        "--candidate",
        sys.executable,
    ]
    command += ["--runs", "3", "--records", str(records), "--out", str(out), *ONE_THREAD]
    proc = subprocess.Popen(
        [*command, "--", *RUN_ARGS],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )

    def made() -> int:
        return sum(
            len((records / f"{side}.jsonl").read_text().splitlines())
            for side in SIDES
            if (records / f"{side}.jsonl").exists()
        )

    deadline = time.monotonic() + 800
    while made() < 4 and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.2)
    assert made() == 4 and proc.poll() is None, "the A/B ended before its fifth run"
    time.sleep(1.0)  # the fifth run is in flight (a run takes seconds to import torch)
    proc.send_signal(signum)
    stdout, stderr = proc.communicate(timeout=60)
    assert proc.returncode == EXIT_INTERRUPTED == 130, stdout + stderr
    assert "Traceback" not in stderr, stderr
    assert "A/B INTERRUPTED: interrupted after 4 of 6 runs (reference 2, candidate 2)" in stdout
    result = json.loads(out.read_text())
    assert result["failure"].startswith("interrupted after 4 of 6 runs"), result
    assert result["interrupted"] is True  # what racegate upgrade ends with 130 on
    assert len(result["throughput"]["reference"]) == len(result["throughput"]["candidate"]) == 2
    assert made() == 4  # the run in flight was stopped, not finished


# ---- memory per device and its growth, from real records ------------------------------------
# Six clean runs of `small` on two H200s (one thread per device, a steady series of 8 peaks per
# device, growth 0): alternately the reference's and the candidate's.
# (the first six records of results/h200x2-warmup-races's call1/stress.jsonl)
TWO_GPU_RUNS = REPO / "tests/data/two_h200_small_runs.jsonl"
GIB = 2**30


def _two_gpu_ab(candidate: Any = None) -> ABResult:
    """An A/B of the real records, its calls made as run_ab makes them; `candidate` edits each
    candidate record (a RunRecord -> RunRecord)."""
    runs = read_jsonl(TWO_GPU_RUNS)[:6]
    samples = []
    for i, record in enumerate(runs):
        side = SIDES[i % 2]
        if side == "candidate" and candidate is not None:
            record = candidate(record)
        samples.append(sample_of(record, side, i))
    sides = {s: {"python": f"{s}/bin/python", "env": {}, "versions": runs[0].versions.to_json()}
             for s in SIDES}  # fmt: skip
    result = ABResult(["--preset", "small"], sides, samples)
    result.throughput, result.memory, result.memory_note = compare_samples(samples, 0.03, 0.95)
    return result


def _peaks(cuda0: float, cuda1: float) -> Any:
    """A candidate whose steady peaks are scaled on each device (a flat series still)."""

    def edit(record: RunRecord) -> RunRecord:
        scale = {"cuda:0": cuda0, "cuda:1": cuda1}
        series = {d: [int(b * scale[d]) for b in s] for d, s in record.mem_series.items()}
        return dataclasses.replace(
            record, mem_series=series, peak_mem_bytes={d: max(s) for d, s in series.items()}
        )

    return edit


def test_the_ab_compares_each_device_and_shows_its_peak_and_growth() -> None:
    same = _two_gpu_ab()
    assert not same.failed and [d.device for d in same.device_memory] == ["cuda:0", "cuda:1"]
    text = "\n".join(same.lines())
    assert "peak_mem_bytes on cuda:1: 1.000x [1.000, 1.000] (2.94 → 2.94 GiB median" in text
    assert "mem_growth on cuda:0: +0.00% → +0.00% over steady steps (median of 3 vs 3" in text


def test_a_device_whose_peak_grew_fails_the_ab_though_the_sum_did_not() -> None:
    """cuda:1 +25%, cuda:0 −20%: the summed peak moves +2.5%, inside the 3% tolerance (what
    the A/B compared alone before), but one device now needs a quarter more memory."""
    moved = _two_gpu_ab(_peaks(0.8, 1.25))
    assert moved.memory is not None and moved.memory.change is Change.NONE  # the sum: no call
    assert moved.failed
    why = moved.why_failed or ""
    assert why.startswith("peak_mem_bytes on cuda:1: 1.250x [1.250, 1.250] (2.94 → 3.67 GiB")
    assert why.endswith("): more memory") and "cuda:0" not in why, why
    assert moved.lines()[-1].endswith("more memory or growth on cuda:1: the gate FAILS")


def _leaking(device: str, growth: float) -> Any:
    """A candidate whose steady peak on `device` climbs by `growth` over its steps, to the
    same peak as before (a leak the summed peak does not see)."""

    def edit(record: RunRecord) -> RunRecord:
        series = dict(record.mem_series)
        top, n = series[device][-1], len(series[device])
        series[device] = [int(top / (1 + growth * (n - 1 - k) / (n - 1))) for k in range(n)]
        return dataclasses.replace(record, mem_series=series, mem_growth=growth)

    return edit


def test_memory_that_grows_over_the_steps_fails_the_ab_with_its_device() -> None:
    leak = _two_gpu_ab(_leaking("cuda:0", 0.05))
    assert leak.memory is not None and leak.memory.change is Change.NONE  # the same peak
    assert leak.failed
    assert (leak.why_failed or "") == (
        "mem_growth on cuda:0: +0.00% → +5.00% over steady steps (median of 3 vs 3 runs; "
        "+5.00% points, limit +2%): grows (a leak)"
    )
    within = _two_gpu_ab(_leaking("cuda:1", 0.01))  # inside the gate's 2% flatness limit
    assert not within.failed and "+1.00% points" in "\n".join(within.lines())


def test_device_memory_survives_the_file_and_a_doctored_call_is_refused(tmp_path: Path) -> None:
    """ab.json keeps each run's per-device peaks and growths; read_ab makes the calls again
    from them, and a stored per-device call that disagrees fails closed. An ab.json from
    before (no per-device numbers) reads with none."""
    leak = _two_gpu_ab(_leaking("cuda:0", 0.05))
    path = tmp_path / "cell" / "ab.json"  # write_ab makes the folder, as compare --out does
    write_ab(path, leak)
    back = read_ab(path)
    assert back.failed and back.why_failed == leak.why_failed
    data = json.loads(path.read_text())
    data["device_memory"][0]["regressed"] = False
    path.write_text(json.dumps(data))
    with pytest.raises(checked.GateInputError, match="device_memory calls are"):
        read_ab(path)
    # An 8B A/B written before device memory was compared (results/h200-ab-8b-5.17.0).
    old = read_ab(REPO / "tests/data/ab_8b_before_device_memory.json")
    assert old.device_memory == [] and not old.failed


def test_an_interrupted_ab_reads_back_as_interrupted_and_a_bad_flag_is_refused(
    tmp_path: Path,
) -> None:
    """ab.json's `interrupted` survives the file (the report reads such an A/B as no call,
    not a failed one); a flag that is no boolean, or one without the failure that says after
    how many runs, fails closed. An ab.json from before the flag was kept reads as not."""
    path = tmp_path / "ab.json"
    cut = ABResult(["--preset", "tiny"], {s: {"python": "py", "env": {}} for s in SIDES})
    cut.failure, cut.interrupted = "interrupted after 1 of 6 runs (reference 1); no call", True
    write_ab(path, cut)
    back = read_ab(path)
    assert back.interrupted and back.failed and back.failure == cut.failure
    assert "A/B INTERRUPTED: interrupted after 1 of 6 runs" in "\n".join(back.lines())
    data = json.loads(path.read_text())
    for bad, match in (("yes", "interrupted is 'yes'; expected true or false"),
                       (True, "interrupted is true but no failure says")):  # fmt: skip
        path.write_text(json.dumps({**data, "interrupted": bad, "failure": None if bad is True
                                    else data["failure"]}))  # fmt: skip
        with pytest.raises(checked.GateInputError, match=match):
            read_ab(path)
    assert not read_ab(REPO / "tests/data/ab_8b_before_device_memory.json").interrupted


@pytest.mark.process  # one real `harness run`
def test_an_ab_run_is_one_thread_unless_its_options_say_otherwise(tmp_path: Path) -> None:
    """`harness run` makes a run at 1 and one at 2 threads on a GPU (2 on a CPU) unless told:
    an A/B run given no thread count failed on one H100 ("exited 7 with 2 record(s)")."""
    from racegate.harness.ab.run import Side, run_once

    args = ["--preset", "tiny", "--steps", "4", "--warmup-steps", "1"]
    record = run_once(Side("reference", sys.executable), args, tmp_path / "run.jsonl", 600)
    assert record.scenario.threads_per_device == 1
