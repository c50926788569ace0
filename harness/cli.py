"""The command line: `python -m harness run | probe | report | baseline`.

The only module that prints or exits. Exit codes: 0 pass, 1 a run or gate failed,
2 usage error (one line naming the bad value and the allowed ones, no traceback).
"""

from __future__ import annotations

import argparse
import itertools
import json
import shlex
import signal
import sys
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path

from harness import settings
from harness.judge.summary import summarise
from harness.record import RunRecord, append_jsonl
from harness.scenario import Scenario, check_devices_present, make_scenario
from harness.vocab import CacheState, Outcome, Schedule, Strategy
from harness.workload_api import WorkloadError, WorkloadSpec, load_workload

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2


class UsageError(Exception):
    """Bad input: printed as one line, exit code 2."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # one line and exit 2, like every usage error here
        raise UsageError(message)


def _csv(text: str) -> list[str]:
    return [s.strip() for s in text.split(",") if s.strip()]


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="python -m harness", description="racegate: gate torch upgrades.")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    run = sub.add_parser("run", help="run scenarios in isolated processes and record them")
    run.add_argument("--preset", default="tiny", help="workload preset (default: %(default)s)")
    run.add_argument(
        "--strategy",
        default=str(Strategy.PER_DEVICE),
        help=f"compile strategy, or a comma list ({', '.join(Strategy)}) (default: %(default)s)",
    )
    run.add_argument(
        "--cache-state",
        default=str(CacheState.COLD),
        help=f"cache state(s), comma list ({', '.join(CacheState)}) (default: %(default)s)",
    )
    run.add_argument(
        "--schedule",
        default=str(Schedule.BARRIER),
        help=f"start schedule(s), comma list ({', '.join(Schedule)}) (default: %(default)s)",
    )
    run.add_argument(
        "--devices", default="cpu", help="'cpu' or GPU indices '0,1' (default: %(default)s)"
    )
    run.add_argument(
        "--target-devices", default="", help="GPUs for the target model (default: the drafter's)"
    )
    run.add_argument(
        "--threads-per-device",
        default="2",
        help="threads per device, or a comma list (default: %(default)s)",
    )
    run.add_argument(
        "--steps", type=int, default=6, help="steady steps per thread (default: %(default)s)"
    )
    run.add_argument(
        "--warmup-steps", type=int, default=1, help="excluded first steps (default: %(default)s)"
    )
    run.add_argument(
        "--repeat", type=int, default=1, help="runs per scenario (default: %(default)s)"
    )
    run.add_argument(
        "--timeout", type=float, default=300.0, help="seconds per run (default: %(default)s)"
    )
    run.add_argument(
        "--switch-interval",
        type=float,
        default=None,
        help="sys.setswitchinterval in the child (default: unchanged)",
    )
    run.add_argument(
        "--workload", default=None, help="module:factory (default: [tool.racegate] or model/)"
    )
    run.add_argument("--seed", type=int, default=0, help="seed (default: %(default)s)")
    run.add_argument(
        "--out", type=Path, default=None, help="append records to this JSON Lines file"
    )
    run.add_argument("--json", action="store_true", help="print each record as JSON on stdout")
    run.add_argument("--keep", action="store_true", help="keep each run's work dir (logs, cache)")
    run.add_argument(
        "--jobs",
        type=int,
        default=1,
        help="isolated runs at once; >1 for outcome counts, not timing (default: %(default)s)",
    )

    probe = sub.add_parser("probe", help="deterministic cross-thread tracing-state probes")
    probe.add_argument("--json", action="store_true", help="print results as JSON")
    probe.add_argument("--only", default="", help="comma list of probe names (default: all)")
    probe.add_argument(
        "--timeout", type=float, default=60.0, help="seconds per probe (default: %(default)s)"
    )

    report = sub.add_parser("report", help="merge run records into Markdown, HTML and a PNG chart")
    report.add_argument("records", nargs="*", type=Path, help="JSON Lines files or folders of them")
    report.add_argument(
        "--out-dir", type=Path, default=Path("report"), help="(default: %(default)s)"
    )
    report.add_argument(
        "--baselines", type=Path, default=Path("baselines"), help="(default: %(default)s)"
    )
    report.add_argument("--title", default="racegate matrix", help="(default: %(default)s)")
    report.add_argument(
        "--outcomes-only",
        action="store_true",
        help="show and gate no tokens/s: for records of runs that overlapped other runs",
    )
    report.add_argument(
        "--overlapped",
        action="append",
        type=Path,
        default=[],
        metavar="PATH",
        help="records (file or folder, repeatable) of runs that overlapped other runs but were "
        "written before records said so: their tokens/s are neither shown nor gated; the other "
        "records keep theirs",
    )

    base = sub.add_parser("baseline", help="show or update throughput floors from run records")
    base.add_argument("records", nargs="*", type=Path, help="JSON Lines files with throughput runs")
    base.add_argument("--update", action="store_true", help="write floors from the records")
    base.add_argument(
        "--baselines", type=Path, default=Path("baselines"), help="(default: %(default)s)"
    )
    base.add_argument("--tolerance", type=float, default=0.10, help="(default: %(default)s)")
    add_expectations_parser(sub)
    return parser


# --- `expectations`: propose (and with --update write) expectations/race.toml rows from runs.
def add_expectations_parser(sub: argparse._SubParsersAction) -> None:
    from harness.judge.race_expectations import DEFAULT_TABLE

    exp = sub.add_parser("expectations", help="propose or write race.toml rows from run records")
    exp.add_argument("records", nargs="+", type=Path, help="JSON Lines files or folders of them")
    exp.add_argument("--update", action="store_true", help="rewrite the table (default: show)")
    exp.add_argument("--table", type=Path, default=DEFAULT_TABLE, help="(default: %(default)s)")
    exp.add_argument("--reason", default=None, help="why the new rows' cases fail (required)")
    exp.add_argument("--source", default=None, help="upstream file, issue/PR or results/ folder")


def cmd_expectations(args: argparse.Namespace) -> int:
    from harness.judge import expectation_update as eu

    proposal = eu.propose_from(args.records, args.table, settings.production_strategy())
    for line in proposal.lines():
        print(line)
    if args.update and proposal.changes:
        eu.write(proposal, args.table, reason=args.reason, source=args.source)  # no reason: exit 2
        print(f"wrote {args.table}")
    return EXIT_FAILED if proposal.rejected else EXIT_OK


# --- end of `expectations`


def scenarios_from_args(args: argparse.Namespace) -> list[Scenario]:
    workload, _ = settings.setting("workload", args.workload)
    for option, value in (
        ("--strategy", args.strategy),
        ("--cache-state", args.cache_state),
        ("--schedule", args.schedule),
        ("--threads-per-device", args.threads_per_device),
    ):
        if not _csv(value):
            raise ValueError(f"{option} is empty; give at least one value")
    combos = itertools.product(
        _csv(args.strategy),
        _csv(args.cache_state),
        _csv(args.schedule),
        _csv(args.threads_per_device),
    )
    out = []
    for strategy, cache_state, schedule, tpd in combos:
        if not tpd.isdigit():
            raise ValueError(f"threads per device must be a positive integer, got {tpd!r}")
        out.append(
            make_scenario(
                preset=args.preset,
                strategy=strategy,
                cache_state=cache_state,
                schedule=schedule,
                devices=args.devices,
                target_devices=args.target_devices,
                threads_per_device=int(tpd),
                steps=args.steps,
                warmup_steps=args.warmup_steps,
                timeout_s=args.timeout,
                switch_interval_s=args.switch_interval,
                workload=workload,
                seed=args.seed,
            )
        )
    return out


def validate_against_workload(scenarios: list[Scenario]) -> None:
    """Preset and strategy must exist in the workload; GPUs must exist on this machine."""
    import torch  # late: `--help` and usage errors stay fast

    cuda_count = torch.cuda.device_count()
    for sc in scenarios:
        check_devices_present(sc, cuda_count)
        workload = load_workload(WorkloadSpec(sc.workload, dict(sc.extra, preset=sc.preset)))
        allowed = set(workload.strategies()) | {str(Strategy.PROCESSES)}
        if str(sc.strategy) not in allowed:
            raise ValueError(
                f"strategy {str(sc.strategy)!r} is not implemented by workload {workload.name!r}; "
                f"choose from: {', '.join(sorted(allowed))}"
            )
        if sc.cache_state is CacheState.DELETED and len(workload.shapes()) < 2:
            raise ValueError(
                "cache state 'deleted' needs a workload with ≥ 2 shapes (one is new after deletion)"
            )


def cmd_run(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
    )

    from harness.run.runner import STOPPING, kill_live_children, run_scenario

    STOPPING.clear()  # a run interrupted earlier in this process must not block this one
    if args.jobs < 1:
        raise ValueError(f"jobs must be ≥ 1, got {args.jobs}")
    if args.repeat < 1:
        raise ValueError(f"repeat must be ≥ 1, got {args.repeat}")
    if args.out is not None:  # fail now, not after the first run has been spent
        if args.out.is_dir():
            raise ValueError(f"--out {str(args.out)!r} is a folder; give a .jsonl file path")
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.open("a").close()
    scenarios = scenarios_from_args(args)
    validate_against_workload(scenarios)
    command = shlex.join(["python", "-m", "harness", *sys.argv[1:]])
    console = Console(stderr=True)
    records: list[RunRecord] = []
    jobs = [(sc, k) for sc in scenarios for k in range(args.repeat)]
    timing_valid = args.jobs == 1 or len(jobs) == 1  # runs side by side time nothing
    columns = (
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
    )
    with Progress(*columns, console=console) as progress, ThreadPoolExecutor(args.jobs) as pool:
        task = progress.add_task(f"{len(jobs)} run(s)", total=len(jobs))
        # Each run is its own subprocess; the pool only waits on them, so threads are enough.
        futures = {
            pool.submit(
                run_scenario, sc, command=command, repeat_index=k, keep=args.keep,
                timing_valid=timing_valid,
            ): (sc, k)
            for sc, k in jobs
        }
        try:
            for future in as_completed(futures):
                sc, k = futures[future]
                record = future.result()
                records.append(record)
                if args.out:
                    append_jsonl(args.out, record)
                if args.json:
                    print(json.dumps(record.to_json(), sort_keys=True), flush=True)
                tps = f"{record.tokens_per_s:,.0f} tok/s" if record.tokens_per_s else "—"
                nested = record.outcome_counts.get("nested_fx_error", 0)
                progress.console.print(
                    f"{sc.label()} #{k + 1}: [bold]{record.outcome}[/bold] "
                    f"{nested}/{record.threads_asked} nested-FX, {tps}, {record.wall_s:.0f}s"
                    + (f" ({record.detail[:200]})" if record.detail else "")
                )
                progress.advance(task)
        except BaseException:
            # Ctrl-C, SIGTERM or a failed write: start nothing more, take running children down.
            kill_live_children()
            pool.shutdown(wait=False, cancel_futures=True)
            raise
    for s in summarise(records):
        rates = ", ".join(f"{o} {p:.0%} [{lo:.0%}–{hi:.0%}]" for o, (p, lo, hi) in s.rate.items())
        tps = f"{s.tokens_per_s:,.0f} tok/s" if s.tokens_per_s else "—"
        console.print(f"{s.key}: {s.runs} runs: {rates}; median {tps}")
    return EXIT_OK if all(r.outcome == Outcome.OK for r in records) else EXIT_FAILED


def cmd_probe(args: argparse.Namespace) -> int:
    from harness.probes import runner as probes

    names = _csv(args.only) or None
    if names:
        unknown = sorted(set(names) - set(probes.PROBES))
        if unknown:
            raise ValueError(
                f"unknown probe {unknown[0]!r}; choose from: {', '.join(probes.PROBES)}"
            )
    results = probes.run_probes_isolated(names, timeout_s=args.timeout)
    if args.json:
        print(json.dumps(probes.results_to_json(results), indent=2))
    else:
        print(probes.format_table(results))
    return EXIT_OK


def cmd_report(args: argparse.Namespace) -> int:
    from harness.report import build as report

    if not args.records and not args.overlapped:
        raise ValueError("report: give JSON Lines files or folders of records (or --overlapped)")
    records, overlapped = args.records, args.overlapped
    if args.outcomes_only:  # every record as one that overlapped others
        records, overlapped = [], [*records, *overlapped]
    paths = report.write_reports(
        records,
        args.out_dir,
        baselines_dir=args.baselines,
        title=args.title,
        overlapped_paths=overlapped,
    )
    for p in paths:
        print(p)
    gate = json.loads((args.out_dir / "gate.json").read_text())
    if not gate["passed"]:
        print("racegate: the gate FAILED: see matrix.md", file=sys.stderr)
    return EXIT_OK if gate["passed"] else EXIT_FAILED


def cmd_baseline(args: argparse.Namespace) -> int:
    from harness.judge import baselines

    if args.update:
        if not args.records:
            raise ValueError(
                "baseline --update needs run records (JSON Lines files) to take floors from"
            )
        for path in baselines.update_from_records(
            args.records, args.baselines, tolerance=args.tolerance
        ):
            print(f"wrote {path}")
        return EXIT_OK
    print(baselines.describe(args.baselines))
    return EXIT_OK


PATH_ERRORS = (FileNotFoundError, PermissionError, IsADirectoryError, NotADirectoryError)
COMMANDS = {
    "run": cmd_run,
    "probe": cmd_probe,
    "report": cmd_report,
    "baseline": cmd_baseline,
    "expectations": cmd_expectations,
}


def _on_sigterm(signum: int, frame: object) -> None:
    from harness.run.runner import kill_live_children

    kill_live_children()  # children run in their own sessions: take them down too
    raise SystemExit(128 + signum)


def main(argv: Sequence[str] | None = None) -> int:
    signal.signal(signal.SIGTERM, _on_sigterm)
    try:
        args = build_parser().parse_args(argv)
        return COMMANDS[args.command](args)
    # Paths the user gave that cannot be read or written are bad input; other OS errors (a full
    # disk, say) are not, and keep their traceback.
    except (UsageError, ValueError, WorkloadError, *PATH_ERRORS) as exc:
        print(f"racegate: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        from harness.run.runner import kill_live_children

        kill_live_children()
        print("racegate: interrupted; records already written are kept", file=sys.stderr)
        return 130
