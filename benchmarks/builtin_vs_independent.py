"""Summarise one builtin_vs_independent.sh call: throughput, kernel time and memory side by side.

Reads the call's P-*.json (benchmarks/independent_dflash_step.py) and R-*.json
(benchmarks/builtin_step.py) and prints markdown tables: each run's query tokens/s, MFU and
peak memory, its ratio to the independent step (the median of the plain P runs), the kernel
time by group per 8,192 query tokens (the first profiled P against the first profiled R), and
the memory lines. Writes summary.json beside them.

    python benchmarks/builtin_vs_independent.py DIR
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path
from typing import Any

GIB = 2**30


def _load(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text())


def _runs(w: Path) -> list[tuple[str, dict[str, Any]]]:
    order = sorted(w.glob("P-*.json")) + sorted(w.glob("R-*.json"))
    return [(p.stem, _load(p)) for p in order if not p.stem.endswith("-prof")]


def _gib(n: int | None) -> str:
    return "n/a" if n is None else f"{n / GIB:.1f}"


def summarise(w: Path) -> tuple[str, dict[str, Any]]:
    runs = _runs(w)
    plain = [r["query_tokens_per_s"] for tag, r in runs if tag in ("P-1", "P-2")]
    ref = statistics.median(plain) if plain else None
    lines = ["| run | what | K query tokens/s (windows) | ratio to independent | MFU | peak GiB |",
             "|---|---|---|---|---|---|"]  # fmt: skip
    rows = []
    for tag, r in runs:
        tps = r["query_tokens_per_s"]
        ratio = tps / ref if ref else None
        mfu = r.get("mfu")
        windows = ", ".join(f"{x / 1e3:.2f}" for x in r["window_tokens_per_s"])
        lines.append(
            f"| {tag} | {r['name']} | {tps / 1e3:.2f} ({windows}) | "
            f"{'n/a' if ratio is None else f'{ratio:.3f}x'} | "
            f"{'n/a' if mfu is None else f'{mfu:.1%}'} | {_gib(r.get('peak_mem_bytes'))} |"
        )
        rows.append({"tag": tag, "name": r["name"], "query_tokens_per_s": tps,
                     "window_tokens_per_s": r["window_tokens_per_s"], "ratio": ratio,
                     "mfu": mfu, "peak_mem_bytes": r.get("peak_mem_bytes"),
                     "memory": r.get("memory", {})})  # fmt: skip
    out = {"independent_tokens_per_s": ref, "runs": rows}
    profs = {p.stem.removesuffix("-prof"): _load(p) for p in sorted(w.glob("*-prof.json"))}
    if profs:
        groups = sorted({g for p in profs.values() for g in p["kernel_ms_by_group"]})
        tags = list(profs)
        head = "| group | " + " | ".join(tags) + " |"
        lines += ["", "Kernel time by group, ms per 8,192 query tokens:", "", head]
        lines.append("|---" * (len(tags) + 1) + "|")
        for g in [*groups, "total"]:
            vals = [
                p["kernel_ms"] if g == "total" else p["kernel_ms_by_group"].get(g, 0.0)
                for p in profs.values()
            ]
            lines.append(f"| {g} | " + " | ".join(f"{v:.2f}" for v in vals) + " |")
        for tag, p in profs.items():
            regions = ", ".join(f"{k} {v:.2f} ms" for k, v in p.get("region_ms", {}).items())
            lines.append(f"\n{tag} regions (device time, same unit): {regions or 'none'}")
        out["profiles"] = profs
    mem_tags = [tag for tag, r in runs if r.get("memory")]
    if mem_tags:
        names = list(dict.fromkeys(k for _, r in runs for k in r.get("memory", {})))
        by_tag = dict(runs)
        lines += ["", "Memory, GiB:", "", "| line | " + " | ".join(mem_tags) + " |",
                  "|---" * (len(mem_tags) + 1) + "|"]  # fmt: skip
        for n in [*names, "peak (max_memory_allocated)"]:
            vals = [
                by_tag[t].get("peak_mem_bytes") if n.startswith("peak (")
                else by_tag[t]["memory"].get(n) for t in mem_tags
            ]  # fmt: skip
            lines.append(
                f"| {n} | " + " | ".join("-" if v is None else _gib(v) for v in vals) + " |"
            )
    return "\n".join(lines), out


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1 or not Path(args[0]).is_dir():
        print(f"builtin_vs_independent: {args!r}: allowed: one directory", file=sys.stderr)
        return 2
    w = Path(args[0])
    text, data = summarise(w)
    (w / "summary.json").write_text(json.dumps(data, indent=1) + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
