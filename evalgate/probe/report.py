"""A probe's report, rendered from its probe.json alone: the summary line, junit.xml (one test
case per probe, beside compare's in CI), summary.md (the GitHub step summary's section) and a
small self-contained probe.html. Nothing is recomputed here.

Text from a server or a model (reasons, answers, the server's URL) is shown as stored, as
report.html shows it: control characters as ``\\x1b``, bidirectional controls as ``\\u202e``
(``shown``, the same rule as ``evalgate/report/_format.py``'s ``clean``), then escaped for HTML,
Markdown or XML."""

from __future__ import annotations

import html
import math
import re
import xml.etree.ElementTree as ET
from typing import Any

from evalgate.probe.cache import summary_line as cache_line
from evalgate.probe.warm_cold import summary_line as warm_cold_line

__all__ = ["TITLES", "junit_xml", "probe_html", "shown", "summary_line", "summary_md"]

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


def summary_line(report: dict[str, Any]) -> str:
    """The probe's one line (``probe cache`` and ``probe warm-cold`` each say it their way)."""
    if report["probe"] == "warm_cold":
        return warm_cold_line(report)
    return cache_line(report)


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
        ("margin", f"{report['margin']:.3f}x ({report['settings']['share']:g} of the gap)"),
        ("CROSS cached tokens max", str(report["oracle"]["cross_cached_max"])),
        ("time", f"{report['seconds']:.0f} s"),
    ]


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


def probe_html(report: dict[str, Any]) -> str:
    """probe.html: one self-contained page (no script, no external file) with the conditions'
    latencies and cached tokens, the figures, the verdict and its reasons, and any flipped answers."""

    def e(value: object) -> str:
        return html.escape(shown(value))

    title, verdict = TITLES.get(report["probe"], report["probe"]), report["verdict"]
    head, rows = _rows(report)
    table = ""
    if rows:
        table = (
            "<table><tr>" + "".join(f"<th>{e(h)}</th>" for h in head) + "</tr>"
            + "".join("<tr>" + "".join(f"<td>{e(c)}</td>" for c in r) + "</tr>" for r in rows)
            + "</table>"
        )  # fmt: skip
    facts = "".join(f"<tr><th>{e(k)}</th><td>{e(v)}</td></tr>" for k, v in _facts(report))
    reasons = "".join(f"<li>{e(str(r))}</li>" for r in report["reasons"])
    flipped = [i for i in report.get("items", []) if i.get("flip")]
    flips = ""
    if flipped:
        flips = (
            "<h2>Flipped answers</h2><table><tr><th>item</th><th>warm</th><th>cold</th></tr>"
            + "".join(
                f"<tr><td>{e(str(i['item']))}</td><td><pre>{e(str(i['warm']))}</pre></td>"
                f"<td><pre>{e(str(i['cold']))}</pre></td></tr>"
                for i in flipped
            )
            + "</table>"
        )
    color = {"PASS": "#1a7f37", "BLOCK": "#cf222e"}.get(verdict, "#9a6700")
    return (
        '<!doctype html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>evalgate probe: {e(title)} {e(verdict)}</title><style>"
        "body{font-family:system-ui,sans-serif;max-width:60em;margin:2em auto;padding:0 1em}"
        "table{border-collapse:collapse;margin:1em 0}td,th{border:1px solid #ccc;padding:.3em .6em;"
        "text-align:left;vertical-align:top}pre{margin:0;white-space:pre-wrap}"
        f".verdict{{color:{color}}}</style></head><body>"
        f'<h1>evalgate probe: {e(title)} <span class="verdict">{e(verdict)}</span></h1>'
        f"<p>{e(summary_line(report))}</p>"
        f"<p>server: {e(str(report.get('server', '')))}</p>"
        f"{table}<table>{facts}</table><h2>Why</h2><ul>{reasons}</ul>{flips}"
        "</body></html>\n"
    )
