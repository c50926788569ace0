"""No write through a link, at any moment: every file racegate writes goes through one of the two
helpers of racegate.harness.run.files (append_line: O_NOFOLLOW; write_whole: a private temporary
renamed into place). Each test plants the link before the write, or during it."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest

from racegate.harness.doors import options
from racegate.harness.report.write import write_reports
from racegate.harness.run import files
from racegate.harness.run.record import append_jsonl
from tests.test_baselines import make_record, write
from tests.test_report import clean_row, floors  # noqa: F401  (a fixture)

SECRET = "the victim's own content\n"


def victim(tmp_path: Path) -> Path:
    path = tmp_path / "victim.txt"
    path.write_text(SECRET)
    return path


def test_records_are_never_appended_through_a_link(tmp_path: Path) -> None:
    """A --results file that is a link: the run record was appended to the link's target.
    Now refused, at the start (check_results_path) and at the append; the target untouched."""
    target = victim(tmp_path)
    link = tmp_path / "results.jsonl"
    link.symlink_to(target)
    with pytest.raises(ValueError, match="is a symbolic link"):
        options.check_results_path(link)
    with pytest.raises(OSError, match="is a symbolic link"):
        append_jsonl(link, make_record())
    assert target.read_text() == SECRET


def test_a_link_planted_during_a_whole_write_is_replaced_not_followed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Between the temporary's making and the rename, a link appears at the target: the
    rename replaces the link; the file it points to is never written."""
    target, path = victim(tmp_path), tmp_path / "gate.json"
    real = tempfile.mkstemp

    def plant_then_make(*args: object, **kw: object) -> tuple[int, str]:
        made = real(*args, **kw)  # type: ignore[call-overload]
        path.unlink(missing_ok=True)
        path.symlink_to(target)  # during the write
        return made

    monkeypatch.setattr(files.tempfile, "mkstemp", plant_then_make)
    files.write_whole(path, "{}\n")
    assert target.read_text() == SECRET
    assert not path.is_symlink() and path.read_text() == "{}\n"
    assert {p.name for p in tmp_path.iterdir()} == {"gate.json", "victim.txt"}  # no temporary


def test_the_report_writes_no_page_or_chart_through_a_link(
    tmp_path: Path,
    floors: Path,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The chart's PNG path planted as a link before the report (it was written through), and
    matrix.md planted as a link after the report's own check, as each page is written."""
    records = write(tmp_path / "r.jsonl", clean_row())
    out = tmp_path / "report"
    out.mkdir()
    chart = victim(tmp_path)
    (out / "throughput-small.png").symlink_to(chart)  # before
    page = tmp_path / "page.txt"
    page.write_text(SECRET)
    real, planted = tempfile.mkstemp, []

    def plant(*args: object, **kw: object) -> tuple[int, str]:
        made = real(*args, **kw)  # type: ignore[call-overload]
        if not planted:  # after the report's check, while it writes its first page
            (out / "matrix.md").symlink_to(page)
            planted.append(True)
        return made

    monkeypatch.setattr(files.tempfile, "mkstemp", plant)
    paths = write_reports(
        [records], out, baselines_dir=floors, title="t", production_strategy="warmup"
    )
    assert chart.read_text() == SECRET and page.read_text() == SECRET
    written = {p.name for p in paths}
    assert {"matrix.md", "throughput-small.png"} <= written
    assert not any(p.is_symlink() for p in paths)
    assert (out / "throughput-small.png").read_bytes()[:4] == b"\x89PNG"
    assert not [p for p in out.iterdir() if p.name.startswith(".")]  # no temporary left
    assert os.stat(out / "gate.json").st_mode & 0o777 == files.PUBLISHED
