"""Where a train step's device time goes: torch.profiler over steady steps, kernels by kind.

Answers "what limits MFU" for a preset with the profiler instead of a guess: one
replica, `--warmup` steps to compile, then `--steps` profiled steps; kernel time is summed per
kind (attention, matrix products, everything else) and set against the analytic FLOPs.

    python scripts/profile_step.py --preset qwen3-8b-drafter --device cuda:0 --out prof.json

On CPU (`--device cpu`, `tiny`) it runs the same code on CPU ops, which is how it is tested.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from pathlib import Path

import torch
from torch.autograd import DeviceType
from torch.profiler import ProfilerActivity, profile

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from racegate.harness.run.threads import sync_device
from racegate.model.workload import make_workload

# Kernel-name patterns per kind (CUDA kernel names, or aten op names on CPU).
KINDS = {
    "attention": re.compile(r"flex|triton_tem_fused|scaled_dot_product", re.I),
    "matmul": re.compile(r"gemm|sm90_xmma|cutlass|nvjet|aten::(mm|addmm|bmm|matmul|linear)", re.I),
}


def kind_of(name: str) -> str:
    return next((k for k, pattern in KINDS.items() if pattern.search(name)), "other")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--preset", default="tiny")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--strategy", default="per_device")
    ap.add_argument("--warmup", type=int, default=2, help="unprofiled steps (compile)")
    ap.add_argument("--steps", type=int, default=3, help="profiled steps")
    ap.add_argument("--out", type=Path, default=None, help="write the summary as JSON here")
    ap.add_argument(
        "--table", type=Path, default=None, help="write torch.profiler's key_averages table here"
    )
    args = ap.parse_args(argv)

    device = torch.device(args.device)
    workload = make_workload(args.preset)
    replica = workload.make_replica(device, args.strategy, seed=0)
    shape = workload.shapes()[0]
    for _ in range(args.warmup):
        replica.step(shape)
    on_cuda = device.type == "cuda"
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if on_cuda else [])
    sync_device(args.device)
    t0 = time.perf_counter()
    with profile(activities=activities) as prof:
        tokens = sum(replica.step(shape).tokens for _ in range(args.steps))
        sync_device(args.device)
    wall = time.perf_counter() - t0

    by_kind: dict[str, float] = {}
    top: list[tuple[float, str]] = []
    for event in prof.key_averages():
        # On CUDA only the kernels themselves (device_type CUDA): an aten op's device time is
        # its kernels' time again, so counting both would count each kernel twice. On CPU, the
        # aten ops' self time (a parent's total includes its children, listed too).
        if on_cuda:
            us = event.self_device_time_total if event.device_type == DeviceType.CUDA else 0.0
        else:
            us = event.self_cpu_time_total if event.key.startswith("aten::") else 0.0
        if us <= 0:
            continue
        kind = kind_of(event.key)
        by_kind[kind] = by_kind.get(kind, 0.0) + us / 1e6
        top.append((us / 1e6, event.key))
    flops = (workload.flops_per_step(shape) or 0.0) * args.steps
    summary = {
        "preset": args.preset,
        "device": str(device),
        "device_name": torch.cuda.get_device_name(device) if on_cuda else "cpu",
        "torch": torch.__version__,
        "steps": args.steps,
        "wall_s": wall,
        "tokens_per_s": tokens / wall,
        "flops_per_s": flops / wall,
        "kernel_s_by_kind": by_kind,
        "kernel_s_total": sum(by_kind.values()),
        "device_busy": sum(by_kind.values()) / wall if on_cuda else None,
        "top_kernels": [[round(s, 6), name[:120]] for s, name in sorted(top, reverse=True)[:15]],
    }
    if args.table:
        sort = "self_cuda_time_total" if on_cuda else "self_cpu_time_total"
        args.table.write_text(
            f"racegate step ({args.preset}, {args.strategy}), {args.steps} steps after "
            f"{args.warmup}, {summary['device_name']}, torch {torch.__version__}\n"
            f"{prof.key_averages().table(sort_by=sort, row_limit=40)}\n"
        )
    text = json.dumps(summary, indent=2)
    print(text)
    if args.out:
        args.out.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
