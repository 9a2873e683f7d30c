"""The per-category section (#44) in report.html, the terminal and summary.md: escaped category
names, a table that sorts by the raw value, and nothing at all for a run without categories."""

from __future__ import annotations

import json
import re
from pathlib import Path

import html5lib
from rich.console import Console

from evalgate.gate import RunData, verdict_for
from evalgate.report import render_run
from evalgate.report.html import _sha256
from evalgate.report.terminal import print_verdict
from tests.helpers.runs import SynthSuite, build_run

HOSTILE = '<script>alert("x")</script>[bold]|law'
SUBJECTS = ("chemistry", HOSTILE, "art")


def with_subjects(run_dir: Path, suite: str = "mmlu") -> Path:
    """Give each record of ``suite`` a subject, as the MMLU suite records it (``extra.subject``)."""
    for arm in ("baseline", "candidate"):
        path = run_dir / "items" / f"{suite}.{arm}.jsonl"
        lines = []
        for i, line in enumerate(path.read_text(encoding="utf-8").splitlines()):
            record = json.loads(line)
            record["extra"] = {"subject": SUBJECTS[i % 3]}
            lines.append(json.dumps(record) + "\n")
        path.write_text("".join(lines), encoding="utf-8")
    return run_dir


def _mmlu_run(root: Path) -> Path:
    suite = SynthSuite("mmlu", (40, 9, 2, 10), kind="loglikelihood", metrics=("acc",))
    return with_subjects(build_run(root, [suite]))


def test_the_section_shows_every_category_escaped_and_sortable(tmp_path: Path) -> None:
    run_dir = _mmlu_run(tmp_path / "run")
    _, verdict = render_run(run_dir)
    assert len(verdict.categories) == 1 and len(verdict.categories[0].rows) == 3
    page = (run_dir / "report.html").read_text(encoding="utf-8")
    assert HOSTILE not in page and "&lt;script&gt;alert(&#34;x&#34;)&lt;/script&gt;[bold]|law" in page
    tree = html5lib.HTMLParser(strict=True, namespaceHTMLElements=False).parse(page)
    scripts = tree.findall(".//script")
    assert len(scripts) == 2  # the page's and the table's, each pinned by its hash in the CSP
    csp = tree.find(".//meta[@http-equiv='Content-Security-Policy']").attrib["content"]
    assert all(_sha256((x.text or "").strip()) in csp for x in scripts)
    table = tree.find(".//table[@id='category-table']")
    assert table is not None
    headers = [th.text for th in table.findall("./thead/tr/th")]
    assert headers[:3] == ["suite", "category", "n"] and "CI" in headers
    rows = table.findall("./tbody/tr")
    assert [r.findall("td")[1].text for r in rows] == sorted(SUBJECTS)  # without script: by category
    section = verdict.categories[0]
    for tr, row in zip(rows, section.rows, strict=True):
        cells = tr.findall("td")
        assert float(cells[5].attrib["data-sort"]) == row.delta  # the raw value, for the sort
        assert cells[5].text == f"{row.delta * 100:+.1f} pt"
    tools = tree.find(".//*[@id='category-tools']")
    assert tools is not None and "hidden" in tools.attrib  # the filter box only once script runs
    assert 'href="#categories"' in page
    assert "about 0.15 of 3 would exclude 0 by chance" in page
    assert re.search(r"CI items independent \[[^\]]+\] pt, clustered by subject \(3\)", page)


def test_terminal_and_summary_print_one_line_per_suite(tmp_path: Path) -> None:
    run_dir = _mmlu_run(tmp_path / "run")
    render_run(run_dir)
    console = Console(record=True, width=400, force_terminal=False)
    print_verdict(verdict_for(RunData(run_dir)), console)
    text = console.export_text()
    line = next(x for x in text.splitlines() if x.startswith("mmlu by subject: overall delta"))
    assert "informational: never gated" in line and "largest drop" in line
    assert line.endswith("largest drop chemistry -14.3 pt [-34.6, +3.4] pt (n 21)"), line  # 3 of 21 lost
    summary = (run_dir / "summary.md").read_text(encoding="utf-8")
    assert "mmlu by subject: overall delta" in summary
    assert "<script" not in summary


def test_a_run_where_nothing_changed_says_so(tmp_path: Path) -> None:
    suite = SynthSuite("mmlu", (40, 0, 0, 20), kind="loglikelihood", metrics=("acc",))
    run_dir = with_subjects(build_run(tmp_path / "run", [suite]))
    render_run(run_dir)
    summary = (run_dir / "summary.md").read_text(encoding="utf-8")
    assert "(no item changed: both are Tango's interval)" in summary and "[+0.0, +0.0]" not in summary


def test_a_run_without_categories_shows_none(tmp_path: Path) -> None:
    run_dir = build_run(
        tmp_path / "run", [SynthSuite("mmlu", (40, 9, 2, 10), kind="loglikelihood", metrics=("acc",))]
    )
    _, verdict = render_run(run_dir)
    assert verdict.categories == []
    assert "categories" not in json.loads((run_dir / "verdict.json").read_text(encoding="utf-8"))
    page = (run_dir / "report.html").read_text(encoding="utf-8")
    assert "category-table" not in page and "Per-category results" not in page
    assert page.count("<script>") == 1 and page.count("sha256-") == 2  # the page's script and style only
    console = Console(record=True, width=400)
    print_verdict(verdict, console)
    assert "by subject" not in console.export_text()
    assert "by subject" not in (run_dir / "summary.md").read_text(encoding="utf-8")
