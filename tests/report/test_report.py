"""Reports: escaping of hostile model output, offline-only HTML, re-rendering, size limits, JUnit.

Every run folder here is synthetic, written through the library by tests/helpers/runs.py (no server),
so each test knows its verdict and its discordant items exactly.
"""

from __future__ import annotations

import json
import re
import shutil
import xml.etree.ElementTree as ET
from pathlib import Path

import html5lib
import pytest

from evalgate.cli import main
from evalgate.gate import RunData, verdict_for
from evalgate.report import OUTPUTS, render_run
from evalgate.report._view import build_view
from evalgate.report.markdown import LIMIT
from tests.helpers.runs import SynthSuite, build_run, rendered_page

SCRIPT = "<script>alert(1)</script>"
IMG = '"><img src=x onerror=alert(document.domain)>'


def _hostile(arm: str, i: int, correct: bool) -> str:
    answer = 40 + i % 7 if correct else 999
    return f"{SCRIPT} then {IMG} and \x00\x1b[31m control bytes\r\n#### {answer}"


def _parse(text: str) -> object:
    """html5lib in strict mode raises on the first HTML5 parse error."""
    return html5lib.HTMLParser(strict=True, namespaceHTMLElements=False).parse(text)


def _hostile_run(root: Path) -> Path:
    return build_run(
        root,
        [
            SynthSuite("gsm8k", (10, 12, 1, 3), text=_hostile, prompt=lambda i: f"Q{i} {IMG}\n{SCRIPT}\nA:"),
            SynthSuite("arc_easy", (10, 2, 2, 6), kind="loglikelihood", metrics=("acc", "acc_norm")),
        ],
    )


def test_compare_with_hostile_outputs_renders_them_only_escaped(tmp_path: Path) -> None:
    """A compare run (synthetic, built with tests/helpers/runs.py) whose model responses and prompts
    contain a <script> tag and an attribute-breaking <img onerror>: the HTML shows them as text,
    loads nothing from outside, and parses as HTML5 without a single error."""
    run_dir = _hostile_run(tmp_path / "run")
    _, verdict = render_run(run_dir)
    page = (run_dir / "report.html").read_text(encoding="utf-8")

    assert SCRIPT not in page and "<img" not in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert "&#34;&gt;&lt;img src=x onerror=alert(document.domain)&gt;" in page
    assert "\\x00\\x1b[31m control bytes" in page  # control bytes shown, not passed through

    tree = _parse(page)
    assert len(tree.findall(".//script")) == 1  # ours, pinned by hash in the CSP
    assert tree.findall(".//img") == []
    for el in tree.iter():
        assert not [k for k in el.attrib if str(k).lower().startswith("on")], el.tag
        for key in ("src", "href", "action", "{http://www.w3.org/1999/xlink}href"):
            value = el.attrib.get(key)
            assert value is None or value.startswith("#"), (el.tag, key, value)
    assert not re.search(r"""(?:src|href)\s*=\s*["']?\s*(?:https?:)?//""", page, re.I)
    assert re.search(r"@import|url\(", page) is None
    csp = tree.find(".//meta[@http-equiv='Content-Security-Policy']")
    assert csp is not None and csp.attrib["content"].startswith("default-src 'none'")
    assert verdict.verdict == "BLOCK" and ">BLOCK</span>" in page

    summary = (run_dir / "summary.md").read_text(encoding="utf-8")
    assert "<script" not in summary and "<img" not in summary
    ET.fromstring((run_dir / "junit.xml").read_bytes())  # well-formed despite control bytes


def test_report_shows_verdict_pair_items_and_facts(tmp_path: Path) -> None:
    run_dir = _hostile_run(tmp_path / "run")
    render_run(run_dir)
    page = (run_dir / "report.html").read_text(encoding="utf-8")
    assert 'class="banner block"' in page and ">BLOCK<" in page
    assert "policy <b>difference</b> · alpha <b>0.05</b>" in page
    assert '<tr class="differs"><td class="mono">-ctk</td>' in page  # the quantization setting differs
    assert '<tr class=""><td class="mono">-c</td>' in page  # context length does not
    assert "Regressions (n10): baseline right, candidate wrong · 12" in page
    assert "Improvements (n01): baseline wrong, candidate right · 1" in page
    assert "baseline loglik" in page and "-8.000" in page  # choice logliks of a multiple-choice item
    assert "<svg" in page and "Forest plot" in page
    assert "kv_buffers_mib.total" in page and "48.0" in page  # server KV capacity, per arm
    assert "12.5 s" in page  # per-suite durations
    assert "<details" in page  # readable with JavaScript off


def test_discordant_counts_equal_the_verdict_rows(tmp_path: Path) -> None:
    run = RunData(_hostile_run(tmp_path / "run"))
    view = build_view(run, verdict_for(run))
    rows = {r.suite: r for r in view.primary_rows}
    for s in view.suite_items:
        assert (s.n10, s.n01) == (rows[s.suite].n10, rows[s.suite].n01)
        assert len(s.regressions) == s.n10 and len(s.improvements) == s.n01
        assert all(not it.baseline.passed and it.candidate.passed for it in s.improvements)


def test_report_command_rerenders_byte_identical_verdict(tmp_path: Path) -> None:
    original = _hostile_run(tmp_path / "run")
    _, verdict = render_run(original)
    copy = tmp_path / "copied" / "run"
    shutil.copytree(original, copy)
    for name in OUTPUTS:
        (copy / name).unlink()
    assert main(["report", str(copy)]) == verdict.exit_code == 1
    for name in OUTPUTS:
        assert (copy / name).read_bytes() == (original / name).read_bytes(), name


def _six_suites() -> list[SynthSuite]:
    """Six large suites with many changed items and long answers, to push summary.md's size."""

    def long_text(arm: str, i: int, correct: bool) -> str:
        return ("word | *bold* <b> " * 40) + f"#### {40 + i % 7 if correct else 1000 + i}"

    suites = [
        SynthSuite(f"suite_{k}_with_a_long_name", (300, 100, 90, 110), text=long_text) for k in range(4)
    ]
    suites += [
        SynthSuite(f"mc_{k}", (300, 120, 80, 100), kind="loglikelihood", metrics=("acc", "acc_norm"))
        for k in range(2)
    ]
    return suites


def test_summary_for_six_suites_fits_and_keeps_the_table(tmp_path: Path) -> None:
    run_dir = build_run(tmp_path / "run", _six_suites())
    _, verdict = render_run(run_dir)
    text = (run_dir / "summary.md").read_text(encoding="utf-8")
    assert len(text) < LIMIT and len(text.encode()) < LIMIT
    lines = text.splitlines()
    assert lines[0].startswith(f"## evalgate ❌ {verdict.verdict}")
    assert any(line.startswith(f"**{verdict.verdict}**: ") for line in lines)
    header = lines.index(next(line for line in lines if line.startswith("| suite | metric |")))
    assert re.fullmatch(r"\|(---|--:)(\|(---|--:))+\|", lines[header + 1])
    table = lines[header + 2 : header + 2 + len(verdict.suites)]
    assert len(table) == len(verdict.suites) == 8
    ncols = lines[header].count(" | ") + 1
    for row in table:  # every row keeps the column count: no unescaped '|' from a name
        assert len(re.findall(r"(?<!\\)\|", row)) == ncols + 1
    assert "<details><summary>" in text  # some item detail fits, the rest is dropped or cut


def test_summary_escapes_markdown_and_html(tmp_path: Path) -> None:
    """An extracted answer with HTML and a table pipe stays inside its cell, as text."""

    def text(arm: str, i: int, correct: bool) -> str:
        return f"#### {40 + i % 7}" if correct else "#### <script>alert(1)</script>|x"

    run_dir = build_run(tmp_path / "run", [SynthSuite("gsm8k", (5, 4, 0, 1), text=text)])
    render_run(run_dir)
    summary = (run_dir / "summary.md").read_text(encoding="utf-8")
    assert "<script" not in summary
    row = next(line for line in summary.splitlines() if line.startswith("| regression | gsm8k-0005 |"))
    assert row.endswith("| 45 | &lt;script&gt;alert(1)&lt;/script&gt;\\|x |")


def test_junit_one_case_per_row_and_failure_when_it_blocks(tmp_path: Path) -> None:
    run_dir = _hostile_run(tmp_path / "run")
    _, verdict = render_run(run_dir)
    root = ET.fromstring((run_dir / "junit.xml").read_bytes())
    cases = root.findall(".//testcase")
    assert len(cases) == len(verdict.suites) == 3
    failed = [(c.get("classname"), c.get("name")) for c in cases if c.find("failure") is not None]
    assert failed == [(f"evalgate.{r.suite}", r.metric) for r in verdict.suites if r.status == "block"]
    assert root.get("failures") == str(len(failed)) and root.get("errors") == "0"


def test_error_run_renders_error_banner_and_junit_error(tmp_path: Path) -> None:
    run_dir = build_run(tmp_path / "run", [SynthSuite("gsm8k", (10, 0, 0, 10), errors={"candidate": 2})])
    _, verdict = render_run(run_dir)
    assert verdict.verdict == "ERROR"
    page = (run_dir / "report.html").read_text(encoding="utf-8")
    _parse(page)
    assert 'class="banner error"' in page and "Item errors (2)" in page
    root = ET.fromstring((run_dir / "junit.xml").read_bytes())
    assert root.get("errors") == "1" and root.find(".//testcase[@name='verdict']/error") is not None
    assert "ERROR" in (run_dir / "summary.md").read_text(encoding="utf-8").splitlines()[0]


def test_private_suite_shows_ids_and_outcomes_only(tmp_path: Path) -> None:
    run_dir = build_run(tmp_path / "run", [SynthSuite("private:exam", (5, 3, 1, 1), private=True)])
    secret = "THE SECRET EXAM QUESTION"
    row = {"item_id": "private:exam-0005", "prompt_hash": "h", "prompt": secret, "choices": None}
    (run_dir / "prompts" / "private:exam.jsonl").write_text(json.dumps(row) + "\n")  # must be ignored
    render_run(run_dir)
    page = (run_dir / "report.html").read_text(encoding="utf-8")
    assert secret not in page and "private:exam-0005" in page
    assert "Private suite: prompts, targets and responses are not recorded" in page
    assert secret not in (run_dir / "summary.md").read_text(encoding="utf-8")


def test_pass_run_with_margin_and_optional_sections(tmp_path: Path) -> None:
    extra = {
        "margin": 0.02,
        "aa": {"arc_easy": {"flips": 0, "n": 50}},
        "kernel_check": [{"kernel": "fp8_kv", "max_abs": 0.0123, "ok": True}],
    }
    run_dir = build_run(
        tmp_path / "run", [SynthSuite("arc_easy", (400, 1, 2, 97), kind="loglikelihood")], extra=extra
    )
    _, verdict = render_run(run_dir)
    assert verdict.verdict == "PASS"
    page = (run_dir / "report.html").read_text(encoding="utf-8")
    _parse(page)
    assert 'class="banner pass"' in page and "margin <b>2.0 pt</b>" in page
    assert 'fill="#dafbe1"' in page  # the margin band in the forest plot
    assert '<h2 id="aa">A/A noise floor</h2>' in page and '<h2 id="kernel_check">' in page
    assert "fp8_kv" in page and "0.0123" in page


def test_absent_optional_sections_are_omitted(tmp_path: Path) -> None:
    page = rendered_page(build_run(tmp_path / "run", [SynthSuite("gsm8k", (10, 0, 0, 10))]))
    assert 'id="aa"' not in page and 'id="kernel_check"' not in page and 'fill="#dafbe1"' not in page
    assert "The arms agree on every item." in page


@pytest.mark.parametrize("suites", [[], [SynthSuite("empty", (0, 0, 0, 0))]])
def test_degenerate_runs_still_render(tmp_path: Path, suites: list[SynthSuite]) -> None:
    run_dir = build_run(tmp_path / "run", suites)
    render_run(run_dir)
    _parse((run_dir / "report.html").read_text(encoding="utf-8"))
    ET.fromstring((run_dir / "junit.xml").read_bytes())


def test_discordant_items_sorted_by_divergence() -> None:
    from evalgate.report._items import divergence
    from evalgate.store.records import Pair, Record

    def rec(arm: str, lls: list[float]) -> Record:
        return Record(run_id="r", arm=arm, variant=arm, suite="s", suite_version=1, item_id="i", repeat=0,
                      prompt_hash="h", target=0, response=[[x, False] for x in lls], extracted=None,
                      metrics={"acc": 1.0})  # fmt: skip

    near = Pair("a", 0, rec("baseline", [-1.0, -2.0]), rec("candidate", [-1.1, -1.9]))
    far = Pair("b", 0, rec("baseline", [-1.0, -5.0]), rec("candidate", [-5.0, -1.0]))
    assert divergence(far) > divergence(near) > 0
    text = Pair("c", 0, rec("baseline", []), rec("candidate", []))
    object.__setattr__(text.baseline, "response", "the answer is 4")
    object.__setattr__(text.candidate, "response", "the answer is 5")
    assert abs(divergence(text) - 1 / 15) < 1e-12


def test_private_scores_read_as_passed_over_total(tmp_path: Path) -> None:
    from evalgate.gate import GatePolicy, decide
    from evalgate.report._view import _score

    row = decide({"private:exam": (["pass"], [])}, policy=GatePolicy()).suites[0]
    row.n, row.n11, row.n10 = 63, 60, 1
    assert _score(row, row.n11 + row.n10, 61 / 63) == "61 / 63 (96.8%)"
