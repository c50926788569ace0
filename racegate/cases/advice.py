"""What a race case tells its reader where racegate's own tables (race.toml, probes.toml) and
this torch disagree: the maintainer's advice (edit that row) in racegate's own checkout, a line
that makes sense to a user of an installed racegate everywhere else.

racegate's own checkout is told apart by racegate.harness.run.code_root.own_checkout (racegate
not installed, and the session's rootdir the checkout), never by a name or a folder that a
user's project could also have.
"""

from __future__ import annotations

import pytest

from racegate.harness.judge.probe_expectations import Status
from racegate.harness.judge.race_expectations import ExpectedFailure
from racegate.harness.probes.runner import ProbeResult
from racegate.harness.run import code_root

# What a user can do about a table of racegate's: nothing in their project.
USER_NEXT = (
    "racegate's own table, shipped with racegate, is out of date for this release: nothing in "
    "your project to change; upgrade racegate, or tell its maintainers"
)


def maintaining(config: pytest.Config) -> bool:
    """This session runs in racegate's own checkout."""
    return code_root.own_checkout(config.rootpath)


def xfail_reason(row: ExpectedFailure, config: pytest.Config) -> str:
    """The reason of a race case racegate's race.toml expects to fail here: what to do if it
    passes (pytest prints it beside an XPASS, or the failure of a strict one)."""
    if maintaining(config):
        return (
            f"{row.reason} [{row.describe()}; if this now passes, upstream changed: update or "
            "delete that row, citing the source]"
        )
    return (
        f"{row.reason} [racegate expects this to fail on this torch ({row.describe()}); if it "
        f"now passes, upstream changed, and {USER_NEXT}]"
    )


def probe_failure(status: Status, result: ProbeResult, message: str, config: pytest.Config) -> str:
    """A probe case's failure: the table's own message in racegate's checkout; elsewhere what
    the probe saw, and USER_NEXT in place of the maintainer's steps."""
    if maintaining(config):
        return message
    if status is Status.BROKEN:
        return (
            f"probe {result.name} gave no verdict on torch {result.torch_version} "
            f"({result.device}): {result.verdict}: {result.detail}. racegate's probe does not "
            "run on this torch: nothing in your project to change; tell racegate's maintainers"
        )
    if status is Status.MISSING:
        return (
            f"racegate's probe table has no row for probe {result.name} on torch "
            f"{result.torch_version} ({result.device}); it saw {result.verdict}: "
            f"{result.detail}. {USER_NEXT[0].upper()}{USER_NEXT[1:]}"
        )
    seen = message.split("\n", 2)[:2]  # "probe X moved: ...", "  what it saw: ..."
    return "\n".join([*seen, f"  {USER_NEXT}"])
