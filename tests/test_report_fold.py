"""The report's HTML says "a badge in the tables above opens its cell here": a page opened at a
badge's link shows that cell's fold open, in a real browser (Chromium, headless, where one is
installed)."""

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


@pytest.mark.process
@pytest.mark.skipif(BROWSER is None, reason="no Chromium here to load the page in")
def test_a_badge_opens_its_cell(tmp_path: Path) -> None:
    records = write(tmp_path / "r.jsonl", clean_row())
    out = tmp_path / "out"
    write_reports([records], out, baselines_dir=tmp_path / "none", title="t",
                  production_strategy="warmup")  # fmt: skip
    page = (out / "matrix.html").read_text()
    assert "A badge in the tables above opens its cell here" in page
    anchor = re.search(r'<a href="#([^"]+)"', page)
    assert anchor is not None
    dom = subprocess.run(
        [str(BROWSER), "--headless", "--no-sandbox", "--disable-gpu", "--dump-dom",
         f"{(out / 'matrix.html').as_uri()}#{anchor.group(1)}"],
        capture_output=True, text=True, timeout=120,
    ).stdout  # fmt: skip
    opened = re.search(rf'<details[^>]*id="{re.escape(anchor.group(1))}"[^>]*>', dom)
    assert opened is not None and "open" in opened.group(0), dom[:2000]
    others = re.findall(r"<details[^>]*>", dom)
    assert sum("open" in d for d in others) == 1  # that cell, not every fold
