"""junit.xml: one testcase per (suite, metric), so any CI shows which suite blocked the rollout
(and one for a long-context suite's gated row, its longest length, and one per gated drift row:
a drift budget on the mean KL or the perplexity ratio).

A row that blocks is a <failure>; an UNDERPOWERED row passes with its reason in <system-out>; an ERROR verdict adds one <error> testcase named ``verdict`` (an INCONCLUSIVE one, under --require-power, a <failure>)
(there is no per-row answer when the run is incomplete). Output is deterministic: no timestamps
beyond the manifest's, times from the recorded per-suite durations.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET

from evalgate.report._drift import drift_label, drift_value
from evalgate.report._format import clean
from evalgate.report._format import p as pvalue
from evalgate.report._view import FactRow, RunView

__all__ = ["render_junit"]


def _durations(facts: list[FactRow]) -> dict[str, float]:
    out: dict[str, float] = {}
    for f in facts:
        if f.seconds is not None:
            out[f.suite] = out.get(f.suite, 0.0) + f.seconds
    return out


def _case(
    parent: ET.Element, suite: str, name: str, seconds: float, summary: str, status: str, reason: str
) -> int:
    """One gated row's testcase: a <failure> when it blocks, else its reason in <system-out>; returns 1 on a failure."""
    case = ET.SubElement(parent, "testcase", classname=f"evalgate.{suite}", name=name, time=f"{seconds:.2f}")
    if status == "block":
        ET.SubElement(case, "failure", message=reason, type="evalgate.block").text = summary
        return 1
    ET.SubElement(case, "system-out").text = f"{summary}\n{reason}"
    return 0


def render_junit(view: RunView) -> str:
    durations = _durations(view.facts)
    suite_el = ET.Element("testsuite", name=clean(f"evalgate.{view.run_id}"))
    failures = errors = 0
    for r in view.rows:
        seconds = durations.get(r.suite, 0.0) if r.primary else 0.0
        name = r.metric + ("" if r.primary else " (info)")
        summary = (
            f"{r.suite} {r.metric}: n={r.n} baseline={r.baseline} candidate={r.candidate} "
            f"delta={r.delta} CI={r.ci} p={r.p} p_holm={r.p_adjusted} flips={r.flips} "
            f"n10/n01={r.n10}/{r.n01} MDE={r.mde} status={r.status}"
        )
        failures += _case(suite_el, r.suite, name, seconds, summary, r.status, r.reason)
    for panel in view.lengths:  # a long-context suite's gated row: the longest length
        t = panel.trend
        if t is None or not t.gated:
            continue
        name = f"{panel.metric} at {t.context_length} tokens (longest length)"
        summary = (
            f"{panel.suite} {panel.metric} at {t.context_length} tokens: n={t.n} baseline={t.baseline:.3f} "
            f"candidate={t.candidate:.3f} n10/n01={t.n10}/{t.n01} p={t.p_value:.3g} "
            f"p_holm={pvalue(t.p_adjusted)} status={t.status}"
        )
        failures += _case(suite_el, panel.suite, name, 0.0, summary, t.status, clean(t.reason))
    for drift in view.drift:  # a drift suite's gated budget rows (gate/_drift.py)
        for d in drift.gated:
            summary = (
                f"{drift.suite} {drift_label(d)}: n={d.n} documents ({d.units} {d.unit}) "
                f"estimate={drift_value(d.measure, d.estimate)} lower={drift_value(d.measure, d.lower)} "
                f"upper={drift_value(d.measure, d.upper)} budget={drift_value(d.measure, d.budget)} "
                f"p={d.p_value:.3g} p_holm={pvalue(d.p_adjusted)} status={d.status}"
            )
            name = f"{drift_label(d)} within budget"
            failures += _case(suite_el, drift.suite, name, 0.0, summary, d.status, clean(d.reason))
    if view.verdict == "INCONCLUSIVE":  # --require-power: a PASS too weak to ship on
        failures += 1
        case = ET.SubElement(suite_el, "testcase", classname="evalgate", name="verdict", time="0.00")
        ET.SubElement(
            case, "failure", message=clean(view.reason), type="evalgate.inconclusive"
        ).text = view.reason
    if view.verdict == "ERROR":
        errors += 1
        case = ET.SubElement(suite_el, "testcase", classname="evalgate", name="verdict", time="0.00")
        err = ET.SubElement(case, "error", message=view.reason, type="evalgate.error")
        err.text = "\n".join([view.reason, *view.errors[:50]])
    total = sum(durations.values())
    suite_el.set("tests", str(len(suite_el)))
    suite_el.set("failures", str(failures))
    suite_el.set("errors", str(errors))
    suite_el.set("skipped", "0")
    suite_el.set("time", f"{total:.2f}")
    props = ET.Element("properties")
    for k, val in (
        ("verdict", view.verdict),
        ("reason", view.reason),
        ("policy", view.policy),
        ("alpha", str(view.alpha)),
        ("engine", f"{view.engine} {view.engine_version}".strip()),
        ("git", view.git),
        *((f"variant.{arm}", name) for arm, name in view.variants.items()),
    ):
        ET.SubElement(props, "property", name=k, value=clean(val))
    suite_el.insert(0, props)
    root = ET.Element(
        "testsuites",
        name="evalgate",
        tests=suite_el.get("tests", "0"),
        failures=str(failures),
        errors=str(errors),
        time=f"{total:.2f}",
    )
    root.append(suite_el)
    ET.indent(root)
    return '<?xml version="1.0" encoding="utf-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"
