"""benchmarks/summarise_21.py: issue 21's tables from the evidence script's folders."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from types import ModuleType

from harness.judge.compare import compare
from harness.record import RunRecord, ThreadRecord, append_jsonl
from harness.scenario import Scenario

PATH = Path(__file__).resolve().parents[1] / "benchmarks" / "summarise_21.py"


def _load() -> ModuleType:
    spec = importlib.util.spec_from_file_location("summarise_21", PATH)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _record(preset: str, strategy: str, tps: float | None, outcome: str = "ok") -> RunRecord:
    sc = Scenario(preset=preset, strategy=strategy, threads_per_device=2)
    steps = sc.warmup_steps + sc.steps
    threads = [ThreadRecord(i, "cpu", outcome, steps_done=steps) for i in range(2)]
    return RunRecord(
        scenario=sc.to_json(), outcome=outcome, outcome_counts={outcome: 2}, threads=threads,
        threads_asked=2, threads_concurrent=2, versions={"torch": "2.11.0"}, hardware={},
        tokens_per_s=tps, peak_mem_bytes={"cuda:0": 2 * 2**30} if tps else {}, wall_s=30.0,
    )  # fmt: skip


def test_tables_from_two_calls(tmp_path: Path, capsys) -> None:
    one, two = tmp_path / "call1", tmp_path / "call2"
    (one / "a-step").mkdir(parents=True)
    for i, tps in enumerate((50_000.0, 49_000.0, 51_000.0), 1):
        (one / "a-step" / f"plain-{i}.json").write_text(
            json.dumps({"query_tokens_per_s": tps, "mfu": 0.64, "peak_mem_bytes": 2**34})
        )
    (one / "a-step" / "profile-plain.txt").write_text("table\n")
    for tps in (44_000.0, 43_000.0, 45_000.0):
        append_jsonl(
            one / "a-step" / "racegate.jsonl", _record("qwen3-8b-drafter", "warmup_locked", tps)
        )
    append_jsonl(
        one / "a-step" / "racegate.jsonl",
        _record("qwen3-8b-drafter", "warmup_locked", None, "hang"),
    )
    for call, rates in ((one, (200e3, 196e3, 234e3)), (two, (210e3, 190e3, 250e3))):
        (call / "b-strategy").mkdir(parents=True)
        for s, tps in zip(("warmup_locked", "warmup", "processes"), rates, strict=True):
            append_jsonl(call / "b-strategy" / "small.jsonl", _record("small", s, tps))
        pool = call / "c-ab-power" / "small"
        pool.mkdir(parents=True)
        for k in range(4):  # A/A pools of 4 runs each: one A/A comparison per side per call
            append_jsonl(pool / "reference.jsonl", _record("small", "warmup_locked", 100e3 + k))
            append_jsonl(pool / "candidate.jsonl", _record("small", "warmup_locked", 80e3 + k))
    assert _load().main([str(one), str(two)]) == 0
    text = capsys.readouterr().out
    # a: medians 50 K and 44 K, the failed run counted and left out.
    assert "| plain | 3 | 50.00 K, 49.00 K, 51.00 K | 50.00 K | 64.0% | 16.0 GiB |" in text
    assert "| racegate | 3 (1 failed) |" in text and "ratio of medians: **0.880×**" in text
    assert "profile of the plain step: a-step/profile-plain.txt" in text
    assert "profile of the racegate step: not taken" in text
    # b: both calls' runs, medians against warmup_locked's (205 K).
    assert "| warmup | 2 (0) | 196.00 K, 190.00 K | 193.00 K | 0.941× |" in text
    assert "| processes | 2 (0) | 234.00 K, 250.00 K | 242.00 K | 1.180× |" in text
    # ... each with the one comparison's interval and call, and the peak memory on the GPU.
    c = compare([200e3, 210e3], [234e3, 250e3])
    assert f"| 1.180× | [{c.low:.3f}, {c.high:.3f}], {c.word} | 2.0 GiB |" in text
    assert (
        "| warmup_locked | 2 (0) | 200.00 K, 210.00 K | 205.00 K | 1.000× | — | 2.0 GiB |" in text
    )
    # c: the pools of both calls concatenated: 8 + 8 runs, 4 A/A comparisons, a 20% slowdown
    # called slower in all 4 A/B comparisons; one comparison is 4 runs of 30 s.
    assert "| `small` | 8 + 8 |" in text
    assert "| 0 of 4 | 4 of 4 |" in text and "| 2.0 min |" in text
    row = next(line for line in text.splitlines() if line.startswith("| `small` |"))
    assert row.split(" | ")[5].isdigit(), row  # runs per side that power says a 5% needs


def test_a_failed_run_in_a_pool_is_named_not_used(tmp_path: Path, capsys) -> None:
    pool = tmp_path / "c-ab-power" / "small"
    pool.mkdir(parents=True)
    for k in range(4):
        append_jsonl(pool / "reference.jsonl", _record("small", "warmup_locked", 100e3 + k))
        append_jsonl(pool / "candidate.jsonl", _record("small", "warmup_locked", 80e3 + k))
    append_jsonl(pool / "candidate.jsonl", _record("small", "warmup_locked", None, "hang"))
    assert _load().main([str(tmp_path)]) == 0
    row = next(line for line in capsys.readouterr().out.splitlines() if "`small`" in line)
    assert "power failed:" in row and "candidate.jsonl record 5: outcome hang" in row, row


def test_empty_and_missing_folders(tmp_path: Path, capsys) -> None:
    assert _load().main([str(tmp_path)]) == 0
    text = capsys.readouterr().out
    assert text.count("Not run:") == 3
    assert _load().main([str(tmp_path / "nope")]) == 2
    assert "is not a folder" in capsys.readouterr().err
    assert _load().main([]) == 2
