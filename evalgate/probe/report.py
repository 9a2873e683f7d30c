"""A probe's report, rendered from its probe.json alone: the summary line (one per probe kind),
junit.xml (one test case per probe, beside compare's in CI), summary.md (the GitHub step
summary's section) and a small self-contained probe.html (``report/templates/probe.html.j2``,
autoescaped, beside report.html's templates). Nothing is recomputed here; ``no_isolation_report``
is the one report both probes give a server they cannot test.

Text from a server or a model (reasons, answers, the server's URL) is shown as stored, as
report.html shows it: control characters as ``\\x1b``, bidirectional controls as ``\\u202e``
(``shown``, the same rule as ``evalgate/report/_format.py``'s ``clean``), then escaped for HTML,
Markdown or XML."""

from __future__ import annotations

import html
import math
import re
import xml.etree.ElementTree as ET
from functools import cache
from typing import Any

from jinja2 import Environment
from pydantic import BaseModel

from evalgate.engines.api import NoCacheIsolation
from evalgate.report.html import new_environment
from evalgate.store.probe_report import PROBE_SCHEMA

__all__ = [
    "EXIT_CODES",
    "TITLES",
    "junit_xml",
    "no_isolation_report",
    "probe_html",
    "shown",
    "summary_line",
    "summary_md",
]

EXIT_CODES = {"PASS": 0, "BLOCK": 1, "NO_ISOLATION": 2, "ERROR": 3, "UNDERPOWERED": 3}
"""As compare's: 0 PASS, 1 BLOCK; 2 the server has no salt or cold request to test (a setting,
not a finding); 3 no verdict (a blind probe, or too few probes): rerun, never read as a pass."""

TITLES = {"cache_isolation": "cache isolation", "warm_cold": "warm/cold answers"}
ICONS = {"PASS": "✅", "BLOCK": "❌", "NO_ISOLATION": "⚠️", "ERROR": "⚠️", "UNDERPOWERED": "⚠️"}
# report/_format.py's rule (tests/probe/test_probe_files.py holds the two to the same output):
# C0/C1 controls but tab and newline, lone surrogates and noncharacters; bidirectional controls.
_BAD = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\ud800-\udfff\ufdd0-\ufdef\ufffe\uffff]")
_BIDI = re.compile("[\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def shown(value: object) -> str:
    """Text as stored, safe in any document: line ends normalised, bad code points and
    bidirectional controls as visible escapes (``\\x1b``, ``\\u202e``); not yet HTML-escaped."""
    text = str(value).replace("\r\n", "\n").replace("\r", "\n")
    text = _BAD.sub(lambda m: f"\\x{ord(m.group()):02x}" if ord(m.group()) < 0x100 else "\ufffd", text)
    return _BIDI.sub(lambda m: f"\\u{ord(m.group()):04x}", text)


def no_isolation_report(probe: str, exc: NoCacheIsolation, settings: BaseModel) -> dict[str, Any]:
    """probe.json for a server the probe cannot test (no cache salt, no cold request): what to do."""
    return {
        "schema": PROBE_SCHEMA,
        "probe": probe,
        "verdict": "NO_ISOLATION",
        "exit_code": EXIT_CODES["NO_ISOLATION"],
        "reasons": [exc.cause, f"fix: {exc.fix}"],
        "settings": settings.model_dump(mode="json"),
    }


def summary_line(report: dict[str, Any]) -> str:
    """The probe's one line: the verdict and the figures it rests on, the time it took."""
    title, verdict = TITLES.get(report["probe"], report["probe"]), report["verdict"]
    if verdict == "NO_ISOLATION":
        return f"{title}: NO_ISOLATION: {report['reasons'][0]}"
    head = f"{title}: {verdict} in {report['seconds']:.0f} s; "
    if report["probe"] == "warm_cold":
        warm, cold = report["conditions"]["warm"], report["conditions"]["cold"]
        return head + (
            f"{report['flips']} flips of {report['n']} (budget {report['budget']:g}, p = {report['pvalue']:.3g}); "
            f"warm requests read {_span(warm)} cached tokens, cold {_span(cold)}; median latency warm "
            f"{warm['median_latency_s']:.3f} s, cold {cold['median_latency_s']:.3f} s"
        )
    t, cross = report["timing"], report["oracle"]["cross_cached_max"]
    return head + (
        f"{t['n']} probes of {report['prefix_tokens']} tokens; cache gap {report['cache_gap']:.2f}x, CROSS "
        f"speed-up {math.exp(t['leak']):.3f}x (upper {math.exp(t['leak_upper']):.3f}x, margin "
        f"{report['margin']:.3f}x); CROSS cached tokens max {cross if cross is not None else 'not reported'}"
    )


def _span(cond: dict[str, Any]) -> str:
    lo, hi = cond["cached_tokens_min"], cond["cached_tokens_max"]
    if lo is None:
        return "(not reported)"
    return str(lo) if lo == hi else f"{lo}-{hi}"


def junit_xml(report: dict[str, Any]) -> str:
    """One JUnit test case named after the probe: a failure for BLOCK, an error for anything but
    PASS, each with the reasons; the summary line as its output."""
    name = str(report["probe"])
    suite = ET.Element("testsuite", name="evalgate probe", tests="1")
    case = ET.SubElement(suite, "testcase", classname="evalgate.probe", name=name)
    case.set("time", str(report.get("seconds", 0)))
    verdict, text = report["verdict"], shown("\n".join(report["reasons"]))
    if verdict != "PASS":
        kind = "failure" if verdict == "BLOCK" else "error"
        ET.SubElement(case, kind, message=shown(f"{verdict}: {report['reasons'][0]}")).text = text
        suite.set("failures" if kind == "failure" else "errors", "1")
    ET.SubElement(case, "system-out").text = shown(summary_line(report))
    return ET.tostring(suite, encoding="unicode") + "\n"


def _rows(report: dict[str, Any]) -> tuple[list[str], list[list[str]]]:
    """The conditions' table: median latency and the cached tokens each read."""
    conditions = report.get("conditions") or {}
    head = ["condition", "median latency", "cached tokens"]
    rows = []
    for name, c in conditions.items():
        lo, hi = c["cached_tokens_min"], c["cached_tokens_max"]
        cached = "not reported" if lo is None else (str(lo) if lo == hi else f"{lo}-{hi}")
        rows.append([name.upper(), f"{c['median_latency_s'] * 1000:.1f} ms", cached])
    return head, rows


def _facts(report: dict[str, Any]) -> list[tuple[str, str]]:
    """The figures the verdict rests on, as (name, value)."""
    if report["verdict"] == "NO_ISOLATION":
        return []
    if report["probe"] == "warm_cold":
        return [
            ("answers compared", str(report["n"])),
            ("flips", f"{report['flips']} (budget {report['budget']:g}, p = {report['pvalue']:.3g})"),
            ("warm requests", report["warm_namespace"]),
            ("time", f"{report['seconds']:.0f} s"),
        ]
    t = report["timing"]
    return [
        ("probes", f"{t['n']} of {report['prefix_tokens']} prefix tokens"),
        ("cache gap (COLD / SAME)", f"{report['cache_gap']:.2f}x (p = {t['gap_p']:.3g})"),
        (
            "CROSS speed-up",
            f"{math.exp(t['leak']):.3f}x (upper bound {math.exp(t['leak_upper']):.3f}x, p = {t['leak_p']:.3g})",
        ),
        ("margin", _margin(report)),
        ("CROSS cached tokens max", str(report["oracle"]["cross_cached_max"])),
        ("time", f"{report['seconds']:.0f} s"),
    ]


def _margin(report: dict[str, Any]) -> str:
    """The margin and where it comes from (``--share`` of the gap, at least ``--min-margin``)."""
    settings = report["settings"]
    floor = settings.get("min_margin")  # schema 1 had no floor
    rule = f"{settings['share']:g} of the gap" + (f", at least {floor:g}x" if floor is not None else "")
    return f"{report['margin']:.3f}x ({rule})"


def summary_md(report: dict[str, Any]) -> str:
    """The probe's section of a GitHub step summary (Markdown)."""
    title, verdict = TITLES.get(report["probe"], report["probe"]), report["verdict"]
    lines = [
        f"## evalgate probe: {title} {ICONS.get(verdict, '')} {verdict}",
        "",
        shown(summary_line(report)),
        "",
    ]
    head, rows = _rows(report)
    if rows:
        lines += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        lines += ["| " + " | ".join(r) + " |" for r in rows]
        lines.append("")
    lines += [f"- {name}: {value}" for name, value in _facts(report)]
    lines += [f"- {_md(r)}" for r in report["reasons"]]
    return "\n".join(lines) + "\n"


def _md(text: str) -> str:
    """A reason as one Markdown list item: no line breaks, no table pipes, no raw HTML."""
    return html.escape(" ".join(shown(text).split())).replace("|", "\\|")


@cache
def _environment() -> Environment:
    env = new_environment()
    env.filters["shown"] = shown
    return env


def probe_html(report: dict[str, Any]) -> str:
    """probe.html: one self-contained page (no script, no external file) with the conditions'
    latencies and cached tokens, the figures, the verdict and its reasons, and any flipped answers."""
    head, rows = _rows(report)
    return (
        _environment()
        .get_template("probe.html.j2")
        .render(
            title=TITLES.get(report["probe"], report["probe"]),
            verdict=report["verdict"],
            line=summary_line(report),
            server=report.get("server", ""),
            head=head,
            rows=rows,
            facts=_facts(report),
            reasons=report["reasons"],
            flipped=[i for i in report.get("items", []) if i.get("flip")],
            color={"PASS": "#1a7f37", "BLOCK": "#cf222e"}.get(report["verdict"], "#9a6700"),
        )
    )
