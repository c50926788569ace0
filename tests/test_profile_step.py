"""scripts/profile_step.py: the kernel-time split it reports, on the tiny preset on CPU."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parent.parent / "scripts" / "profile_step.py"


def _load():
    spec = importlib.util.spec_from_file_location("profile_step", SCRIPT)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_kernel_kinds() -> None:
    ps = _load()
    assert ps.kind_of("triton_tem_fused_flex_attention_backward_0") == "attention"
    assert ps.kind_of("aten::_scaled_dot_product_flash_attention_for_cpu") == "attention"
    assert ps.kind_of("sm90_xmma_gemm_bf16bf16_bf16f32") == "matmul"
    assert ps.kind_of("aten::mm") == "matmul"
    assert ps.kind_of("triton_poi_fused_add_mul_0") == "other"


@pytest.mark.process
def test_profile_of_a_tiny_cpu_step(tmp_path: Path) -> None:
    out = tmp_path / "prof.json"
    table = tmp_path / "prof.txt"
    args = ["--preset", "tiny", "--steps", "1", "--warmup", "1", "--out", str(out)]
    assert _load().main([*args, "--table", str(table)]) == 0
    text = table.read_text()  # torch.profiler's key_averages table, aten ops by self time
    assert text.startswith("racegate step (tiny, per_device)") and "Self CPU" in text
    assert "aten::mm" in text or "aten::addmm" in text
    summary = json.loads(out.read_text())
    kinds = summary["kernel_s_by_kind"]
    assert {"attention", "matmul"} <= set(kinds) and all(v > 0 for v in kinds.values())
    assert summary["tokens_per_s"] > 0 and summary["flops_per_s"] > 0
    assert summary["top_kernels"] and summary["kernel_s_total"] == sum(kinds.values())
