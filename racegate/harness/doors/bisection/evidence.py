"""The bisection's oracle: one release's environment, its probes and race selection, one decision.

Environments are `racegate.harness.run.envs.candidate` venvs beside the current one (under
.racegate/envs) by default; with `--envs DIR` each pinned package is installed once with `pip
install --target DIR/<pkg>-<v>` (niced; PIP_CONSTRAINT lifted, as noxfile.py's cpu_matrix does) and
put first on PYTHONPATH of the current interpreter. Probes and the race selection run as
subprocesses of that environment's python from the repository root (`python -m
racegate.harness.probes.runner`, `python -m pytest -m race ...`), never imported here. Which probes
decide is a choice (`gating`); every probe's verdict is kept as an observation, so the report
can say what else changed. The race selection writes its run records to a folder of the
bisection's; they are
judged here again with this step's own probe verdicts (racegate.harness.judge.verdict.decide), which
gives the step's class (racegate.harness.doors.bisection.steps: RACES, MASKED, GONE, UNCLEAR) beside
the gate's word. A release asked again (unsettled, or a neighbour's confirmation) merges the records
of all its earlier answers (`--records-from`): the control's rate and the production runs
accumulate until power decides, and a race the control showed once on a release stays shown
there (race_evidence admits only the race itself), while silence must hold over every run.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from racegate.harness.doors.bisection import steps
from racegate.harness.doors.bisection.search import Evidence
from racegate.harness.doors.options import to_pytest
from racegate.harness.judge import decision_file
from racegate.harness.judge import verdict as race_verdict
from racegate.harness.judge.baselines import production_bars
from racegate.harness.judge.gate import EXIT_CODES, Decision, Word, combine, decide_gate
from racegate.harness.judge.inputs import read_records, roles_of
from racegate.harness.run import code_root, envs, state

# The nested-FX error's own probes: the incident's hazard (a compiled call raising because
# another thread traces, or a flag left set after an overlap).
NESTED_FX_PROBES = (
    "compiled_call_during_make_fx",
    "compiled_call_during_compile",
    "flag_stuck_after_overlap",
)
_WORD_OF_EXIT = {code: Word(word) for word, code in EXIT_CODES.items() if word in set(Word)}
_VERSIONS = (
    "import json, importlib.metadata as m, torch\n"
    "try: tf = m.version('transformers')\n"
    "except m.PackageNotFoundError: tf = None\n"
    "print(json.dumps({'torch': torch.__version__, 'git_version': torch.version.git_version,"
    " 'transformers': tf, 'python': __import__('sys').version.split()[0]}))"
)


@dataclass(frozen=True)
class Runner:
    """An environment (racegate.harness.run.envs.Environment) and the variables its python runs
    with (the PYTHONPATH of a --target install; none for a candidate venv)."""

    env: envs.Environment
    variables: dict[str, str] = field(default_factory=dict)

    def run(self, args: Sequence[str], timeout: float) -> subprocess.CompletedProcess[str]:
        """`python ARGS` in this environment, from the repository root."""
        return subprocess.run(
            [str(self.env.python), *args],
            cwd=code_root.child_cwd(),
            env={**os.environ, **self.variables},
            capture_output=True,
            text=True,
            timeout=timeout,
        )


Progress = Callable[[str], None]
_NICE_PIP = ("nice", "-n", "15", sys.executable, "-m", "pip", "install", "-q")


def target_dir_env(pins: Mapping[str, str], where: Path, progress: Progress) -> Runner:
    """The current interpreter with each pin installed once under where/<pkg>-<version>."""
    paths = []
    for package, version in pins.items():
        folder = where / f"{package}-{version}"
        if not folder.is_dir():
            partial = folder.with_name(f"{folder.name}.partial")
            shutil.rmtree(partial, ignore_errors=True)
            partial.parent.mkdir(parents=True, exist_ok=True)
            progress(f"installing {package}=={version} into {folder} (pip --target, niced)")
            done = subprocess.run(
                [*_NICE_PIP, "--target", str(partial), f"{package}=={version}"],
                env={**os.environ, "PIP_CONSTRAINT": "/dev/null"},
                capture_output=True,
                text=True,
            )
            if done.returncode != 0:
                raise RuntimeError(
                    f"pip could not install {package}=={version}: {done.stderr.strip()[-400:]}"
                )
            partial.rename(folder)
        paths.append(str(folder))
    pythonpath = code_root.pythonpath(*paths)
    here = envs.Environment(Path(sys.executable), {}, dict(pins), where)
    return Runner(here, {"PYTHONPATH": pythonpath})


def make_env(pins: Mapping[str, str], where: Path | None, progress: Progress) -> Runner:
    """A candidate venv beside the current environment (racegate.harness.run.envs.candidate, under
    .racegate/envs) by default; with `where`, --target installs under it (target_dir_env)."""
    if where is not None:
        return target_dir_env(pins, where, progress)
    try:
        where = envs.envs_dir(state.checkout_root())
        made = envs.candidate(dict(pins), base=envs.current(), where=where, progress=progress)
    except envs.EnvError as exc:
        raise RuntimeError(str(exc)) from None
    return Runner(made)


def installed(env: Runner, timeout: float = 300) -> dict[str, str]:
    """torch/transformers/python versions and torch's upstream commit, read in `env`."""
    done = env.run(["-c", _VERSIONS], timeout)
    if done.returncode != 0:
        raise RuntimeError(f"{env.env.python} cannot import torch: {done.stderr.strip()[-400:]}")
    return {k: v for k, v in json.loads(done.stdout.strip().splitlines()[-1]).items() if v}


def probe_verdicts(env: Runner, timeout: float = 600) -> dict[str, str]:
    """Every probe's verdict in `env` (one isolated `racegate.harness.probes.runner` run)."""
    with tempfile.TemporaryDirectory(prefix="racegate-bisect-") as tmp:
        out = Path(tmp) / "probes.json"
        done = env.run(
            ["-m", "racegate.harness.probes.runner", "--isolated", "--json-out", str(out)], timeout
        )
        if not out.is_file():
            raise RuntimeError(
                f"the probes wrote nothing (exit {done.returncode}): {done.stderr.strip()[-400:]}"
            )
        doc = json.loads(out.read_text())
    return {str(r["name"]): str(r["verdict"]) for r in doc["results"]}


def probe_decision(verdicts: Mapping[str, str], gating: Sequence[str]) -> Decision:
    """UNSAFE when a gating probe reads hazard, UNDECIDED when one hung, failed or is missing
    (never SAFE on what did not run), else SAFE."""
    missing = [p for p in gating if p not in verdicts]
    unclear = [p for p in gating if verdicts.get(p) in ("hang", "error")]
    hazard = [p for p in gating if verdicts.get(p) == "hazard"]
    if hazard:
        return Decision(Word.UNSAFE, f"probe {', '.join(hazard)}: hazard", "")
    if not gating:
        return Decision(Word.SAFE, "no gating probe", "")
    if missing or unclear:
        names = ", ".join(missing + unclear)
        return Decision(Word.UNDECIDED, f"probe {names}: no verdict", "")
    return Decision(Word.SAFE, f"probes {', '.join(gating)}: safe or n/a", "")


def _run_race(
    env: Runner, args: Sequence[str], timeout: float
) -> subprocess.CompletedProcess[str] | None:
    try:
        return env.run(["-m", "pytest", "-m", "race", "-p", "no:cacheprovider", *args], timeout)
    except subprocess.TimeoutExpired:
        return None


def _session_word(
    done: subprocess.CompletedProcess[str] | None, timeout: float, path: Path, records: Path
) -> Decision:
    """The race selection's own decision: the file its session wrote (--decision-file), taken
    only whole, about `records` and matching pytest's exit (racegate.harness.judge.decision_file, as
    `racegate upgrade` reads each side's); UNDECIDED naming what was wrong otherwise, never a
    word read from the printed text."""
    if done is None:
        return Decision(Word.UNDECIDED, f"race selection ran past {timeout:g} s", "")
    try:
        decided = decision_file.read(path, records=records, exit_code=done.returncode)
    except decision_file.DecisionFileError as exc:
        tail = (done.stdout.strip().splitlines() or [""])[-1].strip()
        return Decision(
            Word.UNDECIDED, f"race selection: pytest exit {done.returncode}: {exc} ({tail})", ""
        )
    return Decision(decided.word, f"race selection: {decided.reason}", decided.next)


def calibration_of(args: Sequence[str]) -> race_verdict.Calibration:
    """The calibration the race selection judges with: --power-cap and --control-repeat as
    given in its arguments (pytest's defaults otherwise), so both judge alike."""
    parser = argparse.ArgumentParser(add_help=False)
    default = race_verdict.Calibration()
    parser.add_argument("--power-cap", type=int, default=default.cap)
    parser.add_argument("--control-repeat", type=int, default=default.control_repeat)
    # Short (`--power-cap 5`) or as pytest spells them (`--racegate-power-cap 5`).
    known, _ = parser.parse_known_args([a.replace("--racegate-", "--", 1) for a in args])
    return race_verdict.Calibration(cap=known.power_cap, control_repeat=known.control_repeat)


@dataclass(frozen=True)
class RaceStep:
    """One race selection judged: the production strategy's word, the step's class and why."""

    decision: Decision
    hazard: steps.Hazard
    why: str
    records: Path | None  # this answer's records file (None: none written)
    statuses: dict[str, str] = field(default_factory=dict)  # strategy -> verdict status


def judge_race(
    records: list, probes: Mapping[str, str], cal: race_verdict.Calibration
) -> tuple[Decision, steps.Hazard, str, dict[str, str]]:
    """(production word, class, why, status per strategy) of a release's race-selection records,
    judged with this release's probe verdicts. Pure: the CLI's and pytest's verdict, reused."""
    if not records:
        return decide_gate(None), steps.Hazard.UNCLEAR, "no run records", {}
    production, control = roles_of(records)
    cal = race_verdict.Calibration(control=control, cap=cal.cap, control_repeat=cal.control_repeat)
    judged = race_verdict.decide(
        records, production=production, probes=probes, strategies=[control], calibration=cal
    )
    hazard, why = steps.from_race(judged, probes)
    statuses = {s.strategy: str(s.status) for s in judged.strategies}
    bars = production_bars(records, production)  # as pytest's verdict and the report
    return decide_gate(judged, missed=bars), hazard, why, statuses


def race_step(
    env: Runner,
    args: Sequence[str],
    timeout: float,
    probes: Mapping[str, str],
    out: Path,
    earlier: Sequence[Path] = (),
) -> RaceStep:
    """The race selection in `env`, its records written to out/records.jsonl and judged with
    the records of `earlier` answers merged; the word fails closed with the session's own
    decision (its decision file)."""
    out.mkdir(parents=True, exist_ok=True)
    # Absolute: the session runs from the repository root, and its decision file names the
    # records it judged as given.
    own, decided = out.resolve() / "records.jsonl", out.resolve() / "decision.json"
    # Path options in one word each (options.PATH_FLAGS says why): an earlier answer's folder
    # given as a word of its own became pytest's rootdir, and the plugin refuses that.
    merge = [f"--racegate-records-from={path}" for path in earlier]
    own_args = [f"--racegate-results={own}", f"--racegate-decision-file={decided}", *merge]
    run_args = [*to_pytest(args), *own_args]  # racegate's options short (`--repeat 3`) too
    done = _run_race(env, run_args, timeout)
    said = _session_word(done, timeout, decided, own)
    try:
        records = read_records([*earlier, own]) if own.is_file() else []
    except (OSError, ValueError) as exc:
        word = Decision(Word.UNDECIDED, f"records unreadable: {exc}", "")
        return RaceStep(word, steps.Hazard.UNCLEAR, str(exc)[:200], None)
    mine, hazard, why, statuses = judge_race(records, probes, calibration_of(args))
    if done is None or _WORD_OF_EXIT.get(done.returncode) is None:
        hazard, why = steps.Hazard.UNCLEAR, said.reason  # a session that did not finish
    word = combine([mine, said], empty="no race selection")
    if said.word is not mine.word:  # pytest also counted failed cases; fail closed
        word = Decision(word.word, f"{word.reason} (records: {mine.word}; pytest: {said.word})", "")
    return RaceStep(word, hazard, why, own if own.is_file() else None, statuses)


@dataclass
class ReleaseOracle:
    """release -> Evidence for one package's releases, the other pins fixed."""

    package: str  # "torch" or "transformers"
    fixed: dict[str, str]  # the other pins ({} keeps the interpreter's own)
    gating: tuple[str, ...] = NESTED_FX_PROBES
    race_args: tuple[str, ...] | None = None  # None: probes only
    where: Path | None = None
    timeout: float = 1800.0
    progress: Progress = print
    records: Path | None = None  # where each answer's race records go (None: a temp folder)
    made: dict[str, Runner] = field(default_factory=dict)
    # per release, the records of all its earlier answers (merged when it is asked again)
    earlier: dict[str, list[Path]] = field(default_factory=dict)
    asked: int = 0

    def env_for(self, release: str) -> Runner:
        if release not in self.made:
            pins = {**self.fixed, self.package: release}
            self.made[release] = make_env(pins, self.where, self.progress)
        return self.made[release]

    def __call__(self, release: str) -> Evidence:
        self.asked += 1
        try:
            env = self.env_for(release)
            got = installed(env)
            verdicts = probe_verdicts(env)
        except (RuntimeError, subprocess.TimeoutExpired, ValueError) as exc:
            return Evidence(release, Word.UNDECIDED, {}, note=str(exc)[:300])
        observations = {f"probe {k}": v for k, v in verdicts.items()}
        parts = [probe_decision(verdicts, self.gating)]
        hazard, why = steps.from_probes(verdicts, self.gating)
        production = None
        if self.race_args is not None:
            if self.records is None:
                self.records = Path(tempfile.mkdtemp(prefix="racegate-bisect-"))
            earlier = list(self.earlier.get(release, []))
            out = self.records / f"{self.asked:02d}-{self.package}-{release}"
            race = race_step(env, self.race_args, self.timeout, verdicts, out, earlier)
            parts.append(race.decision)
            production, hazard, why = race.decision.word, race.hazard, race.why
            observations["race selection"] = str(race.decision.word)
            observations["class"] = str(hazard)
            observations |= {f"verdict {k}": v for k, v in race.statuses.items()}
            if earlier:
                why += f" (with the records of {len(earlier)} earlier answer(s) merged)"
        decision = combine(parts, empty="no evidence")
        evidence = Evidence(
            release,
            decision.word,
            observations,
            commit=got.get("git_version", "") if self.package == "torch" else "",
            note="; ".join(
                [", ".join(f"{k} {got[k]}" for k in ("torch", "transformers") if k in got)]
                + [p.reason for p in parts]
            ),
            hazard=str(hazard),
            production=production,
            why=why,
        )
        if self.race_args is not None and race.records is not None:
            self.earlier.setdefault(release, []).append(race.records)
        self.progress(f"  {release}: {hazard}, {decision.word} ({why}; {evidence.note})")
        return evidence
