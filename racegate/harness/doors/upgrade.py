"""`racegate upgrade`: one decision on upgrading torch or transformers, on this hardware.

`python -m racegate upgrade transformers==5.8.1 [torch==X]` builds the candidate environment
beside the current one (racegate.harness.run.envs), runs the race selection (`pytest -m race`, the
control and the production strategy) with the current env's python and with the candidate's, each
judging its own records into its own run folder, then the interleaved throughput A/B of the
production strategy between the two (racegate.harness.ab, where this hardware has a throughput
floor), and prints one decision (racegate.harness.judge.gate) whose exit code it returns. Each
side's decision is the one its pytest wrote to its run folder (--decision-file,
racegate.harness.judge.decision_file), never read back from the printed text.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import os
import re
import shlex
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from racegate.harness.doors import options, sizing
from racegate.harness.judge import decision_file
from racegate.harness.judge.gate import DECIDED_EXITS, EXIT_USAGE, Decision, Word, combine
from racegate.harness.run import envs, state
from racegate.harness.run.record import RunRecord
from racegate.harness.run.slots import SlotPool
from racegate.harness.scenario import env_names
from racegate.harness.scenario.vocab import Outcome

WIDTH = 78
DECISION_FILE = "decision.json"  # in the side's run folder, beside its records
_BLOCK_TITLE = " racegate verdict "
# Where the race does not show on CPU (docs/torch-releases.md,
# racegate/harness/expectations/probes.toml): the newest torch whose CPU runs still fire it.
LAST_CPU_FIRING_TORCH = "2.12"
# How the verdict names a probe's finding (racegate.harness.judge.verdict's MASKED and gone
# reasons).
_PROBE_SAYS = r"probe (\w+) (shows the hazard(?: on torch [\w.+]*\w)?|says the hazard is \w+)"
CLEAN = (Outcome.OK, Outcome.NOT_CONCURRENT)  # runs that show no failure
READER_GRACE_S = 30.0  # a side's output reader after its pytest ended, at most


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "upgrade",
        help="check an upgrade of torch or transformers on this hardware, in a candidate venv",
        description=__doc__.splitlines()[0],
    )
    p.add_argument("changes", nargs="+", help="transformers==VERSION and/or torch==VERSION")
    p.add_argument(
        "--python",
        type=Path,
        default=None,
        help="the current environment's python (default: this one)",
    )
    p.add_argument(
        "--find-links",
        type=Path,
        action="append",
        default=[],
        help="a folder of wheels (a wheelhouse): install from it only, offline (--no-index)",
    )
    p.add_argument(
        "--ab-runs",
        type=int,
        default=3,
        help="A/B runs per side (0: no A/B; default: %(default)s)",
    )
    p.add_argument(
        "--ab",
        choices=("auto", "always"),
        default="auto",
        help="auto: the A/B on a GPU, and on a CPU only where the project's baselines have a "
        "throughput floor for it (a CPU box's tokens/s say little about a GPU fleet's); "
        "always: run it anyway (default: %(default)s)",
    )
    p.add_argument(
        "--pytest-args",
        type=shlex.split,
        default=[],
        help="more options for both sides' `pytest -m race`, one string "
        "(e.g. --pytest-args '--repeat 5 -n 8': racegate's options short, as here, or as pytest "
        "spells them, --racegate-repeat); default: the production strategy and its "
        "control, the suite's other defaults",
    )


@dataclass(frozen=True)
class SideResult:
    name: str  # "current" or "candidate"
    env: envs.Environment
    records: Path
    decision: Decision
    block: list[str]  # its verdict block, as pytest printed it
    wall_s: float


def _say(line: str) -> None:
    print(f"racegate upgrade: {line}", file=sys.stderr, flush=True)


def is_progress(line: str) -> bool:
    """A line of `pytest -v` that says a case ended (`path::case[id] XFAIL [ 40%]`, whatever its
    word: the suite's cases are racegate/cases/..., a project's anywhere) or failed."""
    return bool(re.match(r"\S+\.py::\S+ [A-Z]+", line)) or "FAILED" in line


def verdict_block(lines: Sequence[str]) -> list[str]:
    """The side's verdict block as pytest printed it ([] where it printed none): shown in the
    decision, and where MASKED and the probes' findings are quoted from."""
    start = max((i for i, ln in enumerate(lines) if _BLOCK_TITLE in ln), default=None)
    return list(lines[start:]) if start is not None else []


def side_decision(path: Path, records: Path, exit_code: int, lines: Sequence[str]) -> Decision:
    """The decision the side's pytest wrote to `path` about `records`, taken only where pytest
    exited with its code (racegate.harness.judge.decision_file.read); else UNDECIDED, naming why and
    pytest's last line (fail closed)."""
    try:
        return decision_file.read(path, records=records, exit_code=exit_code)
    except decision_file.DecisionFileError as exc:
        tail = [ln.strip() for ln in lines if ln.strip()][-1:] or ["(no output)"]
        why = f"pytest -m race exited {exit_code}, no decision taken: {exc}"
        why += f"; its last line: {tail[0]}"
        return Decision(Word.UNDECIDED, why, "fix what stopped it, then run again")


class _Running:
    """One side's `pytest -m race`, started: its output goes to its log, its progress lines to
    stderr marked [name], read by a thread of its own so that two sides can run at once."""

    def __init__(
        self,
        name: str,
        env: envs.Environment,
        root: Path,
        pytest_args: Sequence[str],
        left: str,
        extra_env: dict[str, str] | None = None,
        now: str = "running",
    ) -> None:
        self.name, self.env = name, env
        self.records = state.new_run(root)
        self.decided = self.records.parent / DECISION_FILE
        cmd = [str(env.python), "-m", "pytest", "-m", "race", "-v", "-p", "no:cacheprovider"]
        # Path options in one word each (options.PATH_FLAGS says why)
        cmd += [f"--racegate-results={self.records}", *pytest_args]
        cmd += [f"--racegate-decision-file={self.decided}"]
        _say(f"race selection, {name} ({env.describe()}): {now}; left: {left}")
        _say(f"  {shlex.join(cmd)}")
        self.lines: list[str] = []
        self.started = time.monotonic()
        self.proc = subprocess.Popen(
            cmd,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            cwd=root,
            # per-case progress as it happens
            env={**os.environ, "PYTHONUNBUFFERED": "1", **(extra_env or {})},
        )
        self._log = (self.records.parent / "pytest.txt").open("w")  # after: none left open
        self._reader = threading.Thread(target=self._read, name=f"{name} output", daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        with self._log as out:
            for line in self.proc.stdout:
                out.write(line)
                self.lines.append(line.rstrip("\n"))
                if is_progress(line):  # one write: the other side's thread writes too
                    sys.stderr.write(f"  [{self.name}] {line.rstrip()}\n")
                    sys.stderr.flush()

    def finish(self) -> SideResult:
        """Waits for pytest and its output; the side's decision and verdict block."""
        code = self.proc.wait()
        self.join_output(READER_GRACE_S)
        assert self.proc.stdout is not None
        self.proc.stdout.close()
        wall = time.monotonic() - self.started
        decision = side_decision(self.decided, self.records, code, self.lines)
        block = verdict_block(self.lines)
        if code not in DECIDED_EXITS:
            block = [*block, *self.lines[-5:]]
        # A pytest that ended any other way (its exit 2 after a collection error, a signal from
        # outside) is UNDECIDED, naming its exit; only a Ctrl-C that reached upgrade itself
        # (KeyboardInterrupt) ends upgrade without a decision.
        return SideResult(self.name, self.env, self.records, decision, block, wall)

    def join_output(self, timeout_s: float) -> None:
        """Waits for the reader to reach the end of pytest's output, at most timeout_s: an
        xdist worker that outlived its controller can hold the pipe open."""
        self._reader.join(timeout=timeout_s)

    def stop(self) -> None:
        """Stops this pytest, its records kept (stop_all)."""
        stop_all([self])


def stop_all(sides: Sequence[_Running], own_s: float = 5, grace_s: float = READER_GRACE_S) -> None:
    """Stops every side's pytest at once, records kept: a Ctrl-C at the terminal reached them
    too, so first own_s for all to end on their own, then SIGINT (their Ctrl-C) to those still
    running, then SIGKILL after grace_s; each side's reader waits at most grace_s after (a
    worker that outlived its controller can hold the pipe)."""
    for send, wait_s in ((None, own_s), (signal.SIGINT, grace_s), (signal.SIGKILL, grace_s)):
        live = [side for side in sides if side.proc.poll() is None]
        if not live:
            break
        if send is not None:
            for side in live:
                side.proc.send_signal(send)
        deadline = time.monotonic() + wait_s
        for side in live:
            with contextlib.suppress(subprocess.TimeoutExpired):
                side.proc.wait(timeout=max(0.0, deadline - time.monotonic()))
    for side in sides:
        side.join_output(grace_s)


def _ended(side: SideResult, left: str) -> None:
    _say(
        f"race selection, {side.name}: {side.decision.word} in {side.wall_s:.0f} s "
        f"(records: {side.records}); left: {left}"
    )


def run_side(
    name: str, env: envs.Environment, root: Path, pytest_args: Sequence[str], left: str
) -> SideResult:
    """One side's race selection, alone."""
    running = _Running(name, env, root, pytest_args, left)
    try:
        side = running.finish()
    except BaseException:  # Ctrl-C: pytest stops too
        running.stop()
        raise
    _ended(side, left)
    return side


def run_sides(
    sides: Sequence[tuple[str, envs.Environment]],
    root: Path,
    pytest_args: Sequence[str],
    slots: int,
    after: str,
) -> list[SideResult]:
    """The sides' race selections at once, over one pool of `slots` run slots they share
    (racegate.harness.run.slots, handed over in env_names.SLOTS): together they never make more runs
    at once than the host has slots, and the one with runs left takes the slots the other's
    ended cases free. `after`: what is left once both end."""
    pool = SlotPool.make(slots)
    handed = {env_names.SLOTS: pool.handoff()}
    running: list[_Running] = []
    try:
        names = " and ".join(name for name, _ in sides)
        _say(f"race selections: {names} at once, over {slots} run slots; left: {after}")
        for name, env in sides:
            others = " and ".join(f"the {n}'s" for n, _ in sides if n != name)
            now = f"running, {others} at the same time"
            running.append(_Running(name, env, root, pytest_args, after, handed, now))
        done: dict[str, SideResult] = {}
        while len(done) < len(running):
            for side in running:
                if side.name not in done and side.proc.poll() is not None:
                    done[side.name] = side.finish()
                    still = [s.name for s in running if s.name not in done]
                    now = f"the {' and '.join(still)}'s race selection (running), " if still else ""
                    _ended(done[side.name], f"{now}{after}")
            time.sleep(0.2)
        return [done[side.name] for side in running]
    except BaseException:  # Ctrl-C, or a side that could not start: every pytest stops
        stop_all(running)
        raise
    finally:
        pool.remove()


def roles(pytest_args: Sequence[str]) -> tuple[str, str] | None:
    """(control, production): the project's roles ([tool.racegate], else the workload's
    roles()); None when the user's pytest options name the strategies themselves."""
    if any(a.partition("=")[0] == "--racegate-strategies" for a in pytest_args):
        return None
    from racegate.harness.scenario import workload_api

    workload, _where, production, control = options.project_settings(None)
    names = (control.name, production.name)
    if "default" in (production.where, control.where):
        loaded = workload_api.load_workload(workload_api.WorkloadSpec(workload))
        own = workload_api.roles_of(loaded, workload)
        names = (
            own.control if control.where == "default" else control.name,
            own.production if production.where == "default" else production.name,
        )
    return names


def first_failure(records: Path, strategy: str | None, control: str | None) -> str:
    """The first failed run of `strategy` (None: of any strategy but the control) in the
    records, as 'strategy outcome: detail' (one line)."""
    from racegate.harness.judge import inputs

    try:
        recs = inputs.read_records([records])
    except (OSError, ValueError):
        return ""
    for rec in recs:
        name = rec.scenario.strategy
        mine = name == strategy if strategy else name != control
        if mine and rec.outcome not in CLEAN:
            detail = " ".join((rec.detail or "").split())[:300]
            return f"{name} {rec.outcome}: {detail}" if detail else f"{name} {rec.outcome}"
    return ""


def _own_error_line(current: SideResult, candidate: SideResult, strategy: str | None) -> str:
    """Whether the trainer's own error (not torch's) fails both sides (race_evidence)."""
    from racegate.harness.judge import inputs
    from racegate.harness.judge.race_evidence import own_error_sides

    try:
        sides = [inputs.read_records([s.records]) for s in (current, candidate)]
    except (OSError, ValueError):
        return ""
    return own_error_sides(*sides, strategy)


def _hardware(records: Path) -> tuple[str, str]:
    """(baselines key, words) of the hardware the side's records ran on: ('cpu', 'cpu')."""
    from racegate.harness.judge import inputs
    from racegate.harness.judge.baselines import hardware_key

    try:
        recs = inputs.read_records([records])
    except (OSError, ValueError):
        return "unknown", "this hardware"
    if not recs:
        return "unknown", "this hardware"
    key = hardware_key(recs[0])
    name = recs[0].hardware.device_name or "cpu"
    return key, ("CPU" if key == "cpu" else f"{name} ({key})")


def asked_of(side: SideResult) -> dict[str, str]:
    """The torch and transformers a side was asked to run: the candidate's changes over the
    current environment's versions (the current side: its own)."""
    return {k: side.env.changes.get(k, side.env.versions.get(k, "")) for k in envs.PACKAGES}


def versions_differ(name: str, records: Sequence[RunRecord], asked: dict[str, str]) -> str | None:
    """Why the side's records are not of the versions asked (None: every record ran them):
    a side is what its records say, whatever its environment claims."""
    for package, want in asked.items():
        ran = Counter(getattr(r.versions, package) for r in records)
        other = {v: n for v, n in ran.items() if v.split("+")[0] != want.split("+")[0]}
        if other:
            seen = ", ".join(f"{v} ({n} of {len(records)})" for v, n in other.items())
            return f"the {name}'s records ran {package} {seen}, not the {want} asked"
    return None


def as_asked(sides: Sequence[SideResult]) -> Decision | None:
    """UNDECIDED, saying why, where a side's records ran other versions than it was asked
    (a candidate environment that loaded the base's package); None where each ran its own."""
    from racegate.harness.judge import inputs

    for side in sides:
        try:
            records = inputs.read_records([side.records])
        except (OSError, ValueError):
            continue  # no records to compare: that side's own decision says so
        if why := versions_differ(side.name, records, asked_of(side)):
            rebuild = f"remove {side.env.root} and " if side.env.root else ""
            return Decision(Word.UNDECIDED, why, f"{why}: {rebuild}run the upgrade again")
    return None


def _masked(side: SideResult) -> bool:
    """Undecided, with the verdict calling a strategy MASKED (the control never failed here,
    while a probe shows the hazard in this torch)."""
    return side.decision.word is Word.UNDECIDED and any("MASKED" in ln for ln in side.block)


def _probe_lines(side: SideResult) -> list[str]:
    """What the side's probes said about the hazard (the verdict block names the probe)."""
    text = " ".join(" ".join(ln.split()) for ln in side.block)
    found = re.findall(_PROBE_SAYS, text)
    return [f"probe {name} {what.strip()}" for name, what in dict(found).items()][:3]


def _what(changes: dict[str, str]) -> str:
    return " and ".join(f"{k} {v}" for k, v in sorted(changes.items(), reverse=True))


def _side_by_side(base: envs.Environment, pytest_args: list[str]) -> tuple[list[str], int]:
    """(pytest-xdist arguments for each side's race selection, the run slots the two sides
    share when they run at once; 0: one side after the other).

    Sized to this host as the main command's are (racegate.harness.doors.sizing,
    racegate.cases.plan's order): its W run slots shared by both sides, each with W/2 workers
    (rounded down: never more cases than slots, so a case waits for its own slot only while other
    cases' batches hold extras, at most racegate.harness.run.slots.OWN_WAIT_S), and the tail of one
    side (the production strategy's last batches) leaves no slot idle while the other has cases. One
    side after the other where the user chose (-n, --dist, --case-jobs N), the host has fewer than 2
    slots, or the current environment has no pytest-xdist (the candidate shares its
    packages)."""
    sized, why = sizing.race_args(pytest_args)
    if sized:
        has = subprocess.run(
            [str(base.python), "-c", "import xdist"], capture_output=True, check=False
        )
        if has.returncode != 0:
            sized, why = [], "one case at a time: the current environment has no pytest-xdist"
    if not sized or _fixes_case_jobs(pytest_args):
        _say(f"race selections: {why}; one side after the other")
        return sized, 0
    slots, gpus, where = sizing.host()
    each = sizing.worker_args(slots // 2, gpus)
    _say(
        f"race selections: both sides at once, {' '.join(each)} each, sharing {slots} run "
        f"slots ({where}); each cell's control case first"
    )
    return each, slots


def _fixes_case_jobs(pytest_args: Sequence[str]) -> bool:
    """--racegate-case-jobs N (not auto): each case's runs at once are fixed, outside any run
    slots."""
    jobs = options.PYTEST_FLAGS["--case-jobs"]
    for flag, value in itertools.pairwise([*pytest_args, ""]):
        given = value if flag == jobs else flag.removeprefix(f"{jobs}=")
        if flag.partition("=")[0] == jobs and given != "auto":
            return True
    return False


def cmd_upgrade(args: argparse.Namespace) -> int:
    try:
        changes = envs.parse_changes(args.changes)
    except ValueError as exc:
        print(f"racegate upgrade: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    if args.ab_runs < 0 or args.ab_runs == 1:
        print(
            f"racegate upgrade: error: --ab-runs {args.ab_runs}: give 0 (no A/B) or 2 or more",
            file=sys.stderr,
        )
        return EXIT_USAGE
    pytest_args = options.to_pytest(args.pytest_args)  # short flags (`--repeat 5`) too
    started = time.monotonic()
    root = state.checkout_root()
    try:
        base = envs.current(args.python)
        same = [k for k, v in changes.items() if base.versions[k].split("+")[0] == v]
        if same:
            raise envs.EnvError(
                f"the current environment already has {', '.join(same)} "
                f"{base.versions[same[0]]}: nothing to upgrade"
            )
        _say(f"current environment: {base.python} ({base.describe()})")
        _say("left: candidate environment, race selection × 2, A/B, decision")
        cand = envs.candidate(
            changes, base=base, where=envs.envs_dir(root), find_links=args.find_links, progress=_say
        )
    except (envs.EnvError, ValueError) as exc:
        print(f"racegate upgrade: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    try:
        named = roles(pytest_args)
    except ValueError as exc:
        print(f"racegate upgrade: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    if named is not None:
        pytest_args = ["--racegate-strategies", ",".join(named), *pytest_args]
    sized, slots = _side_by_side(base, pytest_args)
    pytest_args = [*sized, *pytest_args]
    ab_left = "A/B" if args.ab_runs else "no A/B (--ab-runs 0)"
    if slots:  # the A/B after both, alone on the host (its timings)
        sides = [("current", base), ("candidate", cand)]
        current, candidate = run_sides(sides, root, pytest_args, slots, f"{ab_left}, decision")
    else:
        left = f"candidate's race selection, {ab_left}, decision"
        current = run_side("current", base, root, pytest_args, left)
        candidate = run_side("candidate", cand, root, pytest_args, f"{ab_left}, decision")
    key, hardware = _hardware(candidate.records)
    if key == "unknown":
        key, hardware = _hardware(current.records)
    ab_line, ab_decision = _ab(args, base, cand, root, key, named[1] if named else None)
    decision = as_asked([current, candidate]) or combine(
        [candidate.decision, *([ab_decision] if ab_decision else [])],
        empty="no decision",
    )
    lines = _decision_block(args, changes, hardware, current, candidate, ab_line, decision, named)
    wall = time.monotonic() - started
    print("\n".join(lines))
    print(f"(wall time {wall:.0f} s; exit {decision.exit_code})")
    return decision.exit_code


def ab_run_args(key: str, production: str | None) -> list[str]:
    """The `harness run` options of each A/B run: one timed run of the production strategy
    (racegate.harness.ab.defaults), on GPU 0 where the sides' records ran on a GPU (`key`, the
    baselines' hardware key: 'cpu' on a CPU)."""
    from racegate.harness.ab.defaults import ONE_TIMED_RUN

    devices = [] if key in ("cpu", "unknown") else ["--devices", "0"]
    return [*devices, *ONE_TIMED_RUN, *(["--strategy", production] if production else [])]


def _ab(
    args: argparse.Namespace,
    base: envs.Environment,
    cand: envs.Environment,
    root: Path,
    key: str,
    production: str | None,
) -> tuple[str, Decision | None]:
    """(the throughput line, a decision where the A/B failed the upgrade, else None)."""
    from racegate.harness.ab.run import Side, run_ab
    from racegate.harness.ab.store import write_ab
    from racegate.harness.judge.baselines import baseline_path, project_folder

    if args.ab_runs == 0:
        return "throughput: A/B not run (--ab-runs 0)", None
    try:  # the project's floors ([tool.racegate] baselines), as the gate reads them
        floor = baseline_path(project_folder(root), key)
    except ValueError as exc:
        floor, missing = None, str(exc)
    else:
        missing = f"{floor} has none"
    if args.ab == "auto" and key in ("cpu", "unknown") and (floor is None or not floor.is_file()):
        return (
            f"throughput: A/B not run: on a CPU only where the project's baselines have a "
            f"throughput floor for it ({missing}; --ab always runs it anyway)",
            None,
        )
    _say(
        f"A/B: {args.ab_runs} runs a side, interleaved, of the production strategy; left: decision"
    )
    records = state.new_run(root).parent
    result = run_ab(
        Side("reference", str(base.python)),
        Side("candidate", str(cand.python)),
        ab_run_args(key, production),
        runs=args.ab_runs,
        records_dir=records,
        progress=lambda line: _say(f"  A/B {line}"),
    )
    write_ab(records / "ab.json", result)
    if result.interrupted:  # the user's Ctrl-C: no decision (exit 130), as in the race phase
        raise KeyboardInterrupt
    tp = result.throughput
    ratio = (
        f"candidate/current tokens/s {tp.ratio_text()} (95% interval), {tp.word}"
        if tp is not None
        else "no ratio (too few runs)"
    )
    line = f"throughput: {ratio}; A/B of {args.ab_runs} runs a side in {records}"
    if production is None:  # the user's --strategies: no role to time
        line += " (harness run's default production strategy: --pytest-args named the strategies)"
    if result.failed:
        why = result.why_failed or "the A/B failed"
        return line, Decision(Word.UNSAFE, f"A/B: {why}", f"do not upgrade: {why}")
    return line, None


def _rerun(args: argparse.Namespace, extra: str = "", *, drop_caps: bool = False) -> str:
    """The command again; drop_caps leaves out --power-cap/--control-repeat/--control-max given
    to pytest, so their defaults (more runs) apply."""
    cmd = ["python", "-m", "racegate", "upgrade", *args.changes]
    if args.python:
        cmd += ["--python", str(args.python)]
    for link in args.find_links:
        cmd += ["--find-links", str(link)]
    given = options.to_pytest(args.pytest_args)
    if drop_caps:
        caps = ("--power-cap", "--control-repeat", "--control-max")
        for flag in (options.PYTEST_FLAGS[c] for c in caps):
            while flag in given[:-1]:
                i = given.index(flag)
                del given[i : i + 2]
    tail = [*given, *shlex.split(extra)]
    return shlex.join([*cmd, *(["--pytest-args", shlex.join(tail)] if tail else [])])


def _decision_block(
    args: argparse.Namespace,
    changes: dict[str, str],
    hardware: str,
    current: SideResult,
    candidate: SideResult,
    ab_line: str,
    decision: Decision,
    named: tuple[str, str] | None,
) -> list[str]:
    out = [" racegate upgrade ".center(WIDTH, "=")]
    if _masked(candidate):  # the decision is the candidate's: its masking comes first
        torch = candidate.env.versions["torch"]
        probes = _probe_lines(candidate) or ["(no probe line in its verdict block)"]
        out.append(
            f"MASKED: with torch {torch} on {hardware} the positive control never failed in the "
            f"candidate's runs, so they cannot show the race. Checked instead, the probes (is "
            f"the hazard in this torch?): {' / '.join(probes)}. The command that can decide: "
            f"`{_rerun(args, drop_caps=True)}` on a GPU host, or with --python naming an "
            f"environment with torch <= {LAST_CPU_FIRING_TORCH} (the race fires on CPU there)."
        )
    for side in (current, candidate):
        out.append(
            f"{side.name}: {side.env.describe()} ({side.env.python}): race selection "
            f"{side.decision.word}: {side.decision.reason} [{side.wall_s:.0f} s; records "
            f"{side.records}]"
        )
    out.append(ab_line)
    what = f"upgrade to {_what(changes)} on {hardware}"
    if decision.word is Word.SAFE:
        out.append(f"{what}: SAFE")
    elif decision.word is Word.UNSAFE:
        control, production = named or (None, None)
        error = first_failure(candidate.records, production, control)
        out.append(f"{what}: UNSAFE ({decision.reason}" + (f"; error: {error})" if error else ")"))
        out += [line] if (line := _own_error_line(current, candidate, production)) else []
    else:
        add = decision.next or decision.reason
        out.append(f"{what}: UNDECIDED ({add}; the command: `{_rerun(args, drop_caps=True)}`)")
    return out


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m racegate")
    sub = parser.add_subparsers(dest="command", required=True)
    add_parser(sub)
    args = parser.parse_args(["upgrade", *(argv if argv is not None else sys.argv[1:])])
    return cmd_upgrade(args)


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
