"""`python -m racegate bisect` and `python -m racegate repro`: parsers, printing and exit codes.

bisect exits with the gate's code (racegate/harness/judge/gate.py EXIT_CODES) of the newest
release's decision when the search is conclusive (a confirmed change, or none in the range): 0 SAFE,
1 UNSAFE; 7 UNDECIDED when a step stayed undecided after --tries or a neighbour's re-run
disagreed (no culprit is named); 2 for bad input. repro exits 0 when the reproducer was
verified on both releases and written, 1 when verification failed (nothing written), 2 usage.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

from racegate.harness.doors.bisection import evidence, releases, repro, search
from racegate.harness.judge.gate import EXIT_USAGE
from racegate.harness.probes.runner import PROBES
from racegate.harness.run.files import PUBLISHED, write_whole

COMPARE_URL = {
    "torch": "https://github.com/pytorch/pytorch/compare/{a}...{b}",
    "transformers": "https://github.com/huggingface/transformers/compare/v{a}...v{b}",
}


def _names(text: str, flag: str) -> tuple[str, ...]:
    if text.strip() == "none":  # no gating probe: the race selection alone decides
        return ()
    names = tuple(n.strip() for n in text.split(",") if n.strip())
    unknown = [n for n in names if n not in PROBES]
    if unknown or not names:
        raise ValueError(f"{flag} {text!r}: unknown probe; choose from: {', '.join(PROBES)}")
    return names


def add_parsers(sub: argparse._SubParsersAction) -> None:
    b = sub.add_parser(
        "bisect",
        help="first torch/transformers release where the decision changes (probes + race cases)",
    )
    b.add_argument("--torch", default="", help="a range LOW..HIGH to bisect, or one fixed version")
    b.add_argument("--transformers", default="", help="a range LOW..HIGH, or one fixed version")
    b.add_argument(
        "--probe",
        default=",".join(evidence.NESTED_FX_PROBES),
        help="comma list of the probes whose hazard makes a release UNSAFE, or 'none' (the "
        "race selection alone decides; every probe is still run and shown) "
        "(default: the nested-FX ones, %(default)s)",
    )
    b.add_argument(
        "--probes-only", action="store_true", help="decide on the probes alone (no race cases)"
    )
    b.add_argument(
        "--race-args",
        default="",
        help="extra arguments for the race selection, `python -m pytest -m race ARGS` "
        "(quoted; default: the suite's defaults, i.e. production + control)",
    )
    b.add_argument(
        "--releases", default="", help="comma list instead of `pip index versions` (offline)"
    )
    b.add_argument("--tries", type=int, default=3, help="asks per UNDECIDED step (default: 3)")
    b.add_argument(
        "--confirm", type=int, default=1, help="re-runs of each neighbour (default: %(default)s)"
    )
    b.add_argument("--envs", type=Path, help="folder of per-release --target installs")
    b.add_argument("--timeout", type=float, default=1800.0, help="seconds per race selection")
    b.add_argument("--json-out", type=Path, help="also write the result as JSON here")
    b.add_argument(
        "--records",
        type=Path,
        help="keep each race selection's run records here, one folder per answer (default: a "
        "temporary folder)",
    )

    r = sub.add_parser("repro", help="write a standalone reproducer, verified on two releases")
    r.add_argument(
        "--probe", required=True, help=f"the hazard: one of {', '.join(repro.TEMPLATES)}"
    )
    r.add_argument("--bad", required=True, help="torch release that shows it (must exit non-zero)")
    r.add_argument("--good", required=True, help="torch release that does not (must exit 0)")
    r.add_argument("--out", type=Path, required=True, help="the .py file to write")
    r.add_argument("--envs", type=Path, help="folder of per-release --target installs")


def _split(args: argparse.Namespace) -> tuple[str, str, dict[str, str]]:
    """(package to bisect, its range text, the fixed pins)."""
    given = {p: getattr(args, p) for p in ("torch", "transformers") if getattr(args, p)}
    ranged = [p for p, v in given.items() if ".." in v]
    if len(ranged) != 1:
        raise ValueError(
            "give exactly one range, e.g. --torch 2.10..2.15 or --transformers 5.6.0..5.8.1 "
            f"(got {', '.join(f'--{p} {v}' for p, v in given.items()) or 'none'})"
        )
    package = ranged[0]
    return package, given[package], {p: v for p, v in given.items() if p != package}


def _describe(e: search.Evidence | None) -> str:
    if e is None:
        return "-"
    commit = f" (commit {e.commit})" if e.commit else ""
    return f"{e.release}{commit}: {search.describe_state(e)}"


def cmd_bisect(args: argparse.Namespace) -> int:
    package, text, fixed = _split(args)
    lo, hi = releases.parse_range(text, f"--{package}")
    gating = _names(args.probe, "--probe")
    if args.tries < 1 or args.confirm < 0:
        raise ValueError(f"--tries {args.tries} / --confirm {args.confirm}: need >= 1 / >= 0")
    offered = (
        [v.strip() for v in args.releases.split(",") if v.strip()]
        if args.releases
        else releases.index_versions(package)
    )
    chosen = releases.in_range(offered, lo, hi)
    if len(chosen) < 2:
        raise ValueError(f"--{package} {text}: fewer than two releases in range ({chosen})")
    race_args = None if args.probes_only else tuple(args.race_args.split())
    what = "probes" if race_args is None else "probes + race selection"
    pinned = ", ".join(f"{p} {v}" for p, v in fixed.items()) or "the interpreter's other packages"
    print(f"racegate bisect: {package} {' '.join(chosen)}; fixed: {pinned}")
    print(f"evidence: {what}; UNSAFE when a gating probe reads hazard: {', '.join(gating) or '-'}")
    oracle = evidence.ReleaseOracle(
        package, fixed, gating, race_args, args.envs, args.timeout, progress=print,
        records=args.records,
    )  # fmt: skip
    t0 = time.monotonic()
    result = search.bisect(chosen, oracle, tries=args.tries, confirm=args.confirm)
    wall = time.monotonic() - t0
    print(format_result(result, package, wall))
    if args.json_out:
        text = json.dumps(to_json(result, package, wall), indent=1) + "\n"
        write_whole(args.json_out, text, mode=PUBLISHED)
    return result.exit_code


def compare_url(result: search.Result | search.Change, package: str) -> str:
    a, b = result.before, result.after
    if a is None or b is None:
        return ""
    if package == "torch":
        return COMPARE_URL["torch"].format(
            a=a.commit or f"v{a.release}", b=b.commit or f"v{b.release}"
        )
    return COMPARE_URL[package].format(a=a.release, b=b.release)


def format_change(change: search.Change, package: str) -> list[str]:
    """One confirmed change: both releases with their commits and states, the range, why."""
    why = "; ".join(f"{k} {a} -> {b}" for k, (a, b) in change.changed_observations().items())
    lines = [
        f"{change.direction}: {package} {_describe(change.after)}",
        f"{change.older}: {package} {_describe(change.before)}",
        f"upstream range: {compare_url(change, package)}",
        "why: " + (why or "the decision changed with no observation differing"),
    ]
    for e in (change.before, change.after):
        if e.why:
            lines.append(f"  {e.release} is {e.hazard}: {e.why}")
    return lines


def format_result(result: search.Result, package: str, wall: float) -> str:
    lines = [f"outcome: {result.outcome} ({len(result.checked)} answers, {wall:.0f} s)"]
    for change in result.changes:
        lines += format_change(change, package)
    if result.outcome is search.Outcome.CHANGED:
        lines.append("confirmed: each neighbour re-run and decided the same way")
    elif result.outcome is search.Outcome.UNCHANGED:
        lines.append(f"no change: {_describe(result.before)} ... {_describe(result.after)}")
    else:
        if result.changes:
            lines.append("(the change(s) above were confirmed before the search stopped)")
        lines.append(f"no culprit named: {result.why}")
    lines.append(
        f"exit {result.exit_code} (the gate's code for the newest release's decision; "
        "7 when the search could not decide)"
    )
    return "\n".join(lines)


def _changes(result: search.Result) -> list[tuple[str, str, str]]:
    return [(k, a, b) for k, (a, b) in result.changed_observations().items()]


def to_json(result: search.Result, package: str, wall: float) -> dict[str, Any]:
    def ev(e: search.Evidence | None) -> dict[str, Any] | None:
        if e is None:
            return None
        return {
            "release": e.release,
            "decision": str(e.decision),
            "commit": e.commit,
            "observations": dict(e.observations),
            "note": e.note,
            "class": e.hazard,
            "production": None if e.production is None else str(e.production),
            "why": e.why,
        }

    return {
        "package": package,
        "releases": result.releases,
        "outcome": str(result.outcome),
        "direction": result.direction,
        "before": ev(result.before),
        "after": ev(result.after),
        "compare_url": compare_url(result, package),
        "changed": {k: [a, b] for k, a, b in _changes(result)},
        "changes": [
            {
                "direction": c.direction,
                "older": c.older,
                "before": ev(c.before),
                "after": ev(c.after),
                "compare_url": compare_url(c, package),
                "changed": {k: list(v) for k, v in c.changed_observations().items()},
            }
            for c in result.changes
        ],
        "why": result.why,
        "checked": [ev(e) for e in result.checked],
        "wall_s": round(wall, 1),
        "exit_code": result.exit_code,
    }


def cmd_repro(args: argparse.Namespace) -> int:
    if args.probe not in repro.TEMPLATES:
        raise ValueError(f"--probe {args.probe!r}: choose from: {', '.join(repro.TEMPLATES)}")
    if args.out.suffix != ".py":
        raise ValueError(f"--out {args.out}: give a .py file path")
    made = {v: evidence.make_env({"torch": v}, args.envs, print) for v in (args.bad, args.good)}
    ok, text, report = repro.verified(args.probe, made[args.bad], made[args.good], args.out.name)
    print(report)
    if not ok:
        print(
            f"racegate repro: not written: the reproducer did not tell {args.bad} from {args.good}"
        )
        return 1
    args.out.parent.mkdir(parents=True, exist_ok=True)
    write_whole(args.out, text, mode=PUBLISHED)
    print(f"racegate repro: wrote {args.out} ({len(text.splitlines())} lines)")
    return 0


COMMANDS = {"bisect": cmd_bisect, "repro": cmd_repro}
__all__ = ["COMMANDS", "EXIT_USAGE", "add_parsers"]
