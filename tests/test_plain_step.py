"""benchmarks/plain_step.py: its DFlash mask, and a CPU smoke run at the tiny shape."""

from __future__ import annotations

import importlib.util
import json
import math
import sys
from pathlib import Path
from types import ModuleType

import torch

PATH = Path(__file__).resolve().parents[1] / "benchmarks" / "plain_step.py"


def _load() -> ModuleType:
    spec = importlib.util.spec_from_file_location("plain_step", PATH)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["plain_step"] = module  # dataclasses look their module up here
    spec.loader.exec_module(module)
    return module


def test_mask_context_strictly_before_anchor_own_block_and_invalid_sees_nothing() -> None:
    ps = _load()
    anchors, valid = torch.tensor([[3, 0]]), torch.tensor([[True, False]])
    mod = ps.mask_mod_for(anchors, valid, 8, 2)  # context 8, blocks of 2
    m = ps.dense_mask(mod, 1, 4, 12, "cpu")[0, 0]
    seen = {q: [kv for kv in range(12) if m[q, kv]] for q in range(4)}
    assert seen[0] == seen[1] == [0, 1, 2, 8, 9]  # kv < 3 (not 3), and block 0 at 8..9
    assert seen[2] == seen[3] == []  # block 1 is invalid


def test_visible_pairs_counts_the_mask() -> None:
    ps = _load()
    gen = torch.Generator().manual_seed(3)
    anchors = torch.randint(0, 57, (2, 6), generator=gen)  # context 64, blocks of 8
    valid = torch.rand(2, 6, generator=gen) > 0.3
    mask = ps.dense_mask(ps.mask_mod_for(anchors, valid, 64, 8), 2, 48, 64 + 48, "cpu")
    assert ps.visible_pairs(anchors, valid, 8) == int(mask.sum())


def test_tiny_cpu_step_runs_and_reports(tmp_path: Path) -> None:
    ps = _load()
    out = tmp_path / "plain.json"
    table = tmp_path / "plain-profile.txt"
    argv = ["--tiny", "--steps", "2", "--warmup", "1", "--json", str(out)]
    assert ps.main([*argv, "--profile-table", str(table), "--profile-steps", "1"]) == 0
    text = table.read_text()  # torch.profiler's key_averages table of one more step
    assert text.startswith("plain step, 1 steps after the timed ones") and "Self CPU" in text
    assert "aten::mm" in text or "aten::addmm" in text
    res = json.loads(out.read_text())
    assert res["attention"] == "dense sdpa" and res["steps"] == 2 and len(res["step_ms"]) == 2
    assert math.isfinite(res["final_loss"]) and res["query_tokens_per_s"] > 0
    assert res["mfu"] is None  # no MFU claimed off an H200
    # a query sees its own block (8) and a < 121 context keys, of 128 + 12 x 8 keys
    assert 8 / 224 < res["mask_density"] < (8 + 120) / 224
