"""benchmarks/independent_dflash_step.py and builtin_step.py: the mask, and tiny CPU runs."""

from __future__ import annotations

import importlib.util
import json
import math
import sys
from pathlib import Path
from types import ModuleType

import pytest
import torch

from racegate.model.config import from_name

BENCH = Path(__file__).resolve().parents[1] / "benchmarks"


def _load(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, BENCH / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up here
    spec.loader.exec_module(module)
    return module


def test_mask_sees_context_strictly_before_the_anchor_and_its_own_block() -> None:
    ind = _load("independent_dflash_step")
    anchors = torch.tensor([3, 0])
    m = ind.dense_mask(ind.mask_mod_for(anchors, 8, 2), 4, 12, "cpu")[0, 0]
    seen = {q: [kv for kv in range(12) if m[q, kv]] for q in range(4)}
    assert seen[0] == seen[1] == [0, 1, 2, 8, 9]  # kv < 3 (not 3), and block 0 at 8..9
    assert seen[2] == seen[3] == [10, 11]  # anchor 0: no context, its own block only
    assert ind.visible_pairs(anchors, 2) == int(m.sum())


def test_tiny_cpu_step_reports_finite_tokens_per_s(tmp_path: Path) -> None:
    ind = _load("independent_dflash_step")
    out, prof = tmp_path / "ind.json", tmp_path / "prof.json"
    argv = ["--tiny", "--device", "cpu", "--warmup", "1", "--window-steps", "1"]
    assert ind.main([*argv, "--json", str(out), "--profile", str(prof)]) == 0
    res = json.loads(out.read_text())
    assert res["name"] == "independent" and not res["rope_qk_norm"]
    assert len(res["window_s"]) == 3 and all(w > 0 for w in res["window_s"])
    assert math.isfinite(res["query_tokens_per_s"]) and res["query_tokens_per_s"] > 0
    assert res["query_tokens_per_step"] == 12 * 8 and math.isfinite(res["final_loss"])
    assert res["mfu"] is None and res["peak_mem_bytes"] is None  # no GPU claims off a GPU
    params = res["memory"]["drafter parameters"]
    assert 0 < 2 * params <= res["memory"]["optimizer state"] < 2 * params + 1024  # + steps
    groups = json.loads(prof.read_text())["kernel_ms_by_group"]
    assert groups["matmul"] > 0 and "Self CPU" in prof.with_suffix(".txt").read_text()


def test_rope_qk_norm_adds_the_per_head_norms() -> None:
    ind = _load("independent_dflash_step")
    plain = sum(p.numel() for p in ind.Drafter(ind.TINY, False).parameters())
    full = sum(p.numel() for p in ind.Drafter(ind.TINY, True).parameters())
    assert full - plain == ind.TINY.layers * 2 * ind.TINY.head_dim


def test_bad_window_count_exits_2(capsys) -> None:
    ind = _load("independent_dflash_step")
    assert ind.main(["--tiny", "--windows", "0"]) == 2
    assert "--windows 0" in capsys.readouterr().err


@pytest.mark.process
def test_builtin_tiny_cpu_step_accounts_its_memory(tmp_path: Path) -> None:
    bs = _load("builtin_step")
    out = tmp_path / "builtin.json"
    argv = ["--preset", "tiny", "--device", "cpu", "--warmup", "0", "--json", str(out)]
    assert bs.main(argv) == 0
    res = json.loads(out.read_text())
    assert math.isfinite(res["query_tokens_per_s"]) and res["query_tokens_per_s"] > 0
    mem = res["memory"]
    assert mem["drafter parameters"] > 0 and mem["optimizer state"] > 0
    cached = [k for k in mem if k.startswith("cached inputs")]
    # tiny's buckets, each stepped once in the warm-up
    assert len(cached) == len(from_name("tiny").seq_buckets)


def test_builtin_bad_override_exits_2(capsys) -> None:
    bs = _load("builtin_step")
    assert bs.main(["--preset", "tiny", "--device", "cpu", "--set", "no_such_field=1"]) == 2
    assert "no_such_field" in capsys.readouterr().err


def test_kernel_groups_keep_compiled_kernels_and_drop_torch_ranges() -> None:
    ind = _load("independent_dflash_step")
    assert ind.kernel_group("triton_tem_fused_flex_attention_backward_1") == "flex bwd"
    assert ind.kernel_group("triton_tem_fused_flex_attention_0") == "flex fwd"
    assert ind.kernel_group("nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_NNT") == "matmul"
    assert ind.RANGE.match("Optimizer.step#AdamW.step") and ind.RANGE.match("ProfilerStep#2")
    assert not ind.RANGE.match("triton_tem_fused_flex_attention_0")
