"""A side is what its records say: a candidate environment is checked whole before it is reused
(racegate.harness.run.envs.not_whole), and the upgrade's decision compares each side's records'
versions with what it was asked (racegate.harness.doors.upgrade.as_asked)."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from racegate.harness.doors import upgrade
from racegate.harness.judge.gate import Decision, Word
from racegate.harness.run import envs
from tests.test_baselines import make_record, write

CHANGES = {"transformers": "5.8.1"}


def side(tmp_path: Path, name: str, records: list, changes: dict[str, str]) -> upgrade.SideResult:
    env = envs.Environment(
        python=Path("/usr/bin/python3"),
        versions={"torch": "2.11.0+cu130", "transformers": "5.17.0"},
        changes=changes,
        root=tmp_path / "env" if changes else None,
    )
    path = write(tmp_path / f"{name}-{len(list(tmp_path.glob('*.jsonl')))}.jsonl", records)
    return upgrade.SideResult(name, env, path, Decision(Word.SAFE, "clean", ""), [], 1.0)


def test_records_of_other_versions_than_asked_are_undecided(tmp_path: Path) -> None:
    """The candidate env loaded the base's transformers 5.17.0: its 11 records say so, and the
    decision read "upgrade to transformers 5.8.1: SAFE". Now UNDECIDED, naming what they ran."""
    current = side(tmp_path, "current", [make_record(transformers="5.17.0")], {})
    ran_base = [make_record(transformers="5.17.0") for _ in range(11)]
    candidate = side(tmp_path, "candidate", ran_base, CHANGES)
    decided = upgrade.as_asked([current, candidate])
    assert decided is not None and decided.word is Word.UNDECIDED
    assert decided.reason == (
        "the candidate's records ran transformers 5.17.0 (11 of 11), not the 5.8.1 asked"
    )
    assert str(tmp_path / "env") in decided.next
    good = side(tmp_path, "candidate", [make_record(transformers="5.8.1")], CHANGES)
    assert upgrade.as_asked([current, good]) is None


def _fake_candidate(base: envs.Environment, where: Path) -> tuple[Path, Path]:
    """A candidate venv as envs.candidate leaves one, without pip: its own site-packages hold
    a transformers 5.8.1 (a package and its dist-info), the base's folders follow it."""
    where.mkdir(mode=0o700)
    folder = where / envs._key(base, CHANGES)
    subprocess.run([str(base.python), "-m", "venv", "--without-pip", str(folder)], check=True)
    (folder / envs.MADE_MARKER).write_text("made by the test\n")
    python = folder / "bin" / "python"
    purelib = Path(str(envs._probe(python)["purelib"]))
    shared = [f for f in envs._probe(base.python)["folders"] if Path(f) != purelib]
    (purelib / envs.BASE_PTH).write_text("".join(f"{f}\n" for f in shared))
    (purelib / "transformers").mkdir()
    (purelib / "transformers" / "__init__.py").write_text('__version__ = "5.8.1"\n')
    dist = purelib / "transformers-5.8.1.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: transformers\nVersion: 5.8.1\n")
    (dist / "top_level.txt").write_text("transformers\n")
    done = {"base": str(base.python), "changes": CHANGES, "find_links": [],
            "holds": envs.holds(python, purelib)}  # fmt: skip
    (folder / envs.DONE).write_text(json.dumps(done))
    return folder, purelib


@pytest.mark.process
def test_a_candidate_missing_a_package_folder_is_not_reused(tmp_path: Path) -> None:
    """`transformers/` removed from a reused candidate env: its metadata still said 5.8.1, so it
    was reused, and every process loaded the base's transformers. Now it is made again (here
    offline, with no wheel: refused, one line)."""
    base = envs.current()
    if base.versions["transformers"].startswith("5.8.1"):
        pytest.skip("the base already has transformers 5.8.1")
    folder, purelib = _fake_candidate(base, tmp_path / "envs")
    lines: list[str] = []
    offline = dict(base=base, where=tmp_path / "envs", find_links=[tmp_path], progress=lines.append)
    cand = envs.candidate(CHANGES, **offline)
    assert cand.root == folder and "reused" in lines[-1], lines
    shutil.rmtree(purelib / "transformers")
    with pytest.raises(envs.EnvError, match=r"cannot install transformers==5\.8\.1"):
        envs.candidate(CHANGES, **offline)
    said = " ".join(lines)
    assert "not whole (transformers imports from" in said and "making it again" in said, lines
