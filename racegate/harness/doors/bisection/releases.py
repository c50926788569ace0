"""Release lists for a bisection: `pip index versions <package>` parsed, final releases in a range.

A range is `LOW..HIGH` (e.g. `2.10..2.15`, `5.6.0..5.8.1`). An end given with fewer parts
than a release covers every release it prefixes: `2.15` includes 2.15.0 and 2.15.1. Pre-, dev-
and post-releases are dropped, and a local label (`2.13.0+cpu`) counts as its release.
"""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Iterable

from packaging.version import InvalidVersion, Version

_AVAILABLE = re.compile(r"^Available versions:\s*(.+)$", re.MULTILINE)


def parse_index_output(text: str) -> list[str]:
    """The versions `pip index versions` printed (its 'Available versions:' line), as given."""
    found = _AVAILABLE.search(text)
    if found is None:
        raise ValueError(f"no 'Available versions:' line in pip's output: {text.strip()[:200]!r}")
    return [v.strip() for v in found.group(1).split(",") if v.strip()]


def parse_range(text: str, flag: str) -> tuple[Version, Version]:
    """`LOW..HIGH` as two versions; ValueError naming the flag and the accepted form."""
    low, sep, high = text.partition("..")
    try:
        if not sep or not low or not high:
            raise InvalidVersion(text)
        lo, hi = Version(low), Version(high)
    except InvalidVersion:
        raise ValueError(
            f"{flag} {text!r}: give a release range LOW..HIGH, e.g. 2.10..2.15 or 5.6.0..5.8.1"
        ) from None
    if lo > hi:
        raise ValueError(f"{flag} {text!r}: LOW is above HIGH")
    return lo, hi


def _covers(high: Version, v: Version) -> bool:
    return v <= high or v.release[: len(high.release)] == high.release


def in_range(versions: Iterable[str], lo: Version, hi: Version) -> list[str]:
    """Final releases in [lo, hi] (hi's prefix rule above), oldest first, local labels dropped."""
    keep: dict[Version, str] = {}
    for text in versions:
        try:
            v = Version(text)
        except InvalidVersion:
            continue
        if v.is_prerelease or v.is_devrelease or v.is_postrelease:
            continue
        v = Version(v.public)
        if v >= lo and _covers(hi, v):
            keep[v] = str(v)
    return [keep[v] for v in sorted(keep)]


def index_versions(package: str, python: str = sys.executable) -> list[str]:
    """What the package index pip is configured with offers for `package` (any version)."""
    done = subprocess.run(
        [python, "-m", "pip", "index", "versions", package],
        capture_output=True,
        text=True,
        timeout=300,
    )
    if done.returncode != 0:
        raise RuntimeError(f"pip index versions {package} failed: {done.stderr.strip()[-300:]}")
    return parse_index_output(done.stdout)
