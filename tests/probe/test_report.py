"""A probe's report from its probe.json alone: summary.md (the GitHub step summary's section),
probe.html (self-contained), junit.xml (a failure for BLOCK, an error for anything but PASS)."""

from __future__ import annotations

import asyncio
import xml.etree.ElementTree as ET
from typing import Any

from evalgate.probe import ProbeSettings, junit_xml, probe_html, run_cache_probe, summary_md
from tests.probe.sim import SimScorer


def cache_report(**kwargs: Any) -> dict[str, Any]:
    return asyncio.run(run_cache_probe(SimScorer(**kwargs), ProbeSettings(probes=8, prefix_tokens=128)))


def test_summary_md_holds_the_three_conditions_the_gap_and_the_verdict() -> None:
    report = cache_report()
    md = summary_md(report)
    assert md.startswith("## evalgate probe: cache isolation ✅ PASS")
    for cond in ("SAME", "CROSS", "COLD", "VICTIM"):
        assert f"| {cond} |" in md
    assert "cache gap (COLD / SAME)" in md and "margin" in md and "CROSS cached tokens max: 0" in md
    assert "cache isolation: PASS" in md  # the summary line


def test_probe_html_is_self_contained_and_escapes_what_it_shows() -> None:
    report = cache_report(honour_salt=False)
    report["reasons"].append("<script>alert(1)</script>")
    page = probe_html(report)
    assert "BLOCK" in page and "&lt;script&gt;" in page and "<script>" not in page
    assert "http" not in page.replace("http-equiv", "")  # no external file, no link
    assert "default-src 'none'" in page  # nor could one load, or a script run (the CSP)
    assert summary_md({**report, "reasons": ["a | <b>\nc"]}).endswith("- a \\| &lt;b&gt; c\n")


def test_junit_says_failure_for_block_and_error_for_anything_but_pass() -> None:
    block = ET.fromstring(junit_xml(cache_report(honour_salt=False)))
    assert block.get("failures") == "1" and block.find("testcase/failure") is not None
    error = ET.fromstring(junit_xml(cache_report(cache=False)))
    assert error.get("errors") == "1" and error.find("testcase/error").get("message").startswith("ERROR")
    ok = ET.fromstring(junit_xml(cache_report()))
    assert ok.find("testcase").get("name") == "cache_isolation" and ok.find("testcase/failure") is None
    assert ok.find("testcase/system-out").text.startswith("cache isolation: PASS")
