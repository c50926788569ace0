"""racegate.harness.run.envs: the changes a user may ask for, and one real candidate
environment."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from racegate.harness.run import envs


def test_parse_changes_reads_both_packages() -> None:
    got = envs.parse_changes(["transformers==5.8.1", "Torch==2.13.0"])
    assert got == {"transformers": "5.8.1", "torch": "2.13.0"}


@pytest.mark.parametrize(
    "texts",
    [
        ["transformers>=5.8.1"],
        ["transformers=5.8.1"],
        ["transformers"],
        ["transformers=="],
        ["numpy==2.0.0"],
        ["transformers==5.8.1", "transformers==5.6.0"],
        ["transformers==5.8.1; rm -rf"],
        [],
    ],
)
def test_parse_changes_refuses_with_one_line(texts: list[str]) -> None:
    with pytest.raises(ValueError) as caught:
        envs.parse_changes(texts)
    message = str(caught.value)
    assert "\n" not in message
    if texts:
        assert repr(texts[-1]) in message
    assert "torch, transformers" in message or "a second time" in message


@pytest.mark.process
def test_candidate_changes_transformers_only_and_leaves_the_base(tmp_path: Path) -> None:
    """A real venv: transformers 5.8.1 (and the tokenizers it pins) in the candidate, torch
    and every other package from the base, which is left as it was; asked again, reused."""
    base = envs.current()
    before = base.versions
    if before["transformers"].startswith("5.8.1"):
        pytest.skip("the base already has transformers 5.8.1")
    lines: list[str] = []
    where = tmp_path / "envs"
    cand = envs.candidate({"transformers": "5.8.1"}, base=base, where=where, progress=lines.append)
    assert cand.versions["transformers"] == "5.8.1"
    assert cand.versions["torch"] == before["torch"]
    assert cand.root is not None and (cand.root / envs.MADE_MARKER).is_file()
    assert cand.root.parent == where and cand.python.is_relative_to(cand.root)
    own = {p.name.split("-")[0].lower() for p in cand.root.glob("lib/python*/site-packages/*")}
    assert "torch" not in own, "torch must come from the base, not a second install"
    # tokenizers <= 0.23.0 (transformers 5.8.1's pin) is the one that imports in the candidate
    done = subprocess.run(
        [str(cand.python), "-c", "import tokenizers, transformers; print(tokenizers.__file__)"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert Path(done.stdout.strip()).is_relative_to(cand.root)
    assert envs.current().versions == before, "the base environment changed"
    again = envs.candidate({"transformers": "5.8.1"}, base=base, where=where, progress=lines.append)
    assert again == cand and "reused" in lines[-1]


@pytest.mark.process
def test_candidate_failed_install_is_one_line(tmp_path: Path) -> None:
    base = envs.current()
    with pytest.raises(envs.EnvError) as caught:
        envs.candidate(
            {"transformers": "0.0.0.999"},
            base=base,
            where=tmp_path / "envs",
            find_links=[tmp_path],  # an empty wheelhouse: offline, nothing to find
            progress=lambda _: None,
        )
    message = str(caught.value)
    assert "\n" not in message and "transformers==0.0.0.999" in message
    assert "No matching distribution" in message or "ERROR" in message
