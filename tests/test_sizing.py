"""The race selection's side-by-side size: the host rule and when the user's arguments decide."""

from __future__ import annotations

import pytest

from racegate.harness.doors import sizing
from racegate.harness.doors.options import case_jobs

H200 = 141 * 2**30
H100 = 81_559 * 2**20  # what nvidia-smi reports for an H100 80GB HBM3


def test_workers_follow_cores_and_gpu_memory() -> None:
    assert sizing.host_race_workers(16, 1, H200) == 6  # one H200, 16 cores: the cores' bound
    assert sizing.host_race_workers(16, 1, H100) == 6  # one H100: its memory's bound too
    assert sizing.host_race_workers(32, 2, H200) == 12
    assert sizing.host_race_workers(64, 1, 24 * 2**30) == 2  # a 24 GiB card holds two cases
    assert sizing.host_race_workers(2, 0, 0) == 1  # the 2-core CPU box: one at a time


@pytest.mark.parametrize(
    "args",
    [["-n", "4"], ["-n4"], ["-n=auto"], ["--numprocesses=2"], ["-p", "no:xdist"], ["--dist", "no"]],
)
def test_the_users_own_choice_is_kept(args: list[str]) -> None:
    assert sizing.chooses_workers(args)
    assert sizing.race_args(args)[0] == []


def test_other_arguments_leave_the_sizing_to_the_host() -> None:
    assert not sizing.chooses_workers(["-k", "per_device", "--devices", "cpu", "-x"])


@pytest.mark.parametrize(("text", "expected"), [("auto", 0), ("AUTO", 0), ("4", 4)])
def test_case_jobs_reads_auto_or_a_number(text: str, expected: int) -> None:
    assert case_jobs(text) == expected


@pytest.mark.parametrize("text", ["0", "-2", "four", ""])
def test_case_jobs_refuses_anything_else_in_one_line(text: str) -> None:
    with pytest.raises(ValueError, match=r"--case-jobs .*: give auto or a whole number ≥ 1"):
        case_jobs(text)
