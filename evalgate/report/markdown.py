"""summary.md: the verdict and the suites table for ``$GITHUB_STEP_SUMMARY`` and PR comments.

GitHub renders HTML inside Markdown, so every value from a model or a user is HTML-escaped and
its Markdown punctuation neutralised. The file stays under ``LIMIT`` by dropping changed-item
detail, never the verdict line or the suites table.
"""

from __future__ import annotations

import html
import re

from evalgate.report._drift import DriftPanel, DriftTable
from evalgate.report._gateway import GatewayPanel
from evalgate.report._items import ItemView, SuiteItems
from evalgate.report._view import RunView, Section

__all__ = ["LIMIT", "render_markdown"]

LIMIT = 65_000
"""Bytes (so also characters): below GitHub's step-summary and comment limits."""
_ICON = {"PASS": "✅", "BLOCK": "❌", "ERROR": "⚠️", "INCONCLUSIVE": "❔"}
_MD_SPECIAL = re.compile(r"([\\`*_\[\]|~])")
_CELL = 60


def _text(value: str, limit: int = 0) -> str:
    """Inline text: one line, optionally shortened, HTML-escaped (safe in HTML and Markdown)."""
    one = " ".join(value.split())
    if limit and len(one) > limit:
        one = one[: limit - 1] + "…"
    return html.escape(one, quote=False)


def _md(value: str, limit: int = 0) -> str:
    """A Markdown table cell: like ``_text`` plus escaped Markdown punctuation (``|`` above all)."""
    return _MD_SPECIAL.sub(r"\\\1", _text(value, limit))


def _size(parts: list[str]) -> int:
    return len("".join(parts).encode())


def render_markdown(view: RunView) -> str:
    head = _head(view)
    foot = [
        "\n<sub>Rendered by evalgate from the run's records and manifest; the full report with every "
        "changed item is <code>report.html</code> in the run folder.</sub>\n"
    ]
    details: list[str] = []
    omitted = 0
    budget = LIMIT - _size(head) - _size(foot) - 200
    for s in view.suite_items:
        for k in (len(s.regressions) + len(s.improvements), 20, 5, 0):
            block = _suite_block(s, k) if (s.n10 or s.n01) else ""
            if _size([*details, block]) <= budget:
                details.append(block)
                break
        else:
            omitted += 1
    parts = [*head]
    if any(details):
        parts.append("\n### Changed items\n")
        parts += [d for d in details if d]
    if omitted:
        parts.append(f"\n_{omitted} suite(s) of item detail omitted to stay under {LIMIT:,} characters._\n")
    return "".join(parts + foot)


def _head(v: RunView) -> list[str]:
    base = v.variants.get("baseline", "baseline")
    cand = v.variants.get("candidate", "candidate")
    out = [
        f"## evalgate {_ICON.get(v.verdict, '')} {v.verdict}: {_md(cand)} against {_md(base)}\n\n",
        f"**{v.verdict}**: {_md(v.reason)}\n\n",
        f"policy `{_text(v.policy)}` · alpha {v.alpha}"
        + (f" · margin {_md(v.margin_text)}" if v.margin_text else "")
        + f" · engine {_md(v.engine)} · exit code {v.exit_code} · run `{_text(v.run_id)}`\n\n",
    ]
    out += [f"**warning**: {_md(w)}\n\n" for w in v.warnings]  # fallbacks, declared differences
    if v.comparability:
        out.append(f"Comparability: {_md(v.comparability)}\n\n")
    differing = [a for a in [*v.models, *v.args] if a.differs]
    if differing:
        items = [
            f"`{_text(a.key)}`"
            + ("" if a.key in ("model", "sha256") else f" {_md(a.baseline)} → {_md(a.candidate)}")
            for a in differing
        ]
        out.append("Launch settings that differ: " + ", ".join(items) + "\n\n")
    else:
        out.append("Launch settings that differ: none\n\n")
    if v.what_ran:  # as the servers reported it (store/provenance.py)
        out.append("| what ran | baseline | candidate |\n|---|---|---|\n")
        out += [
            f"| {'**' + _md(r.label) + '**' if r.differs else _md(r.label)} | {_md(r.baseline)} | {_md(r.candidate)} |\n"
            for r in v.what_ran
        ]
        out.append("\n")
    if v.rows:  # a drift-only run has no accuracy rows: no empty table, as in the terminal
        out.append(
            "| suite | metric | n | baseline | candidate | delta | CI | p | p (Holm) | flips | n10 / n01 | MDE | status |\n"
            "|---|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|---|\n"
        )
    for r in v.rows:
        metric = f"**{_md(r.metric)}**" if r.primary else _md(r.metric)
        status = f"**{r.status.upper()}**" if r.status == "block" else r.status.upper()
        if r.underpowered and r.status != "underpowered":
            status += " · UNDERPOWERED"
        out.append(
            f"| {_md(r.suite)} | {metric} | {r.n} | {r.baseline} | {r.candidate} | {r.delta} | {r.ci} | "
            f"{r.p} | {r.p_adjusted} | {r.flips} | {r.n10} / {r.n01} | {r.mde} | {status} |\n"
        )
    if any(r.underpowered for r in v.rows):
        out.append(
            "\nUNDERPOWERED: the row's MDE is larger than "
            + (_md(v.margin_text) if v.margin_text else "the power floor (2 pt)")
            + ", so a PASS there is weak evidence; run more items to tighten it.\n"
        )
    out += [f"\n{_md(line)}\n" for line in v.not_judged]  # in full: never a cut sentence
    out += [_length_table(s) for s in v.lengths]
    out += [
        _length_table(s) for s in v.sections if s.key in ("answers", "output_lengths", "repeatability")
    ]  # report/answers.py
    if v.categories:  # by category, informational: a line per suite (the table is in report.html)
        out += [f"\n{_md(line)}\n" for line in v.categories.summaries]
    out += [_drift_table(s) for s in v.drift]  # drift suites (report/_drift.py)
    out += [_length_table(s) for s in v.flip_drift]
    out += [_gateway(g) for g in v.gateways]  # arms of several workers (report/_gateway.py)
    if v.notes:
        out.append("\n" + "".join(f"> note: {_md(n)}\n" for n in v.notes))
    return out


def _table(s: Section | DriftTable, keep: int | None = None) -> str:
    """A Markdown table of the first ``keep`` columns (all when None), the first left-aligned."""
    headers = s.headers[:keep]
    head = "| " + " | ".join(_md(h) for h in headers) + " |\n|---|" + "--:|" * (len(headers) - 1) + "\n"
    return head + "".join("| " + " | ".join(_md(c) for c in row[:keep]) + " |\n" for row in s.rows)


def _drift_table(s: DriftPanel) -> str:
    """A drift suite's rows (the reason of a blocking or underpowered row beneath) and its KL quantiles."""
    head = "| " + " | ".join(_md(h) for h in s.headers[:-1]) + " |\n|---|---|" + "--:|" * 5 + "---|\n"
    body = "".join(
        "| "
        + " | ".join([*(_md(c) for c in row[:-2]), f"**{row[-2]}**" if status == "block" else row[-2]])
        + " |\n"
        for row, status in zip(s.rows, s.statuses, strict=True)
    )
    flagged = "".join(f"\n- {_md(f)}" for f in s.flagged)
    quantiles = f"\n{_table(s.quantiles)}" if s.quantiles else ""
    return f"\n#### {_md(s.title)}\n\n{head}{body}{flagged}\n{quantiles}\n{_md(s.note)}\n"


def _length_table(s: Section) -> str:
    """A long-context suite's rows per context length, and what the candidate buys and costs."""
    head = "| " + " | ".join(_md(h) for h in s.headers) + " |\n|---|" + "--:|" * (len(s.headers) - 1) + "\n"
    rows = "".join("| " + " | ".join(_md(c) for c in row) + " |\n" for row in s.rows)
    return f"\n#### {_md(s.title)}\n\n{head}{rows}\n{_md(s.note)}\n"


def _gateway(g: GatewayPanel) -> str:
    """An arm behind smg: its gateway, program and policy on one line, then its workers' table."""
    facts = " · ".join(f"{_md(k)} {_md(val)}" for k, val in g.facts)
    note = f"\n{_md(g.note)}\n" if g.note else ""
    t = g.workers
    head = "| " + " | ".join(_md(h) for h in t.headers) + " |\n|---|---|---|--:|--:|\n"
    rows = "".join("| " + " | ".join(_md(c) for c in row) + " |\n" for row in t.rows)
    return f"\n#### {_md(g.title)}\n\n{facts}\n\n{head}{rows}{note}"


def _suite_block(s: SuiteItems, k: int) -> str:
    """A collapsed table of the suite's changed items, at most ``k`` rows."""
    summary = f"{_text(s.suite)} · {_text(s.metric)}: {s.n10} regressed, {s.n01} improved"
    rows = [("regression", it) for it in s.regressions] + [("improvement", it) for it in s.improvements]
    lines = [f"\n<details><summary>{summary}</summary>\n\n"]
    if k and rows:
        if s.private:
            lines.append("| change | item | baseline | candidate |\n|---|---|--:|--:|\n")
        else:
            lines.append(
                "| change | item | target | baseline answer | candidate answer |\n|---|---|---|---|---|\n"
            )
        lines += [_item_row(kind, it, s.private) for kind, it in rows[:k]]
    shown = min(k, len(rows))
    if s.n10 + s.n01 > shown:
        lines.append(f"\n{s.n10 + s.n01 - shown} more in report.html and items/.\n")
    lines.append("\n</details>\n")
    return "".join(lines)


def _item_row(kind: str, it: ItemView, private: bool) -> str:
    if private:
        return f"| {kind} | {_md(it.item_id)} | {it.baseline.value} | {it.candidate.value} |\n"
    return (
        f"| {kind} | {_md(it.item_id, _CELL)} | {_md(it.target_short, _CELL)} | "
        f"{_md(it.baseline.answer, _CELL)} | {_md(it.candidate.answer, _CELL)} |\n"
    )
