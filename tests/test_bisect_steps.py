"""A bisection step's class (racegate.harness.doors.bisection.steps) from real CPU records and probe
verdicts committed under results/, and the search over those classes
(racegate.harness.doors.bisection.search): pure, no torch run, nothing mocked but the oracle's
answers, which are real records judged."""

from __future__ import annotations

import json
import tarfile
from pathlib import Path

import pytest

from racegate.harness.doors.bisection.evidence import calibration_of, judge_race
from racegate.harness.doors.bisection.search import Evidence, Outcome, bisect
from racegate.harness.doors.bisection.steps import Hazard, from_probes, names, settled
from racegate.harness.judge.gate import EXIT_SAFE, EXIT_UNDECIDED, Word
from racegate.harness.judge.inputs import read_records
from racegate.harness.judge.verdict import Calibration

RESULTS = Path(__file__).resolve().parents[1] / "results"
MATRIX = RESULTS / "cpu-torch-releases-probes-and-races" / "data.tar.xz"
S, U, X = Word.SAFE, Word.UNSAFE, Word.UNDECIDED


def probes(release: str) -> dict[str, str]:
    """Every probe's verdict measured on CPU for `release` (results/probes-cpu-torch<V>.json)."""
    doc = json.loads((RESULTS / f"probes-cpu-torch{release}.json").read_text())
    return {str(r["name"]): str(r["verdict"]) for r in doc["results"]}


def records(member: str, tmp_path: Path) -> list:
    """The run records of one cell of the CPU matrix (results/cpu-torch-releases-...)."""
    with tarfile.open(MATRIX) as tar:
        data = tar.extractfile(member)
        assert data is not None
        path = tmp_path / member.replace("/", "_")
        path.write_bytes(data.read())
    return read_records([path])


def cell(release: str, transformers: str = "5.17.0") -> str:
    return f"cpu_matrix-torch-{release}-transformers-{transformers}/records.jsonl"


@pytest.mark.parametrize(
    ("release", "want"),
    [("2.12.1", Hazard.RACES), ("2.13.0", Hazard.MASKED), ("2.14.1", Hazard.GONE)],
    ids=["2.12.1", "2.13.0", "2.14.1"],  # no class name in an id: -k race selects race cases
)
def test_the_class_of_each_release_from_its_cpu_matrix_records(
    release: str, want: Hazard, tmp_path: Path
) -> None:
    word, hazard, why, statuses = judge_race(
        records(cell(release), tmp_path), probes(release), Calibration()
    )
    assert hazard is want, why
    assert statuses["per_device"] == {"RACES": "UNSAFE", "MASKED": "MASKED", "GONE": "SAFE"}[want]
    # these cells ran no warmup_locked (the production strategy): nothing decided for it
    assert word.word is Word.UNDECIDED and statuses["warmup_locked"] == "NOT RUN"


def test_masked_needs_a_probe_that_reads_hazard_else_it_is_gone(tmp_path: Path) -> None:
    """2.13.0's clean records judged with 2.14.1's probes read GONE: the probes decide
    between a masked hazard and a fixed one, the silent control alone does not."""
    masked = judge_race(records(cell("2.13.0"), tmp_path), probes("2.14.1"), Calibration())
    assert masked[1] is Hazard.GONE
    hung = {**probes("2.13.0"), "compiled_call_during_make_fx": "hang"}
    hung = {k: ("hang" if v == "hazard" else v) for k, v in hung.items()}
    unclear = judge_race(records(cell("2.13.0"), tmp_path), hung, Calibration())
    assert unclear[1] is Hazard.UNCLEAR


def test_no_records_or_no_control_run_is_unclear(tmp_path: Path) -> None:
    assert judge_race([], probes("2.12.1"), Calibration())[1] is Hazard.UNCLEAR
    no_control = [
        r for r in records(cell("2.12.1"), tmp_path) if r.scenario.strategy != "per_device"
    ]
    _, hazard, why, _ = judge_race(no_control, probes("2.12.1"), Calibration())
    assert hazard is Hazard.UNCLEAR and "did not run" in why


def test_settled_rules() -> None:
    assert settled(Hazard.MASKED, X)  # masked is an answer, though the gate's word is not
    assert not settled(Hazard.UNCLEAR, U)
    # production short of power with no gating hazard: the decision is UNDECIDED, ask again
    assert not settled(Hazard.RACES, X)
    assert settled(Hazard.RACES, U) and settled(Hazard.GONE, S)
    assert settled("", U) and not settled("", X)  # probes only, no class given


def test_names_of_each_change() -> None:
    races, masked, gone = (Hazard.RACES, U), (Hazard.MASKED, U), (Hazard.GONE, S)
    assert names(races, masked) == ("first masked", "last where the race shows")
    assert names(masked, gone) == ("first fixed", "last bad")
    assert names(gone, races) == ("first bad", "last good")
    assert names(masked, races) == ("first unmasked", "last masked")
    assert names(("", U), ("", S)) == ("first fixed", "last bad")
    assert names((Hazard.RACES, S), (Hazard.RACES, U)) == ("first bad", "last good")
    assert names((Hazard.RACES, X), (Hazard.RACES, X)) == ("first changed", "last unchanged")


def test_probes_only_class() -> None:
    assert from_probes(probes("2.13.0"), ())[0] is Hazard.PRESENT
    assert from_probes(probes("2.14.1"), ())[0] is Hazard.GONE
    assert (
        from_probes({"compiled_call_during_make_fx": "error"}, ["compiled_call_during_make_fx"])[0]
        is Hazard.UNCLEAR
    )


def test_calibration_read_from_the_selection_arguments() -> None:
    cal = calibration_of(["--strategies", "a,b", "--power-cap", "5", "--control-repeat=3"])
    assert (cal.cap, cal.control_repeat) == (5, 3)
    cal = calibration_of(["--racegate-power-cap", "6", "--racegate-control-repeat=2"])
    assert (cal.cap, cal.control_repeat) == (6, 2)
    assert calibration_of([]) == Calibration()


class RealSteps:
    """release -> successive answers, each the real records of a CPU matrix cell judged with
    that release's real probe verdicts (the last answer repeats); counts the asks."""

    def __init__(self, script: dict[str, list[tuple[str, str]]], tmp_path: Path) -> None:
        self.script = script
        self.tmp_path = tmp_path
        self.asked: list[str] = []

    def __call__(self, release: str) -> Evidence:
        self.asked.append(release)
        answers = self.script[release]
        member, probe_release = answers.pop(0) if len(answers) > 1 else answers[0]
        verdicts = probes(probe_release)
        word, hazard, why, _ = judge_race(records(member, self.tmp_path), verdicts, Calibration())
        # the production strategy did not run in these cells: take per_device's word as the
        # step's production word where the class settles it (the search compares states)
        production = S if hazard is Hazard.GONE else (U if hazard is Hazard.RACES else word.word)
        gating = U if from_probes(verdicts, ())[0] is Hazard.PRESENT else S
        observations = {f"probe {k}": v for k, v in verdicts.items()} | {"class": str(hazard)}
        return Evidence(
            release, gating, observations, commit=f"sha-{release}", hazard=str(hazard),
            production=production, why=why,
        )  # fmt: skip


def test_three_classes_in_a_row_name_both_changes_with_real_steps(tmp_path: Path) -> None:
    oracle = RealSteps(
        {r: [(cell(r), r)] for r in ("2.12.1", "2.13.0", "2.14.1")} | {"2.11.0": [
            ("repeat-per_device/cpu_matrix-torch-2.11.0-transformers-5.6.0/records.jsonl", "2.11.0")
        ]},
        tmp_path,
    )  # fmt: skip
    result = bisect(["2.11.0", "2.12.1", "2.13.0", "2.14.1"], oracle, tries=2, confirm=1)
    assert result.outcome is Outcome.CHANGED, result.why
    got = [(c.direction, c.before.release, c.after.release) for c in result.changes]
    assert got == [("first masked", "2.12.1", "2.13.0"), ("first fixed", "2.13.0", "2.14.1")]
    assert result.changes[0].older == "last where the race shows"
    assert result.changes[1].changed_observations()["class"] == ("MASKED", "GONE")
    # each neighbour asked again before its change was named; 2.13.0 once for both changes
    assert all(oracle.asked.count(r) >= 2 for r in ("2.12.1", "2.13.0", "2.14.1"))
    assert oracle.asked.count("2.13.0") == 2
    assert result.exit_code == EXIT_SAFE


def test_a_control_that_missed_once_makes_the_neighbour_flaky_never_a_culprit(
    tmp_path: Path,
) -> None:
    """2.12.1's one-run control missed in the transformers 5.6.0 cell (reads MASKED, so the
    search first sees 2.12.1 as the first masked release) and raced in all 5 runs of its
    repeat: the confirming re-run disagrees, no culprit is named."""
    oracle = RealSteps(
        {
            "2.11.0": [
                ("repeat-per_device/cpu_matrix-torch-2.11.0-transformers-5.6.0/records.jsonl",
                 "2.11.0"),
            ],
            "2.12.1": [
                (cell("2.12.1", "5.6.0"), "2.12.1"),
                ("repeat-per_device/cpu_matrix-torch-2.12.1-transformers-5.6.0/records.jsonl",
                 "2.12.1"),
            ],
            "2.13.0": [(cell("2.13.0"), "2.13.0")],
        },
        tmp_path,
    )  # fmt: skip
    result = bisect(["2.11.0", "2.12.1", "2.13.0"], oracle, tries=2, confirm=1)
    assert result.outcome is Outcome.FLAKY, result.why
    assert "2.12.1 decided MASKED" in result.why and "then RACES" in result.why
    assert result.after is not None and result.after.release == "2.12.1" and not result.changes
    assert result.exit_code == EXIT_UNDECIDED


def test_an_unclear_step_is_asked_again_and_its_settled_answer_used(tmp_path: Path) -> None:
    oracle = RealSteps(
        {
            "2.12.1": [(cell("2.12.1"), "2.12.1")],
            "2.13.0": [(cell("2.13.0"), "2.13.0")],
        },
        tmp_path,
    )
    first = oracle("2.13.0")  # MASKED: settled at once, though its gate word is not SAFE
    assert first.hazard == Hazard.MASKED and first.settled
    stuck = Evidence("2.13.0", U, {}, hazard=str(Hazard.UNCLEAR))
    answers = iter([stuck, first])

    def flaky_then_masked(release: str) -> Evidence:
        return next(answers) if release == "2.13.0" else oracle(release)

    result = bisect(["2.12.1", "2.13.0"], flaky_then_masked, tries=2, confirm=0)
    assert result.outcome is Outcome.CHANGED and result.direction == "first masked"


def test_a_release_judged_over_all_its_answers_keeps_what_its_control_once_showed(
    tmp_path: Path,
) -> None:
    """What the oracle does when a release is asked again (its earlier records merged): the
    one-run miss on 2.12.1 (MASKED alone) and its 5-run repeat (RACES) judged together read
    RACES; 2.13.0's silent runs merged with more silent ones stay MASKED."""
    miss = records(cell("2.12.1", "5.6.0"), tmp_path)
    shown = records(
        "repeat-per_device/cpu_matrix-torch-2.12.1-transformers-5.6.0/records.jsonl", tmp_path
    )
    assert judge_race(miss, probes("2.12.1"), Calibration())[1] is Hazard.MASKED
    assert judge_race(miss + shown, probes("2.12.1"), Calibration())[1] is Hazard.RACES
    silent = records(cell("2.13.0"), tmp_path) + records(cell("2.13.0", "5.6.0"), tmp_path)
    masked = judge_race(silent, probes("2.13.0"), Calibration())
    assert masked[1] is Hazard.MASKED and "(2 runs)" in masked[2]


def test_a_release_asked_again_passes_its_earlier_records_in_one_word_each(tmp_path: Path) -> None:
    """pytest takes an existing path given as a word of its own for the rootdir before the
    plugin's options are known, and the plugin refuses that: each re-ask of a release (its
    earlier answers' folders exist) ended UNDECIDED so."""
    import subprocess
    import sys

    from racegate.harness.doors.bisection.evidence import Runner, race_step
    from racegate.harness.run import envs

    class Recording(Runner):
        def run(self, args, timeout):
            self.args = list(args)
            return subprocess.CompletedProcess(args, EXIT_UNDECIDED, "", "")

    earlier = tmp_path / "first"
    earlier.mkdir()
    here = envs.Environment(Path(sys.executable), {"torch": "?", "transformers": "?"}, {}, None)
    env = Recording(here)
    race_step(env, ["--power-cap", "1"], 60, {}, tmp_path / "second", [earlier])
    paths = [a for a in env.args if a.startswith(("--racegate-results", "--racegate-records-"))]
    own = tmp_path / "second" / "records.jsonl"
    assert paths == [f"--racegate-results={own}", f"--racegate-records-from={earlier}"]


# A release step's race selection on CPU: the knob workload fires torch's real nested-FX race in
# every control run at p=1 (tests/race_knob_workload.py), so 3 control runs power 5 clean ones.
KNOB_RACE_ARGS = (
    "--workload", "tests.race_knob_workload:make_workload", "--preset", "p=1",
    "--strategies", "warmup_locked", "--devices", "cpu", "--threads-per-device", "2",
    "--control-repeat", "3", "--power-cap", "5", "-W", "ignore",
)  # fmt: skip


@pytest.mark.skipif(__import__("sys").platform != "linux", reason="child processes need Linux")
@pytest.mark.process
def test_a_release_step_takes_its_word_from_the_sessions_decision_file(tmp_path: Path) -> None:
    """The step's word is the session's own decision file, checked against its records and
    exit: SAFE where the session wrote SAFE; where the file is gone (a session that wrote
    none, or another's), UNDECIDED naming it, though pytest exited 0 and printed SAFE (the
    word was read from that printed line before)."""
    import subprocess
    import sys

    from racegate.harness.doors.bisection.evidence import Runner, race_step
    from racegate.harness.run import envs

    here = envs.Environment(Path(sys.executable), {"torch": "?", "transformers": "?"}, {}, None)
    step = race_step(Runner(here), KNOB_RACE_ARGS, 600, {}, tmp_path / "first")
    said = json.loads((tmp_path / "first" / "decision.json").read_text())
    assert said["records"] == str(step.records), said
    # SAFE, unless a loaded box starved a run's threads (not_concurrent): the file's word all
    # the same
    assert str(step.decision.word) == said["word"], (step.decision, said)

    class LosesTheFile(Runner):
        def run(self, args, timeout) -> subprocess.CompletedProcess[str]:
            done = super().run(args, timeout)
            (tmp_path / "second" / "decision.json").unlink()
            return done

    step = race_step(LosesTheFile(here), KNOB_RACE_ARGS, 600, {}, tmp_path / "second")
    assert step.decision.word is Word.UNDECIDED, step.decision
    assert "pytest exit 0: no decision file" in step.decision.reason, step.decision
