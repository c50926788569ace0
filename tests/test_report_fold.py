"""The report's HTML said "a badge in the tables above opens its cell here", but the fold stayed
closed (Chromium, --dump-dom): the page carries no script (tests/test_report.py), so the words
now say what a badge does: it links to its cell's fold, which lands there, closed."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from racegate.harness.report.write import write_reports
from tests.test_baselines import write
from tests.test_report import clean_row

BROWSER = shutil.which("chromium") or shutil.which("chromium-browser")


def _page(tmp_path: Path) -> Path:
    records = write(tmp_path / "r.jsonl", clean_row())
    out = tmp_path / "out"
    write_reports([records], out, baselines_dir=tmp_path / "none", title="t",
                  production_strategy="warmup")  # fmt: skip
    return out / "matrix.html"


def test_the_page_says_what_a_badge_does_and_every_badge_lands_on_its_cell(tmp_path: Path) -> None:
    page = _page(tmp_path).read_text()
    assert "opens its cell" not in page
    assert "A badge in the tables above links to its cell here (a fold: click it open)" in page
    targets = re.findall(r'<a href="#([^"]+)"', page)
    assert targets and all(f'<details class="cell" id="{t}">' in page for t in targets)


@pytest.mark.process
@pytest.mark.skipif(BROWSER is None, reason="no Chromium here to load the page in")
def test_in_a_browser_a_badges_link_lands_on_its_closed_cell(tmp_path: Path) -> None:
    page = _page(tmp_path)
    anchor = re.search(r'<a href="#([^"]+)"', page.read_text())
    assert anchor is not None
    dom = subprocess.run(
        [str(BROWSER), "--headless", "--no-sandbox", "--disable-gpu", "--dump-dom",
         f"{page.as_uri()}#{anchor.group(1)}"],
        capture_output=True, text=True, timeout=120,
    ).stdout  # fmt: skip
    assert f'id="{anchor.group(1)}"' in dom and "links to its cell here" in dom, dom[:2000]
