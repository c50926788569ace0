"""The table of benchmarks/run_noise.sh: each configuration's run-to-run and in-run noise.

    python3 benchmarks/run_noise_table.py DIR    (DIR holds race.jsonl, trainer.jsonl, ...)

Per configuration: each run's steady tokens/s and its windows' spread, the steady steps'
coefficient of variation, the pool's run-to-run spread (racegate.harness.judge.compare.log_spread)
and the runs per side a 5% slowdown then needs (runs_needed, the A/B's own rule). Then the GPU's
clocks and throttle reasons, and the host's steal time, over the call.
"""

from __future__ import annotations

import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from racegate.harness.judge.compare import log_spread, runs_needed
from racegate.harness.judge.metrics import is_steady
from racegate.harness.run.record import read_jsonl

CONFIGS = ("race", "trainer", "long", "pinned")


def config_lines(name: str, path: Path) -> list[str]:
    records = read_jsonl(path, skip_torn=True)
    out = [f"## {name}: {len(records)} run(s)"]
    rates = []
    for r in records:
        if r.outcome != "ok" or not r.tokens_per_s:
            out.append(f"  {r.outcome}: {r.detail}")
            continue
        rates.append(r.tokens_per_s)
        (t,) = r.threads
        # The judge's own rule (metrics.is_steady): past warm-up, and not a shape's first step.
        firsts = {t.shapes.index(shape) for shape in set(t.shapes)}
        warmup = r.scenario.warmup_steps
        steady = [x for n, x in enumerate(t.step_s) if is_steady(n, n in firsts, warmup)]
        cv = statistics.stdev(steady) / statistics.mean(steady) if len(steady) > 1 else 0.0
        out.append(
            f"  {r.tokens_per_s:>9,.0f} tok/s  windows spread {r.tokens_per_s_spread:6.1%}  "
            f"step CV {cv:5.1%}  steps {min(steady) * 1e3:.1f}-{max(steady) * 1e3:.1f} ms  "
            f"compile {r.compile_s:.1f} s  wall {r.wall_s:.0f} s"
        )
    if len(rates) >= 2:
        spread = log_spread(rates)
        need = runs_needed(spread, 0.05)
        out.append(
            f"  run to run: spread {spread:.2%}, median {statistics.median(rates):,.0f} tok/s; "
            f"runs per side to catch 5% 90% of the time: {need or '> 1000'}"
        )
    return out


def gpu_lines(path: Path) -> list[str]:
    rows = [line.split(", ") for line in path.read_text().splitlines()[1:] if ", " in line]
    if not rows:
        return [f"gpu: no samples in {path.name}"]
    sm = [int(r[1].split()[0]) for r in rows if r[1].split()[0].isdigit()]
    power = [float(r[3].split()[0]) for r in rows if r[3].split()[0].replace(".", "").isdigit()]
    reasons = sorted({r[6].strip() for r in rows if len(r) > 6})
    return [
        f"gpu: {len(rows)} samples; SM clock {min(sm)}-{max(sm)} MHz (median "
        f"{statistics.median(sm):.0f}); power {min(power):.0f}-{max(power):.0f} W; "
        f"throttle reasons seen: {', '.join(reasons)}"
    ]


def steal_lines(path: Path) -> list[str]:
    rows = []
    for line in path.read_text().splitlines():
        parts = line.split()
        if len(parts) >= 10 and parts[1] == "cpu":
            rows.append([int(x) for x in parts[2:]])
    if len(rows) < 2:
        return ["host: too few /proc/stat samples"]
    total = sum(rows[-1]) - sum(rows[0])
    steal = rows[-1][7] - rows[0][7]
    idle = rows[-1][3] - rows[0][3]
    return [f"host: steal {steal / total:.2%} of CPU time, idle {idle / total:.1%}, over the call"]


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print(__doc__.splitlines()[2].strip(), file=sys.stderr)
        return 2
    d = Path(argv[0])
    lines = []
    for name in CONFIGS:
        if (d / f"{name}.jsonl").exists():
            lines += config_lines(name, d / f"{name}.jsonl")
    if (d / "gpu.csv").exists():
        lines += gpu_lines(d / "gpu.csv")
    if (d / "procstat.txt").exists():
        lines += steal_lines(d / "procstat.txt")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
