"""The command line: `python -m racegate run | probe | report | baseline | bisect | repro`.

The only module that prints or exits. `run` and `report` gate: they exit with the gate's
decision (racegate/harness/judge/gate.py: 0 SAFE, 1 UNSAFE, 7 UNDECIDED). The others exit 0 pass, 1
failed. Every command: 2 usage error (one line naming the bad value and the allowed ones, no
traceback).
"""

from __future__ import annotations

import argparse
import atexit
import contextlib
import itertools
import json
import os
import shlex
import signal
import subprocess
import sys
import textwrap
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path
from typing import Any, NoReturn, TextIO

from racegate.harness.doors import options, race_exit, sizing, upgrade
from racegate.harness.doors.bisection import command as bisect_command
from racegate.harness.judge import words
from racegate.harness.judge.baselines import production_bars
from racegate.harness.judge.gate import (
    EXIT_INTERRUPTED,
    EXIT_UNDECIDED,
    EXIT_USAGE,
    Decision,
    NothingDecided,
    decide_gate,
    infrastructure_cause,
)
from racegate.harness.judge.inputs import check_records_from, dropped_note, records_from
from racegate.harness.judge.summary import failure_lines, format_table, summarise
from racegate.harness.run import private_root, state
from racegate.harness.run.record import RunRecord, append_jsonl, begin_invocation
from racegate.harness.scenario import settings
from racegate.harness.scenario.spec import Scenario, check_devices_present, make_scenario
from racegate.harness.scenario.versions import ABSENT
from racegate.harness.scenario.workload_api import WorkloadError, has_strategies

# How the user called it: the `racegate` console command, or `python -m racegate` in a checkout.
PROG = "racegate" if Path(sys.argv[0]).name == "racegate" else "python -m racegate"

EXIT_OK, EXIT_FAILED = 0, 1  # the commands that gate nothing (probe, baseline, expectations)


class UsageError(Exception):
    """Bad input: printed as one line, exit code 2."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # one line and exit 2, like every usage error here
        raise UsageError(message)


def _csv(text: str) -> list[str]:
    return [s.strip() for s in text.split(",") if s.strip()]


DEFAULT_BASELINES = "the project's baselines/ ([tool.racegate] baselines)"
BASELINES_HELP = (
    f"folder of <hardware>.json throughput floors (default: {DEFAULT_BASELINES}, where absent "
    "means no floors; a folder named here must exist, except for `baseline --update`)"
)


def baselines_folder(named: Path | None, *, written: bool = False) -> Path:
    """The --baselines folder. The default may be absent (no floors: each tok/s check is
    skipped, and the report says so); a folder the user named must exist, or a misspelt one
    would skip every floor. `written` (`baseline --update`): it is made."""
    if named is None:
        from racegate.harness.judge import baselines

        try:
            return baselines.project_folder()
        except ValueError as exc:
            raise UsageError(str(exc)) from None
    if not written and not named.is_dir():
        what = "is not a folder" if named.exists() else "does not exist"
        raise UsageError(
            f"--baselines {named} {what}; give the folder of <hardware>.json floors "
            f"(default: {DEFAULT_BASELINES})"
        )
    return named


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog=PROG, description="racegate: gate torch upgrades.")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    run = sub.add_parser(
        "run",
        help="run scenarios in isolated processes, record them, end with the verdict",
        description="The run options are pytest's (same names, same defaults), except that "
        "--strategies defaults to the production strategy; --strategy, --cache-state, "
        "--timeout and --out are older spellings of --strategies, --cache-states, "
        "--run-timeout and --results.",
    )
    for opt in options.SHARED:  # the same table the pytest plugin reads
        run.add_argument(opt.flag, *opt.aliases, dest=opt.dest, **opt.argparse_kwargs())
    run.add_argument(
        "--target-devices", default="", help="GPUs for the target model (default: the drafter's)"
    )
    run.add_argument(
        "--steps", type=int, default=6, help="steady steps per thread (default: %(default)s)"
    )
    run.add_argument(
        "--warmup-steps", type=int, default=1, help="excluded first steps (default: %(default)s)"
    )
    run.add_argument("--seed", type=int, default=0, help="seed (default: %(default)s)")
    run.add_argument("--json", action="store_true", help="print each record as JSON on stdout")
    run.add_argument(
        "--records-from",
        type=Path,
        action="append",
        default=[],
        metavar="PATH",
        help="also judge the records in this JSON Lines file or folder (repeatable; printed); "
        "default: only this invocation's own runs",
    )
    run.add_argument("--keep", action="store_true", help="keep each run's work dir (logs, cache)")
    run.add_argument(
        "--prime-each-run",
        action="store_true",
        help="a warm/deleted run primes a cache of its own, instead of copying one priming run's "
        "(slower; to compare detection with and without the shared priming)",
    )
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
    report.add_argument(
        "records",
        nargs="*",
        type=Path,
        help="JSON Lines files or folders of them (default: the latest run under .racegate/runs/)",
    )
    report.add_argument(
        "--out-dir",
        type=Path,
        default=None,
        help="(default: report/, or the run's own folder when reporting the latest run)",
    )
    report.add_argument("--baselines", type=Path, default=None, help=BASELINES_HELP)
    report.add_argument("--title", default="racegate matrix", help="(default: %(default)s)")
    report.add_argument(
        "--race-only",
        action="store_true",
        help="gate race evidence only: a production cell with a throughput floor whose runs "
        "were not timed (they overlapped other runs) passes instead of failing the gate; "
        "gate.json says race_only",
    )

    base = sub.add_parser("baseline", help="show or update throughput floors from run records")
    base.add_argument("records", nargs="*", type=Path, help="JSON Lines files with throughput runs")
    base.add_argument("--update", action="store_true", help="write floors from the records")
    base.add_argument("--baselines", type=Path, default=None, help=BASELINES_HELP)
    base.add_argument("--tolerance", type=float, default=0.10, help="(default: %(default)s)")
    add_expectations_parser(sub)
    upgrade.add_parser(sub)
    sub.add_parser(
        "ab",
        add_help=False,
        help="A/B: candidate vs reference versions, interleaved runs, ratio + 95%% CI "
        "(python -m racegate ab -h)",
    )
    bisect_command.add_parsers(sub)
    sub.add_parser(
        "race",
        add_help=False,
        help="`pytest -m race` here (your project: [tool.racegate]), cases side by side sized "
        "to this host; the arguments after it go to pytest (racegate's options short, "
        "--devices 0, or as pytest spells them, --racegate-devices 0)",
    )
    explain = sub.add_parser(
        "explain", help="what a verdict word means and what to do (racegate explain UNDECIDED)"
    )
    explain.add_argument(
        "word", nargs="+", help=f"one of: {', '.join(m.word for m in words.WORDS)}"
    )
    return parser


def cmd_explain(args: argparse.Namespace) -> int:
    """`racegate explain WORD`: the word's entry in racegate.harness.judge.words."""
    try:
        print(words.explain(" ".join(args.word)))
    except ValueError as exc:
        raise UsageError(str(exc).removeprefix("racegate explain: ")) from None
    return EXIT_OK


# --- `expectations`: propose (and with --update write) racegate/harness/expectations/race.toml rows
# from runs.
def add_expectations_parser(sub: argparse._SubParsersAction) -> None:
    from racegate.harness.judge.race_expectations import DEFAULT_TABLE

    exp = sub.add_parser("expectations", help="propose or write race.toml rows from run records")
    exp.add_argument("records", nargs="+", type=Path, help="JSON Lines files or folders of them")
    exp.add_argument("--update", action="store_true", help="rewrite the table (default: show)")
    exp.add_argument("--table", type=Path, default=DEFAULT_TABLE, help="(default: %(default)s)")
    exp.add_argument("--reason", default=None, help="why the new rows' cases fail (required)")
    exp.add_argument("--source", default=None, help="upstream file, issue/PR or results/ folder")


def cmd_expectations(args: argparse.Namespace) -> int:
    from racegate.harness.judge import expectation_update as eu

    proposal = eu.propose_from(args.records, args.table)  # under the records' own roles
    for line in proposal.lines():
        print(line)
    if args.update and proposal.changes:
        eu.write(proposal, args.table, reason=args.reason, source=args.source)  # no reason: exit 2
        print(f"wrote {args.table}")
    return EXIT_FAILED if proposal.rejected else EXIT_OK


# --- end of `expectations`


def scenarios_from_args(args: argparse.Namespace, opts: options.RunOptions) -> list[Scenario]:
    """Every strategy × cache state × threads per device, on the resolved options."""
    combos = itertools.product(opts.strategies, opts.cache_states, opts.threads_per_device)
    return [
        make_scenario(
            preset=opts.preset,
            strategy=strategy,
            strategy_spec=opts.strategy_specs.get(strategy),  # a workload's own: its spec
            cache_state=cache_state,
            schedule=opts.schedule,
            devices=opts.devices,
            target_devices=args.target_devices,
            threads_per_device=tpd,
            steps=args.steps,
            warmup_steps=args.warmup_steps,
            timeout_s=opts.run_timeout,
            switch_interval_s=opts.switch_interval,
            stall_s=opts.stall,
            workload=opts.workload,
            seed=args.seed,
            production=opts.production,  # the roles its verdict judges by, in each record
            control=opts.control,
        )
        for strategy, cache_state, tpd in combos
    ]


def validate_against_workload(scenarios: list[Scenario], where: str = "--workload") -> None:
    """Preset and strategy must exist in the workload; GPUs must exist on this machine."""
    import torch  # late: `--help` and usage errors stay fast

    cuda_count = torch.cuda.device_count()
    for sc in scenarios:
        check_devices_present(sc, cuda_count)
        workload = options.check_workload(sc.workload, sc.preset, where, sc.extra)
        allowed = has_strategies(workload)
        if str(sc.strategy) not in allowed:
            raise ValueError(
                f"strategy {str(sc.strategy)!r} is not implemented by workload {workload.name!r}; "
                f"it has: {', '.join(allowed)}"
            )
        if sc.cache_state.spec.deleted_mid_run and len(workload.shapes()) < 2:
            raise ValueError(
                "cache state 'deleted' needs a workload with ≥ 2 shapes (one is new after deletion)"
            )


def _probe_expectations(torch_version: str, device: str) -> dict[str, str]:
    """What racegate/harness/expectations/probes.toml says each probe shows on this torch (no probe
    is run)."""
    from racegate.harness.judge import probe_expectations

    try:
        table = probe_expectations.load()
    except (OSError, ValueError):
        return {}  # no table: the verdict then only knows what ran here
    out = {}
    for name in {e.name for e in table}:
        entry = probe_expectations.lookup(table, name, torch_version, device)
        if entry is not None:
            out[name] = str(entry.verdict)
    return out


def print_verdict(records: list[RunRecord], opts: options.RunOptions, stream: TextIO) -> Decision:
    """Print the verdict block; return the gate's decision its last line says."""
    from racegate.harness.judge.inputs import roles_of
    from racegate.harness.judge.verdict import Calibration, decide, render

    torch_version = records[0].versions.torch if records else ABSENT
    device = "cuda" if opts.on_gpu else "cpu"
    probes = {} if torch_version == ABSENT else _probe_expectations(torch_version, device)
    # The roles the records ran under (this run's own), as the report and pytest read them.
    production, control = roles_of(records, empty=(opts.production, opts.control))
    verdict = decide(
        records,
        production=production,
        calibration=Calibration(control=control),
        probes=probes,
        strategies=opts.strategies,
    )
    # harness run judges no throughput floor; memory and the test slowdown, as the report
    decision = decide_gate(
        verdict,
        missed=production_bars(records, production),
        infrastructure=infrastructure_cause(records),  # a full disk: no verdict
    )
    print("\n".join(render(verdict, decision)), file=stream, flush=True)
    return decision


def _progress() -> Any:
    """A rich progress bar on stderr (stdout holds the table and the verdict)."""
    from rich.console import Console
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
    )

    console = Console(stderr=True, highlight=False, soft_wrap=True)
    columns = (
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
    )
    return Progress(*columns, console=console, redirect_stdout=False, redirect_stderr=False)


def _show_run(progress: Any, sc: Scenario, k: int, record: RunRecord, as_json: bool) -> None:
    """One landed run: its JSON on stdout under --json, its line (and why it failed) on stderr."""
    if as_json:
        print(json.dumps(record.to_json(), sort_keys=True), flush=True)
    tps = f"{record.tokens_per_s:,.0f} tok/s" if record.tokens_per_s else "—"
    nested = record.outcome_counts.get("nested_fx_error", 0)
    progress.console.print(
        f"{sc.label()} #{k + 1}: {record.outcome}, "
        f"{nested}/{record.threads_asked} nested-FX, {tps}, {record.wall_s:.0f}s",
        markup=False,
    )
    for line in failure_lines(record):
        progress.console.print(f"    {line}", markup=False)


def _run_all(
    jobs: list[tuple[Scenario, int]],
    args: argparse.Namespace,
    command: str,
    out: Path,
    records: list[RunRecord],
) -> list[RunRecord]:
    """Every (scenario, repeat index) run, `args.jobs` at once; each record appended to `out`
    as it lands, and to `records`. A record that cannot be written (a full disk, the folder
    gone) stops everything: NothingDecided, naming why."""
    from racegate.harness.doors.pipeline import run_scenario
    from racegate.harness.run.runner import SharedPrimes, kill_live_children

    timing_valid = args.jobs == 1 or len(jobs) == 1  # runs side by side time nothing
    progress = _progress()
    # A warm/deleted scenario's runs copy the cache of one priming run (made by the first),
    # unless --prime-each-run: then each run primes its own (run_scenario's primes=None).
    primes = SharedPrimes(keep=args.keep)
    if args.keep:  # the kept work dirs are inside this process's root: it stays too
        private_root.keep()
    shared = None if args.prime_each_run else primes
    with primes, progress, ThreadPoolExecutor(args.jobs) as pool:
        task = progress.add_task(f"{len(jobs)} run(s)", total=len(jobs))
        # Each run is its own subprocess; the pool only waits on them, so threads are enough.
        futures = {
            pool.submit(
                run_scenario, sc, command=command, repeat_index=k, keep=args.keep,
                timing_valid=timing_valid, primes=shared,
            ): (sc, k)
            for sc, k in jobs
        }  # fmt: skip
        try:
            for future in as_completed(futures):
                sc, k = futures[future]
                record = future.result()
                try:
                    append_jsonl(out, record)  # whole or not at all (files.append_line)
                except OSError as exc:
                    raise NothingDecided(
                        f"the record of run {len(records) + 1} could not be written: {exc}"
                    ) from None
                records.append(record)
                _show_run(progress, sc, k, record, args.json)
                progress.advance(task)
        except BaseException:
            # Ctrl-C, SIGTERM or a failed write: start nothing more, take running children down.
            kill_live_children()
            pool.shutdown(wait=False, cancel_futures=True)
            raise
    return records


def cmd_run(args: argparse.Namespace) -> int:
    from racegate.harness.run.runner import STOPPING

    STOPPING.clear()  # a run interrupted earlier in this process must not block this one
    if args.jobs < 1:
        raise ValueError(f"--jobs must be ≥ 1, got {args.jobs}")
    settings.check_environment()  # RACEGATE_PID_NAMESPACE, RACEGATE_TEST_SLOWDOWN: before a run
    opts = options.resolve(vars(args), gpus=options.count_gpus(), for_cli=True)
    check_records_from(args.records_from)  # bad input before any run
    # The workload's roles (production strategy, positive control) and strategies, before any
    # run is spent: one it lacks is a usage error naming those it has.
    workload = options.check_workload(opts.workload, opts.preset, opts.workload_source)
    opts = options.bind_roles(opts, workload, for_cli=True)
    scenarios = scenarios_from_args(args, opts)
    validate_against_workload(scenarios, opts.workload_source)
    out = opts.results or state.new_run(state.checkout_root())
    command = shlex.join(["python", "-m", "racegate", *sys.argv[1:]])
    jobs = [(sc, k) for sc in scenarios for k in range(opts.repeat)]
    records: list[RunRecord] = []
    try:
        _run_all(jobs, args, command, out, records)
    except BaseException as exc:
        from racegate.harness.run.runner import kill_live_children

        kill_live_children()
        # Its own run folder is marked incomplete, so `report` never takes it for the latest
        # run (or removed, where no record landed); a --results file is the user's.
        stopped = "interrupted" if isinstance(exc, KeyboardInterrupt) else "stopped"
        if opts.results is None:
            state.end_incomplete(out, f"{stopped} after {len(records)} of {len(jobs)} runs")
        if not isinstance(exc, KeyboardInterrupt):
            raise
        where = f" in {out}" if records else ""
        print(
            f"racegate: interrupted: `{PROG} run` stopped after {len(records)} of {len(jobs)} "
            f"runs (recorded{where}); nothing decided (exit {EXIT_INTERRUPTED})",
            file=sys.stderr,
        )
        return EXIT_INTERRUPTED
    # stdout holds the table and the verdict, unless --json gave it to the records.
    stream = sys.stderr if args.json else sys.stdout
    print("\n".join(format_table(summarise(records), records)), file=stream, flush=True)
    print(f"records: {out}", file=stream, flush=True)
    merged, notes = records_from(args.records_from, own=records)  # each run counted once
    for note in notes:
        print(note, file=stream, flush=True)
    return print_verdict([*merged, *records], opts, stream).exit_code


PROBE_WIDTH = 100  # the probe table fits a 100-column CI log


def _fit(text: str, width: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= width else text[: width - 1] + "…"


def cmd_probe(args: argparse.Namespace) -> int:
    from racegate.harness.judge import probe_expectations
    from racegate.harness.judge.probe_expectations import Status
    from racegate.harness.probes import runner as probes

    if not args.timeout > 0:
        raise ValueError(f"--timeout must be > 0 seconds, got {args.timeout:g}")
    names = _csv(args.only) or None
    if names:
        unknown = sorted(set(names) - set(probes.PROBES))
        if unknown:
            raise ValueError(
                f"unknown probe {unknown[0]!r}; choose from: {', '.join(probes.PROBES)}"
            )
    table = probe_expectations.load()  # a bad table is a usage error before any probe runs
    results = probes.run_probes_isolated(names, timeout_s=args.timeout)
    judged = [(r, *probe_expectations.compare(r, table)) for r in results]
    bad = [(r, msg) for r, status, msg in judged if status is not Status.MATCH]  # fail closed
    if args.json:
        print(json.dumps(probes.results_to_json(results), indent=2))
    else:
        env = results.environment
        print(
            _fit(
                f"torch {env.get('torch', '?')} · python {env.get('python', '?')} · "
                f"{env.get('device', '?')} ({env.get('device_name', '?')}) · {len(results)} "
                f"probes in {results.wall_s:.1f} s",
                PROBE_WIDTH,
            )
        )
        width = max([len(r.name) for r in results] + [5])
        print(f"{'probe':<{width}}  {'verdict':<7}  {'expected':<8}  {'s':>5}  detail")
        for r, status, _ in judged:
            entry = probe_expectations.lookup(table, r.name, r.torch_version, r.device)
            expected = str(entry.verdict) if entry else "no entry"
            row = f"{r.name:<{width}}  {r.verdict!s:<7}  {expected:<8}  {r.seconds:>5.2f}  "
            mark = {Status.MATCH: "", Status.MISSING: "NO ROW: "}.get(status, "MOVED: ")
            print(row + _fit(mark + r.detail, max(10, PROBE_WIDTH - len(row))))
        for _, msg in bad:
            print()
            for line in msg.splitlines():
                print("\n".join(textwrap.wrap(line, PROBE_WIDTH, subsequent_indent="    ")))
    n_bad = len(bad)
    summary = (
        f"racegate probe: {'FAIL' if n_bad else 'PASS'}: {len(results) - n_bad} of "
        f"{len(results)} probes match {probe_expectations.SHOWN}"
        + (f"; {n_bad} moved or no verdict" if n_bad else "")
    )
    print(
        "\n".join(textwrap.wrap(summary, PROBE_WIDTH, subsequent_indent="    ")),
        file=sys.stderr if args.json else sys.stdout,
    )
    return EXIT_FAILED if bad else EXIT_OK


def cmd_report(args: argparse.Namespace) -> int:
    from racegate.harness.report.write import write_reports

    records, out_dir = args.records, args.out_dir
    if not records:
        root = state.checkout_root()
        latest = state.latest_records(root)
        if latest is None:
            raise ValueError(
                f"report: no records given and none under {state.runs_dir(root)}; run "
                "`python -m racegate run` or `pytest -m race` first, or name JSON Lines files"
            )
        records = [latest]
        out_dir = out_dir or latest.parent / "report"
        print(f"racegate: reporting the latest run, {latest}", file=sys.stderr)
    out_dir = out_dir or Path("report")
    paths = write_reports(
        records,
        out_dir,
        baselines_dir=baselines_folder(args.baselines),
        title=args.title,
        race_only=args.race_only,
    )
    for p in paths:
        print(p)
    gate = json.loads((out_dir / "gate.json").read_text())
    if dropped := gate.get("dropped_duplicates"):
        print(f"racegate: {dropped_note(dropped)}", file=sys.stderr)
    print(f"racegate: {gate['decision']}: {gate['reason']} (see matrix.md)", file=sys.stderr)
    return int(gate["exit_code"])


def cmd_baseline(args: argparse.Namespace) -> int:
    from racegate.harness.judge import baselines

    if args.update:
        if not args.records:
            raise ValueError(
                "baseline --update needs run records (JSON Lines files) to take floors from"
            )
        folder = baselines_folder(args.baselines, written=True)
        for path in baselines.update_from_records(args.records, folder, tolerance=args.tolerance):
            print(f"wrote {path}")
        return EXIT_OK
    print(baselines.describe(baselines_folder(args.baselines)))
    return EXIT_OK


def cmd_race(pytest_args: list[str]) -> int:
    """The race selection in this directory, sized to the host; pytest's exit is the decision,
    UNDECIDED where it decided nothing (racegate.harness.doors.race_exit). racegate's options
    may come short (`--devices 0`) as `racegate run` takes them: pytest gets them prefixed."""
    pytest_args = options.to_pytest(pytest_args)
    sized, why = sizing.race_args(pytest_args)
    print(f"racegate: {why}", file=sys.stderr, flush=True)
    with race_exit.deciding(pytest_args, Path.cwd()) as (own, decided):
        cmd = [sys.executable, "-m", "pytest", *sized, "-m", "race", *own, *pytest_args]
        code, why = race_exit.gated(_wait_through_ctrl_c(cmd), decided, pytest_args)
    if why:
        print(f"racegate: {why}", file=sys.stderr)
    return code


CTRL_C_GRACE_S = 60.0  # pytest's own Ctrl-C path: its verdict so far, its folders removed


def _wait_through_ctrl_c(cmd: list[str]) -> int:
    """Run `cmd` (pytest, in this process group) to its end. On Ctrl-C pytest gets the same
    SIGINT: it is given CTRL_C_GRACE_S to stop in its own Ctrl-C path (marking its run folder
    incomplete, removing its private root), not killed at once (subprocess.call's way, which
    left its racegate-root-* behind); then the KeyboardInterrupt goes on to main."""
    proc = subprocess.Popen(cmd)
    try:
        return proc.wait()
    except KeyboardInterrupt:
        try:
            proc.wait(timeout=CTRL_C_GRACE_S)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        raise


PATH_ERRORS = (FileNotFoundError, PermissionError, IsADirectoryError, NotADirectoryError)
COMMANDS = {
    "run": cmd_run,
    "probe": cmd_probe,
    "report": cmd_report,
    "baseline": cmd_baseline,
    "expectations": cmd_expectations,
    **bisect_command.COMMANDS,
    "upgrade": upgrade.cmd_upgrade,
    "explain": cmd_explain,
}


def _explain_only(argv: list[str]) -> int:
    """`explain` reads a table: no private root, no signal handler, nothing imported."""
    try:
        return cmd_explain(build_parser().parse_args(argv))
    except UsageError as exc:
        print(f"racegate: error: {exc}", file=sys.stderr)
        return EXIT_USAGE


def _on_sigterm(signum: int, frame: object) -> None:
    from racegate.harness.run.runner import kill_live_children

    kill_live_children()  # children run in their own sessions: take them down too
    raise SystemExit(128 + signum)


def main(argv: Sequence[str] | None = None) -> int:
    if list(sys.argv[1:] if argv is None else argv)[:1] == ["explain"]:
        return _explain_only(list(sys.argv[1:] if argv is None else argv))
    argv = sys.argv[1:] if argv is None else list(argv)
    what = f"`{PROG} {argv[0]}`" if argv else f"`{PROG}`"
    try:
        # First: torch (imported later, by a workload or a check) makes its caches under TMPDIR
        # and ~ on import; they go into this process's own root instead
        # (racegate.harness.run.private_root).
        private_root.enter()
        signal.signal(signal.SIGTERM, _on_sigterm)
        begin_invocation()  # this command's runs are one invocation (their records say which)
        if argv[:1] == ["ab"]:  # its own parser; `harness run` options pass through after --
            from racegate.harness.ab import cli as ab_cli

            return ab_cli.main(argv[1:], prog=f"{PROG} ab")
        if argv[:1] == ["race"]:  # every argument after it is pytest's
            return cmd_race(argv[1:])
        args = build_parser().parse_args(argv)
        return COMMANDS[args.command](args)
    # Paths the user gave that cannot be read or written are bad input (checked before any
    # run); the machine failing under a command (a full disk, a folder gone mid-run) decides
    # nothing: one line, UNDECIDED's exit, never a verdict's code or a traceback.
    except (UsageError, ValueError, WorkloadError, *PATH_ERRORS) as exc:
        print(f"racegate: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except (NothingDecided, OSError) as exc:
        _stop_children()
        print(f"racegate: nothing decided: {what} stopped: {exc}", file=sys.stderr)
        return EXIT_UNDECIDED
    except KeyboardInterrupt:
        _stop_children()
        print(
            f"racegate: interrupted: {what} stopped before a decision; nothing decided; "
            f"records already written are kept (exit {EXIT_INTERRUPTED})",
            file=sys.stderr,
        )
        return EXIT_INTERRUPTED


def _stop_children() -> None:
    from racegate.harness.run.runner import kill_live_children

    kill_live_children()


def entry(argv: Sequence[str] | None = None) -> NoReturn:
    """The `racegate` command and `python -m racegate`: main's exit status, and then out, even
    where the workload left threads that never end (a non-daemon thread started at import):
    once the verdict is printed, the process exits. atexit's handlers (the private root's
    removal, the live children's kill) run first; then os._exit, which waits for no thread."""
    code = main(argv)
    try:
        atexit._run_exitfuncs()
    finally:
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):
                stream.flush()
        os._exit(code)
