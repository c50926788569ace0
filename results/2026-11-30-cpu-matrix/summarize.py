"""One line per (cell, strategy): run outcome, threads with it, pytest's verdict, error kind.

cd results/2026-11-30-cpu-matrix && ../../.venv/bin/python summarize.py cpu_matrix-*
"""

from __future__ import annotations

import json
import re
import sys
import xml.etree.ElementTree as ET
from pathlib import Path


def kind(text: str) -> str:
    if "have already been set in the current context" in text:
        return "MetricsContext"
    if "symbolically trace a dynamo-optimized function" in text:
        return "nested-FX"
    return text.strip().splitlines()[0][:80] if text.strip() else ""


def verdicts(junit: Path, logs: list[Path]) -> dict[str, str]:
    """pytest's verdict per test from junit.xml; XPASS (junit: a pass) from pytest's -ra lines."""
    xpass = {
        m[1]
        for log in logs
        for m in re.finditer(r"^XPASS \S+::(\S+)", log.read_text(errors="replace"), re.M)
    }
    out = {}
    for case in ET.parse(junit).iter("testcase"):
        name = case.get("name", "")
        tags = {c.tag: c for c in case}
        if "failure" in tags or "error" in tags:
            v = "FAILED"
        elif "skipped" in tags:
            v = "xfailed" if tags["skipped"].get("type") == "pytest.xfail" else "skipped"
        elif name in xpass:
            v = "XPASS"
        else:
            v = "passed"
        out[name] = v
    return out


def main(cells: list[str]) -> None:
    for cell in map(Path, cells):
        m = re.search(r"torch-([\d.]+)-transformers-([\d.]+)", cell.name)
        if not m or not (cell / "records.jsonl").is_file():
            continue
        logs = sorted(cell.parent.glob(f"nox-torch-{m[1]}-transformers-{m[2]}.*.out"))
        v = verdicts(cell / "junit.xml", logs[-1:]) if (cell / "junit.xml").is_file() else {}
        probes = [x for n, x in v.items() if n.startswith("test_race_probe")]
        row = []
        for line in (cell / "records.jsonl").read_text().splitlines():
            r = json.loads(line)
            s = r["scenario"]
            n = len(r["threads"]) or s["threads_per_device"] * len(s["devices"])
            hit = r["outcome_counts"].get(r["outcome"], 0)
            errs = {kind(t.get("error_text") or "") for t in r["threads"]} - {""}
            case = f"test_race[{s['strategy']}-{s['cache_state']}-cpux{s['threads_per_device']}]"
            row.append(
                f"{s['strategy']}={r['outcome']} {hit}/{n}"
                + (f" ({', '.join(sorted(errs))})" if errs else "")
                + f" -> {v.get(case, '?')}"
            )
        probe_sum = f"probes {probes.count('passed')}/{len(probes)} passed"
        print(f"{m[1]} x {m[2]}: " + "; ".join(row) + f"; {probe_sum}")


if __name__ == "__main__":
    main(sys.argv[1:])
