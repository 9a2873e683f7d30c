"""The per-category table in a real browser (headless Chromium): the page's hashed script runs
under its CSP, shows the filter box and makes every column header a sort control. Skipped where
/usr/bin/chromium is not installed."""

from __future__ import annotations

from pathlib import Path

import html5lib
import pytest

from evalgate.report import render_run
from tests.helpers.runs import SynthSuite, build_run
from tests.report.test_categories import with_subjects
from tests.report.test_report_browser import CHROMIUM, _chromium

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(not CHROMIUM.exists(), reason="chromium not installed (apt-get install chromium)"),
]


def test_the_script_turns_the_table_into_a_sortable_filterable_one(tmp_path: Path) -> None:
    suite = SynthSuite("mmlu", (40, 9, 2, 10), kind="loglikelihood", metrics=("acc",))
    run_dir = with_subjects(build_run(tmp_path / "run", [suite]))
    render_run(run_dir)
    url = (run_dir / "report.html").resolve().as_uri()
    res = _chromium(tmp_path / "profile", "--dump-dom", "--virtual-time-budget=2000", url)
    assert res.returncode == 0, res.stderr[-2000:]
    tree = html5lib.parse(res.stdout, namespaceHTMLElements=False)
    tools = tree.find(".//*[@id='category-tools']")
    assert tools is not None and "hidden" not in tools.attrib  # the script ran
    headers = tree.findall(".//table[@id='category-table']/thead/tr/th")
    assert headers and all(th.attrib.get("tabindex") == "0" for th in headers)
    assert headers[5].attrib.get("title") == "sort by delta"
