"""The A/B command line: `python -m racegate.harness.ab compare | power`; bad input is one line,
exit 2.

`python -m racegate.harness.ab compare --reference PY --candidate PY [--runs N] -- <harness run
args>` runs both sides interleaved (racegate.harness.ab.run) and compares them: the ratio
candidate/reference of steady-state tokens/s and of peak memory with a 95% interval, and the call.
Exit 0: no regression; 1: slower, more memory, or a run that failed (fail closed: no call from
partial evidence); 2: usage error. A calibration (ABResult.calibration: an A/A, or the candidate
alone under the test slowdown) exits 0 when it came out as it must (no change; slower) and 1 when
not; it gates no upgrade.

`python -m racegate.harness.ab power --reference R.jsonl --candidate C.jsonl --per-side K` draws
disjoint comparisons from pooled records (the `--records` of compare runs): A/A from the
reference runs alone, and reference vs candidate; it counts false alarms and catches.
"""

from __future__ import annotations

import argparse
import signal
import sys
from collections.abc import Sequence
from pathlib import Path

from racegate.harness.ab.run import Side, run_ab
from racegate.harness.ab.stats import SIDES, power_summary
from racegate.harness.ab.store import pooled_samples, write_ab
from racegate.harness.judge.compare import CHANGE_TOLERANCE, DEFAULT_CONFIDENCE
from racegate.harness.judge.gate import EXIT_INTERRUPTED, EXIT_SAFE, EXIT_UNSAFE, EXIT_USAGE
from racegate.harness.run import private_root

# An A/B passes its gate or fails it: the gating commands' codes (racegate.harness.judge.gate).
EXIT_OK, EXIT_FAILED = EXIT_SAFE, EXIT_UNSAFE


class UsageError(Exception):
    """Bad input: one line, exit 2."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:
        raise UsageError(message)


def _env_pair(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"{text!r} is not KEY=VALUE")
    return key, value


def _add_call_options(parser: argparse.ArgumentParser) -> None:
    """The options a comparison is called by, the same for `compare` and `power`."""
    parser.add_argument(
        "--tolerance", type=float, default=CHANGE_TOLERANCE, help="(default: %(default)s)"
    )
    parser.add_argument(
        "--confidence", type=float, default=DEFAULT_CONFIDENCE, help="(default: %(default)s)"
    )


def build_parser(prog: str = "python -m racegate.harness.ab") -> argparse.ArgumentParser:
    parser = _Parser(prog=prog, description="racegate A/B: candidate vs reference, interleaved.")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    c = sub.add_parser("compare", help="run both sides interleaved and compare them")
    c.add_argument(
        "--reference", default=sys.executable, help="reference python (default: %(default)s)"
    )
    c.add_argument("--candidate", required=True, help="candidate python (a venv's bin/python)")
    for side in SIDES:
        c.add_argument(
            f"--{side}-env",
            type=_env_pair,
            action="append",
            default=[],
            metavar="KEY=VALUE",
            help=f"extra environment for {side} runs, repeatable (default: none)",
        )
    c.add_argument("--runs", type=int, default=5, help="runs per side (default: %(default)s)")
    _add_call_options(c)
    c.add_argument(
        "--run-timeout", type=float, default=900.0, help="seconds per run (default: %(default)s)"
    )
    c.add_argument(
        "--records", type=Path, default=None, help="append runs to DIR/{reference,candidate}.jsonl"
    )
    c.add_argument("--out", type=Path, default=None, help="write the A/B result here as JSON")
    c.add_argument("run_args", nargs=argparse.REMAINDER, help="-- then `harness run` options")
    p = sub.add_parser("power", help="A/A false alarms and catches from pooled records")
    p.add_argument("--reference", type=Path, required=True, help="reference pool (.jsonl)")
    p.add_argument("--candidate", type=Path, required=True, help="candidate pool (.jsonl)")
    p.add_argument("--per-side", type=int, default=2, help="runs per side (default: %(default)s)")
    _add_call_options(p)
    p.add_argument(
        "--slowdown",
        type=float,
        default=0.05,
        help="slowdown to size runs for, from the pools' spread (default: %(default)s)",
    )
    return parser


def cmd_compare(args: argparse.Namespace) -> int:
    run_args = args.run_args[1:] if args.run_args[:1] == ["--"] else args.run_args
    ref = Side("reference", args.reference, dict(args.reference_env))
    cand = Side("candidate", args.candidate, dict(args.candidate_env))
    if args.records is not None:
        args.records.mkdir(parents=True, exist_ok=True)
    result = run_ab(
        ref,
        cand,
        run_args,
        runs=args.runs,
        tolerance=args.tolerance,
        confidence=args.confidence,
        timeout_s=args.run_timeout,
        records_dir=args.records,
        progress=lambda line: print(line, file=sys.stderr, flush=True),
    )
    if args.out is not None:
        write_ab(args.out, result)
    print("\n".join(result.lines()))
    if result.interrupted:  # stopped before its call, as `racegate upgrade` is: no verdict
        return EXIT_INTERRUPTED
    return EXIT_FAILED if result.failed else EXIT_OK


def cmd_power(args: argparse.Namespace) -> int:
    summary = power_summary(
        pooled_samples(args.reference, "reference"),
        pooled_samples(args.candidate, "candidate"),
        args.per_side,
        slowdown=args.slowdown,
        tolerance=args.tolerance,
        confidence=args.confidence,
    )
    print("\n".join(summary.lines()))
    return EXIT_OK


def _sigterm_interrupts(signum: int, frame: object) -> None:
    raise KeyboardInterrupt  # run_ab stops as on Ctrl-C: the runs made are compared and kept


def main(argv: Sequence[str] | None = None, prog: str = "python -m racegate.harness.ab") -> int:
    """`python -m racegate.harness.ab ...` (and `python -m racegate ab ...`, which passes its argv
    on)."""
    # first: torch's caches go into this process's root (racegate.harness.doors.cli)
    private_root.enter()
    # nox, CI runners and `timeout` stop a job with SIGTERM, at once or after a SIGINT.
    signal.signal(signal.SIGTERM, _sigterm_interrupts)
    try:
        args = build_parser(prog).parse_args(argv)
        return {"compare": cmd_compare, "power": cmd_power}[args.command](args)
    except (UsageError, ValueError, FileNotFoundError, PermissionError) as exc:
        print(f"racegate ab: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
