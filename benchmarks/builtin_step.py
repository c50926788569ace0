"""racegate's built-in DFlash step, timed, profiled and its memory accounted as the independent one.

One replica of a preset (default `qwen3-8b-drafter`) under a strategy (default
`warmup_locked`), stepped from this one thread, as `harness run --threads-per-device 1` steps
it: every bucket once (the compile), `fail_on_recompile`, then `--warmup` steps and the
median of `--windows` windows of `--window-steps` steps on the steady bucket, each window timed
with CUDA events. A step here is the preset's whole token budget (16 sequences of 3,072 for
the 8B), so its windows are shorter in steps than benchmarks/independent_dflash_step.py's and
its profile is set per 8,192 query tokens (one independent step). tokens/s, MFU and FLOPs are
racegate's own (StepResult.tokens, racegate/model/flops.py); peak memory is max_memory_allocated
over the whole run, as the harness records it, with the resident lines accounted (`memory`).

    python benchmarks/builtin_step.py --json out.json --profile prof.json      # one GPU
    python benchmarks/builtin_step.py --preset tiny --device cpu               # CPU smoke test
    python benchmarks/builtin_step.py --set micro_batch_size=1                 # a config override
"""

from __future__ import annotations

import argparse
import ast
import json
import math
import statistics
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch
from torch.profiler import record_function

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import independent_dflash_step as ind  # noqa: E402  (timing, profile and memory helpers)

from racegate.model.workload import make_workload  # noqa: E402

REGIONS = ("inputs", "mask")  # record_function ranges put around the replica's methods
PER_TOKENS = 8192  # the profile's unit: one independent step's query tokens


def _annotate(obj: Any, attr: str, name: str) -> None:
    """Wrap obj.attr (a bound method) in a profiler range, on this instance only."""
    fn: Callable[..., Any] = getattr(obj, attr)

    def wrapped(*args: Any, **kwargs: Any) -> Any:
        with record_function(name):
            return fn(*args, **kwargs)

    setattr(obj, attr, wrapped)


def memory_lines(replica: Any) -> dict[str, int]:
    """Bytes resident between steps on the replica's device, by what holds them."""
    device = replica.device
    params = list(replica.drafter.parameters())
    frozen = [replica.frozen.embed_tokens.weight, replica.frozen.lm_head.weight]
    lines = {
        "drafter parameters": ind.tensor_bytes(params),
        "gradients (while they exist)": sum(p.numel() * p.element_size() for p in params),
        "optimizer state": ind.optimizer_state_bytes(replica.optimizer),
        "frozen embedding + lm_head": ind.tensor_bytes(frozen),
    }
    target = getattr(replica, "target", None)  # let go once its hidden states are cached
    on_device = [p for p in target.model.parameters() if p.device == device] if target else []
    frozen_ptrs = {t.untyped_storage().data_ptr() for t in frozen}
    rest = [p for p in on_device if p.untyped_storage().data_ptr() not in frozen_ptrs]
    lines["target decoder layers (on the drafter's device)"] = ind.tensor_bytes(rest)
    cached = getattr(replica, "_cached", {})
    by_bucket: dict[int, list[torch.Tensor]] = {}
    for (bucket, _micro), inputs in cached.items():
        by_bucket.setdefault(bucket, []).extend(
            t for t in inputs if isinstance(t, torch.Tensor) and t.device == device
        )
    for bucket, tensors in sorted(by_bucket.items()):
        lines[f"cached inputs + target hidden states, bucket {bucket}"] = ind.tensor_bytes(tensors)
    return lines


def run(args: argparse.Namespace) -> dict[str, Any]:
    """The timed run; the compiler's stance is back to default afterwards (it is process-wide)."""
    try:
        return _run(args)
    finally:
        torch.compiler.set_stance("default")


def _run(args: argparse.Namespace) -> dict[str, Any]:
    device = torch.device(args.device or ("cuda:0" if torch.cuda.is_available() else "cpu"))
    cuda = device.type == "cuda"
    if cuda:
        torch.cuda.set_device(device)
        torch.cuda.reset_peak_memory_stats(device)
    workload = make_workload(args.preset, **dict(args.set))
    replica = workload.make_replica(device, args.strategy, seed=0)
    built = torch.cuda.memory_allocated(device) if cuda else None
    for name, attr in (("inputs", "_step_inputs"), ("mask", "_mask")):
        _annotate(replica, attr, name)
    shapes = list(workload.shapes())
    for shape in shapes:  # racegate.harness.run.worker.warm_up: every bucket once, one thread
        replica.step(shape)
    if cuda:
        torch.cuda.synchronize(device)
    torch.compiler.set_stance("fail_on_recompile")
    steady = shapes[0]
    tokens: list[int] = []
    losses: list[float] = []

    def one_step() -> None:
        res = replica.step(steady)
        tokens.append(res.tokens)
        losses.append(res.loss)

    window_s = ind.timed_windows(one_step, args.warmup, args.windows, args.window_steps, cuda)
    step_tokens = statistics.median(tokens[args.warmup :])
    per_window = [step_tokens * args.window_steps / w for w in window_s]
    tps = statistics.median(per_window)
    flops = workload.flops_per_step(steady) or 0.0
    name = torch.cuda.get_device_name(device) if cuda else "cpu"
    peak = torch.cuda.max_memory_allocated(device) if cuda else None
    memory = memory_lines(replica)
    if peak is not None:
        memory["activations and transients (peak - the lines above)"] = peak - sum(memory.values())
    bucket = workload.buckets[steady]
    out: dict[str, Any] = {
        "name": f"builtin {args.preset} {args.strategy}"
        + "".join(f" {k}={v!r}" for k, v in args.set),
        "device": name,
        "preset": args.preset,
        "strategy": args.strategy,
        "overrides": dict(args.set),
        "bucket": {
            "seq_len": bucket.seq_len,
            "batch_size": bucket.batch_size,
            "micro_batches": bucket.micro_batches,
            "num_anchors": bucket.num_anchors,
        },
        "warmup": args.warmup,
        "window_steps": args.window_steps,
        "window_s": window_s,
        "query_tokens_per_step": step_tokens,
        "window_tokens_per_s": per_window,
        "query_tokens_per_s": tps,
        "median_step_ms": step_tokens / tps * 1e3,
        "flops_per_step": flops,
        "mfu": flops * tps / step_tokens / ind.PEAK_FLOPS if cuda and "H200" in name else None,
        "peak_mem_bytes": peak,
        "allocated_after_build_bytes": built,
        "memory": memory,
        "final_loss": losses[-1],
        "torch": torch.__version__,
    }
    if args.profile:
        if cuda:
            torch.cuda.synchronize(device)
            before = torch.cuda.memory_allocated(device)
            torch.cuda.reset_peak_memory_stats(device)
        out["profile"] = ind.profile_steps(
            one_step, args.profile_steps, cuda, out["name"], args.profile.with_suffix(".txt"),
            per=step_tokens / PER_TOKENS, regions=REGIONS,
        )  # fmt: skip
        if cuda:  # a steady step's rise over what sits resident between steps
            out["steady_step_rise_bytes"] = torch.cuda.max_memory_allocated(device) - before
            out["resident_between_steps_bytes"] = before
    return out


def _override(text: str) -> tuple[str, Any]:
    key, sep, value = text.partition("=")
    if not sep:
        raise argparse.ArgumentTypeError(f"--set {text!r}: allowed: FIELD=VALUE")
    try:
        return key, ast.literal_eval(value)
    except (ValueError, SyntaxError):
        return key, value


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="benchmarks/builtin_step.py", description=__doc__.split("\n")[0]
    )
    p.add_argument("--preset", default="qwen3-8b-drafter")
    p.add_argument("--strategy", default="warmup_locked")
    p.add_argument("--device", default=None, help="default: cuda:0 if available, else cpu")
    p.add_argument("--set", type=_override, action="append", default=[], metavar="FIELD=VALUE",
                   help="a DrafterConfig override (repeatable)")  # fmt: skip
    p.add_argument("--warmup", type=int, default=1, help="steady warm-up steps (default: 1)")
    p.add_argument("--windows", type=int, default=3, help="(default: %(default)s)")
    p.add_argument("--window-steps", type=int, default=1, help="(default: %(default)s)")
    p.add_argument("--json", type=Path, default=None, help="write the result here")
    p.add_argument("--profile", type=Path, default=None,
                   help="profile more steps: groups to this JSON, the table to .txt")  # fmt: skip
    p.add_argument("--profile-steps", type=int, default=1, help="(default: %(default)s)")
    args = p.parse_args(argv)
    for name in ("warmup", "windows", "window_steps", "profile_steps"):
        value, low = getattr(args, name), 0 if name == "warmup" else 1
        if value < low:
            print(
                f"builtin_step: --{name.replace('_', '-')} {value} from the command line; "
                f"allowed: an integer >= {low}",
                file=sys.stderr,
            )
            return 2
    try:
        out = run(args)
    except ValueError as exc:  # a bad preset, strategy or override, named by racegate.model.config
        print(f"builtin_step: {exc}", file=sys.stderr)
        return 2
    mfu = f"{out['mfu']:.1%}" if out["mfu"] is not None else "n/a"
    peak = f"{out['peak_mem_bytes'] / ind.GIB:.1f} GiB" if out["peak_mem_bytes"] else "n/a"
    windows = ", ".join(f"{w / 1e3:.2f}" for w in out["window_tokens_per_s"])
    print(
        f"{out['name']} on {out['device']} (torch {out['torch']}): "
        f"{out['query_tokens_per_s'] / 1e3:.2f} K query tokens/s (windows {windows} K), "
        f"{out['median_step_ms']:.1f} ms/step, MFU {mfu}, peak {peak}, "
        f"loss {out['final_loss']:.3f}"
    )
    if args.profile and "profile" in out:
        args.profile.write_text(json.dumps(out["profile"], indent=2) + "\n")
    if args.json is not None:
        args.json.write_text(json.dumps(out, indent=2) + "\n")
    return 0 if math.isfinite(out["final_loss"]) and out["query_tokens_per_s"] > 0 else 1


if __name__ == "__main__":
    sys.exit(main())
