"""The nightly's fan-out on GitHub Actions: the plan of gpu_matrix cells (read from nox), and
the report job's merge of every cell's artifact, with a failed row for a cell that sent none.

    python scripts/nightly_plan.py plan [-k EXPR] [--github-output]
    python scripts/nightly_plan.py report --plan CELLS_JSON --artifacts DIR --out-dir DIR
        [--via nox|python] [--summary PATH]

`plan` prints the cells as a JSON list (the `cell` job's strategy.matrix); `report` writes a
`no-artifact.jsonl` record for every planned cell whose artifact holds no run record, runs
`python -m racegate report` over every artifact folder, and appends matrix.md and the cell list
to the job summary. Exit codes: the report's decision (0 SAFE, 1 UNSAFE, 7 UNDECIDED;
through nox, any failure is nox's 1), else 1 when a cell was lost; 2 usage error.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # run as a script from a checkout: harness is not installed

from racegate.harness.run.record import Hardware, RunRecord, Versions, append_jsonl, read_jsonl  # noqa: E402
from racegate.harness.scenario import settings  # noqa: E402
from racegate.harness.scenario.spec import Scenario  # noqa: E402
from racegate.harness.scenario.vocab import CacheState, Outcome, Schedule  # noqa: E402

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2
SESSION = "gpu_matrix"
ARTIFACT_PREFIX = "racegate-cell-"
LOST_FILE = "no-artifact.jsonl"
# A lost cell's record: its preset and hardware name say what happened wherever the report
# shows a column ("no-artifact/<production>/cold/recompile/cell-failedx2 2×2: crash in 1/1").
LOST_PRESET = "no-artifact"
LOST_DEVICE = "cell failed"


class UsageError(Exception):
    """Bad input: printed as one line, exit code 2."""


@dataclass(frozen=True)
class Cell:
    """One gpu_matrix cell as the `cell` job's matrix entry sees it."""

    session: str  # nox's name for it: `nox -s "<session>"` runs exactly this cell
    torch: str
    transformers: str
    gpus: int  # from nox's tag gpus_<n>: the runner label gpus-<n>
    artifact: str  # the name its records and JUnit are uploaded under

    @classmethod
    def from_nox(cls, listed: dict[str, object]) -> Cell:
        name, spec, tags = listed["session"], listed["call_spec"], listed["tags"]
        assert isinstance(name, str) and isinstance(spec, dict) and isinstance(tags, list)
        gpus = [int(t.removeprefix("gpus_")) for t in tags if re.fullmatch(r"gpus_\d+", t)]
        if len(gpus) != 1:
            raise UsageError(f"nox cell {name!r} has tags {tags}: expected one gpus_<n> tag")
        slug = re.sub(r"[^A-Za-z0-9._-]+", "-", name).strip("-")
        return cls(
            name, str(spec["torch"]), str(spec["transformers"]), gpus[0], ARTIFACT_PREFIX + slug
        )


def list_cells(keywords: str = "", noxfile: Path = ROOT / "noxfile.py") -> list[Cell]:
    """The gpu_matrix cells `nox -l --json` lists, narrowed by a `nox -k` expression."""
    cmd = [sys.executable, "-m", "nox", "-f", str(noxfile), "-l", "--json", "-s", SESSION]
    if keywords.strip():
        cmd += ["-k", keywords]
    out = subprocess.run(cmd, capture_output=True, text=True, cwd=noxfile.parent)
    if out.returncode != 0:
        last = (out.stderr.strip().splitlines() or ["(no output)"])[-1]
        raise UsageError(f"nox could not list the cells for -k {keywords!r}: {last}")
    cells = [Cell.from_nox(s) for s in json.loads(out.stdout) if s["name"] == SESSION]
    if not cells:
        raise UsageError(
            f"no {SESSION} cell matches -k {keywords!r}; cells are picked by their tags, e.g. "
            "'torch_system and transformers_5_8_1' (nox -l lists them)"
        )
    return cells


def read_plan(text: str, where: str) -> list[Cell]:
    try:
        return [Cell(**c) for c in json.loads(text)]
    except (ValueError, TypeError) as exc:
        raise UsageError(
            f"{where}: not a plan of cells (nightly_plan.py plan output): {exc}"
        ) from None


def lost_record(cell: Cell, why: str) -> RunRecord:
    """A failed run standing for a cell that sent no records: the production strategy crashed
    in this row, so the row's gate fails and names the cell instead of losing the row."""
    devices = tuple(f"cuda:{i}" for i in range(cell.gpus))
    scenario = Scenario(
        preset=LOST_PRESET,
        strategy=settings.production_strategy(),
        cache_state=CacheState.COLD,
        schedule=Schedule.RECOMPILE,
        devices=devices,
    )
    return RunRecord(
        scenario=scenario,
        outcome=str(Outcome.CRASH),
        outcome_counts={str(Outcome.CRASH): scenario.threads},
        threads=[],
        threads_asked=scenario.threads,
        threads_concurrent=0,
        versions=Versions(torch=cell.torch, transformers=cell.transformers),
        hardware=Hardware(device_name=LOST_DEVICE, cuda_device_count=cell.gpus),
        detail=f"cell failed: {why} (nox session {cell.session}); see the cell job's log",
        command=f'nox -s "{cell.session}"',
    )


def record_count(folder: Path) -> int:
    """Run records in the *.jsonl files under `folder` (0 when it does not exist)."""
    if not folder.is_dir():
        return 0
    return sum(len(read_jsonl(f)) for f in sorted(folder.rglob("*.jsonl")))


def mark_lost_cells(cells: list[Cell], artifacts: Path) -> list[tuple[Cell, str]]:
    """Write a lost record into the artifact folder of every cell with no run record in it;
    return (cell, why) for each. A rerun of the report job finds its own marker and keeps it."""
    lost = []
    for cell in cells:
        folder = artifacts / cell.artifact
        marker = folder / LOST_FILE
        if marker.is_file():
            lost.append((cell, read_jsonl(marker)[0].detail or "cell failed"))
            continue
        if record_count(folder):
            continue
        why = "no artifact" if not folder.is_dir() else "artifact without run records"
        append_jsonl(marker, lost_record(cell, why))
        lost.append((cell, why))
    return lost


def harness_report(via: str, folders: list[Path], out_dir: Path) -> list[str]:
    """The command that merges `folders` into one report in `out_dir`."""
    args = [*map(str, folders), "--out-dir", str(out_dir), "--title", "racegate nightly"]
    if via == "nox":  # nox's report session installs what the report needs (no torch)
        return [sys.executable, "-m", "nox", "-f", str(ROOT / "noxfile.py"), "-s", "report",
                "--", *args]  # fmt: skip
    return [sys.executable, "-m", "racegate", "report", *args]


def cell_lines(cells: list[Cell], artifacts: Path, lost: list[tuple[Cell, str]]) -> list[str]:
    why = {c.session: w for c, w in lost}
    lines = ["", "## Cells", ""]
    for cell in cells:
        if cell.session in why:
            lines.append(f"- ❌ `{cell.session}`: cell failed: {why[cell.session]}")
        else:
            n = record_count(artifacts / cell.artifact)
            lines.append(f"- `{cell.session}`: {n} run records")
    return lines


def cmd_plan(args: argparse.Namespace) -> int:
    cells = list_cells(args.keywords)
    text = json.dumps([asdict(c) for c in cells], separators=(",", ":"))
    print(text)
    if args.github_output:
        path = os.environ.get("GITHUB_OUTPUT")
        if not path:
            raise UsageError("--github-output: GITHUB_OUTPUT is not set (not on GitHub Actions)")
        with open(path, "a") as fh:
            fh.write(f"cells={text}\ncount={len(cells)}\n")
    return EXIT_OK


def cmd_report(args: argparse.Namespace) -> int:
    cells = read_plan(args.plan, "--plan")
    if not cells:
        raise UsageError("--plan lists no cells: the plan job failed or selected nothing")
    args.artifacts, args.out_dir = args.artifacts.resolve(), args.out_dir.resolve()
    args.artifacts.mkdir(parents=True, exist_ok=True)
    lost = mark_lost_cells(cells, args.artifacts)
    planned = {c.artifact for c in cells}
    for extra in sorted(p.name for p in args.artifacts.iterdir() if p.name not in planned):
        print(f"nightly: {args.artifacts / extra} is not a planned cell: left out", file=sys.stderr)
    folders = [args.artifacts / c.artifact for c in cells]
    rc = subprocess.run(harness_report(args.via, folders, args.out_dir), cwd=ROOT).returncode
    matrix = args.out_dir / "matrix.md"
    summary = [matrix.read_text()] if matrix.is_file() else ["# racegate nightly: no report"]
    summary += cell_lines(cells, args.artifacts, lost)
    if args.summary:
        with open(args.summary, "a") as fh:
            fh.write("\n".join(summary) + "\n")
    for cell, why in lost:
        print(f"nightly: cell failed: {cell.session}: {why}", file=sys.stderr)
    return rc if rc else (EXIT_FAILED if lost else EXIT_OK)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="scripts/nightly_plan.py", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    plan = sub.add_parser("plan", help="list the gpu_matrix cells as a JSON matrix")
    plan.add_argument("-k", dest="keywords", default="", help="nox -k expression over cell tags")
    plan.add_argument(
        "--github-output",
        action="store_true",
        help="also write cells= and count= to $GITHUB_OUTPUT",
    )
    report = sub.add_parser("report", help="merge the cells' artifacts into one report")
    report.add_argument("--plan", required=True, help="the plan's JSON list of cells")
    report.add_argument("--artifacts", type=Path, required=True, help="one folder per artifact")
    report.add_argument("--out-dir", type=Path, required=True, help="where the report goes")
    report.add_argument(
        "--via", choices=("nox", "python"), default="python",
        help="nox: through `nox -s report`, which installs the report's packages "
        "(default: %(default)s: this Python's harness)",
    )  # fmt: skip
    report.add_argument(
        "--summary",
        default=os.environ.get("GITHUB_STEP_SUMMARY") or None,
        help="append the matrix and the cell list here (default: $GITHUB_STEP_SUMMARY)",
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    try:
        args = build_parser().parse_args(argv)
        return {"plan": cmd_plan, "report": cmd_report}[args.command](args)
    except UsageError as exc:
        print(f"nightly_plan.py: {exc}", file=sys.stderr)
        return EXIT_USAGE


if __name__ == "__main__":
    sys.exit(main())
