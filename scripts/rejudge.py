"""Re-judge every committed record under results/ with whichever racegate is on PYTHONPATH.

`scripts/rejudge.py judge RESULTS [FILES] > out.json` (FILES: a list of the paths to judge, as
`git ls-tree -r --name-only COMMIT results/` prints them): each records file (a *.jsonl, inside
a folder's data.tar.xz or records.jsonl.xz too) is read, its records grouped as the report
groups them (torch × transformers × device × production × control), and each group judged by
racegate.harness.judge.verdict.decide with that torch's probe table; the JSON says each
strategy's status, why, and how many runs of it were not_concurrent.
`scripts/rejudge.py table OLD.json NEW.json` prints the Markdown table of what changed.
"""

from __future__ import annotations

import json
import lzma
import sys
import tarfile
import tempfile
from collections import Counter, defaultdict
from pathlib import Path


def record_files(results: Path, scratch: Path) -> list[tuple[str, Path]]:
    """(name under results/, a readable path) for every records file, archives unpacked."""
    out = [(str(p.relative_to(results)), p) for p in sorted(results.rglob("*.jsonl"))]
    for n, xz in enumerate(sorted(results.rglob("*.xz"))):
        rel = str(xz.relative_to(results))
        if xz.name.endswith(".tar.xz"):
            into = scratch / f"a{n}"
            with tarfile.open(xz) as tar:
                tar.extractall(into, filter="data")
            out += [(f"{rel}:{p.relative_to(into)}", p) for p in sorted(into.rglob("*.jsonl"))]
        elif xz.name.endswith(".jsonl.xz"):
            plain = scratch / f"f{n}.jsonl"
            plain.write_bytes(lzma.decompress(xz.read_bytes()))
            out.append((rel, plain))
    return out


def judge(results: Path, only: set[str] | None = None) -> dict[str, object]:
    from racegate.harness.judge import probe_expectations
    from racegate.harness.judge.verdict import Calibration, cell_of, decide
    from racegate.harness.run.record import read_jsonl

    table = probe_expectations.load()
    out: dict[str, object] = {}
    with tempfile.TemporaryDirectory() as tmp:  # mkdtemp: private (0700), unpredictable
        for name, path in record_files(results, Path(tmp)):
            if only is not None and name.split(":")[0] not in only:
                continue  # not committed at the old commit
            try:
                records = read_jsonl(path, skip_torn=True)
            except ValueError as exc:
                out[name] = {"error": str(exc)[:200]}
                continue
            groups = defaultdict(list)
            for r in records:
                s = r.scenario
                prod = getattr(s, "production", None) or "warmup_locked"
                ctrl = getattr(s, "control", None) or "per_device"
                device = "cpu" if s.devices == ("cpu",) or "cpu" in s.devices else "cuda"
                key = (r.versions.torch, r.versions.transformers, device, prod, ctrl)
                groups[key].append(r)
            judged = {}
            for (torch, tf, device, prod, ctrl), rs in groups.items():
                probes = {}
                for e in {e.name for e in table}:
                    entry = probe_expectations.lookup(table, e, torch, device)
                    if entry is not None:
                        probes[e] = str(entry.verdict)
                v = decide(rs, production=prod, probes=probes, calibration=Calibration(ctrl))
                apart = Counter(r.scenario.strategy for r in rs if r.outcome == "not_concurrent")
                cells = defaultdict(set)
                for r in rs:
                    cells[r.scenario.strategy].add(cell_of(r))
                judged[f"torch {torch} · transformers {tf} · {device} · {prod}/{ctrl}"] = {
                    s.strategy: {
                        "status": str(s.status),
                        "why": s.why,
                        "runs": s.runs,
                        "not_concurrent": apart.get(s.strategy, 0),
                        "cells": sorted(cells.get(s.strategy, ())),
                    }
                    for s in v.strategies
                }
            out[name] = judged
    return out


def table(old: dict, new: dict) -> list[str]:
    lines = [
        "| records | group | strategy | cells | not_concurrent runs | old → new |",
        "|---|---|---|---|---|---|",
    ]
    same = changed = 0
    for name, groups in new.items():
        if name not in old:  # records added since the old commit: nothing to compare
            continue
        for group, strategies in (groups if isinstance(groups, dict) else {}).items():
            if "error" in strategies:
                continue
            for strategy, now in strategies.items():
                was = old.get(name, {}).get(group, {}).get(strategy, {}).get("status", "?")
                if was == now["status"]:
                    same += 1
                    continue
                changed += 1
                cells = ", ".join(now["cells"])
                lines.append(
                    f"| {name} | {group} | {strategy} | {cells} | {now['not_concurrent']} of "
                    f"{now['runs']} | {was} → {now['status']} |"
                )
    lines.append("")
    lines.append(f"{changed} strategy verdicts changed, {same} unchanged.")
    return lines


if __name__ == "__main__":
    if sys.argv[1] == "judge":
        only = None
        if len(sys.argv) > 3:  # `git ls-tree -r --name-only OLD results/`: those files only
            listed = Path(sys.argv[3]).read_text().split()
            only = {n.removeprefix("results/") for n in listed}
        json.dump(judge(Path(sys.argv[2]), only), sys.stdout, indent=1, sort_keys=True)
    else:
        old, new = (json.loads(Path(p).read_text()) for p in sys.argv[2:4])
        print("\n".join(table(old, new)))
