"""The short table `evalgate compare` prints when it finishes."""

from __future__ import annotations

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from evalgate.gate import Row, SuiteLengths, Verdict
from evalgate.report._categories import category_lines
from evalgate.report._drift import PAIRS, drift_label, drift_value, flip_drift_tables, quantile_rows
from evalgate.report._format import not_judged, show_bidi
from evalgate.report._lengths import HEADERS, length_cells, trend_text
from evalgate.report._repeatability import REPEAT_TITLE, repeatability_table
from evalgate.report.answers import answers_table, output_length_table

__all__ = ["print_verdict"]

_STYLE = {"PASS": "bold green", "BLOCK": "bold red", "ERROR": "bold yellow", "INCONCLUSIVE": "bold yellow"}


def print_verdict(verdict: Verdict, console: Console, *, run_dir: str = "") -> None:
    table = Table(title=None, show_lines=False)
    for col in (
        "suite",
        "metric",
        "n",
        "baseline",
        "candidate",
        "delta",
        "n10/n01",
        "flips",
        "p",
        "p_holm",
        "",
    ):
        table.add_column(col, justify="left" if col in ("suite", "metric", "") else "right")
    for r in verdict.suites:
        table.add_row(
            escape(r.suite),
            r.metric + ("" if r.primary else " (info)"),
            str(r.n),
            _score(r, r.n11 + r.n10, r.baseline),
            _score(r, r.n11 + r.n01, r.candidate),
            f"{r.delta * 100:+.1f} pt",
            f"{r.n10}/{r.n01}",
            f"{r.flips * 100:.1f}%",
            f"{r.p_value:.3g}",
            "" if r.p_adjusted is None else f"{r.p_adjusted:.3g}",
            r.status.upper(),
        )
    if verdict.suites:  # a drift-only run has no accuracy rows: no empty table
        console.print(table)
    for r in verdict.suites:  # why a suite was not judged, in full (the verdict's reason may be another)
        if r.primary and r.status in ("error", "missing") and r.reason not in verdict.reason:
            console.print(escape(show_bidi(not_judged(r.suite, r.reason))), soft_wrap=True)
    if verdict.agreement:
        agree = Table(title=None)
        for col in ("suite", "flips", "flip rate", "budget", "p", "p_holm", "KL", "top-1 / text agree", ""):
            agree.add_column(col, justify="left" if col in ("suite", "") else "right")
        for a in verdict.agreement:
            same = a.top1_agree if a.top1_agree is not None else a.text_agree
            budget = f"{a.budget:.1%}"
            if a.sampled is not None:  # --repeats: the excess over the arms' own disagreement, and its margin
                budget = f"excess {a.sampled.excess * 100:+.1f} / {a.sampled.margin * 100:.1f} pt"
            agree.add_row(
                escape(a.suite), f"{a.flips}/{a.n}", f"{a.flip_rate:.1%}", budget, f"{a.p_value:.3g}",
                "" if a.p_adjusted is None else f"{a.p_adjusted:.3g}",
                "" if a.kl_mean is None else f"{a.kl_mean:.3f}", "" if same is None else f"{same:.1%}",
                a.status.upper(),
            )  # fmt: skip
        console.print(agree)
    if verdict.drift:  # drift suites' budget rows (gate/_drift.py), then their per-token KL quantiles
        console.print(_drift(verdict))
        for d in verdict.drift:
            for row in quantile_rows(d):
                console.print(
                    f"{escape(show_bidi(d.suite))} per-token KL ({escape(row[0])}): p50 {row[1]}, p90 {row[2]}, p99 {row[3]}, "
                    f"p99.9 {row[4]}; top-1 agreement {row[5]}"
                )
    for _, rows in flip_drift_tables(verdict):  # does the choice KL predict the flips?
        for r in rows:
            console.print(
                f"{escape(r[0])} flips vs choice KL: {r[1]} flipped (mean KL {r[2]}), {r[3]} unflipped "
                f"(mean KL {r[4]}), AUC {r[5]}"
            )
    for section in verdict.lengths:  # long-context suites (gate/_lengths.py)
        console.print(_lengths(section))
        console.print(escape(show_bidi(trend_text(section))))
    if verdict.answers:  # generation suites per arm (report/answers.py)
        headers, rows = answers_table(verdict.to_dict()["answers"])
        answers = Table(title=None)
        for col in headers:
            answers.add_column(col, justify="left" if col in ("suite", "arm") else "right")
        for row in rows:
            answers.add_row(*map(escape, row))
        console.print(answers)
    if verdict.output_lengths:  # generation suites by their answers' length (report/answers.py)
        headers, rows = output_length_table(verdict.to_dict()["output_lengths"])
        by_length = Table(title=None)
        for col in headers:
            by_length.add_column(col, justify="left" if col == "suite" else "right")
        for row in rows:
            by_length.add_row(*map(escape, row))
        console.print(by_length)
    if verdict.repeatability:  # --aa both: each arm's repeat against its first run (report/_repeatability.py)
        headers, rows = repeatability_table(verdict.to_dict()["repeatability"])
        twice = Table(title=REPEAT_TITLE, title_justify="left")
        for col in headers:
            twice.add_column(col, justify="left" if col in ("suite", "compared", "") else "right")
        for row in rows:
            twice.add_row(*map(escape, row))
        console.print(twice)
    for line in category_lines(verdict):  # by category, informational (report/_categories.py)
        console.print(escape(show_bidi(line)), soft_wrap=True)
    if verdict.aa:
        console.print("A/A noise floor: " + ", ".join(f"{r.suite} {r.flips:.1%} flips" for r in verdict.aa))
    # the reason and notes may quote a server ("[/bold]", a U+202E in an error body): text, never
    # markup, and bidirectional controls shown as escapes
    if verdict.what_ran:  # what each arm's server reported it ran (store/provenance.py)
        ran = Table(title=None)
        for col in ("what ran", "baseline", "candidate", ""):
            ran.add_column(col)
        for w in verdict.what_ran:
            ran.add_row(
                w.label,
                escape(show_bidi(w.baseline)),
                escape(show_bidi(w.candidate)),
                "differs" if w.differs else "",
            )
        console.print(ran)
    if verdict.comparability is not None:  # before the verdict: is the pair one comparison at all?
        console.print(f"comparability: {escape(show_bidi(verdict.comparability.summary()))}")
    style = _STYLE.get(verdict.verdict, "bold")
    console.print(f"[{style}]{verdict.verdict}[/]: {escape(show_bidi(verdict.reason))}")
    for warning in verdict.warnings:  # beside the verdict: a fallback, a declared difference
        console.print(f"[bold yellow]warning:[/] {escape(show_bidi(warning))}")
    for note in verdict.notes:
        console.print(f"note: {escape(show_bidi(note))}")
    if run_dir:
        console.print(f"evidence: {escape(run_dir)}")


def _drift(verdict: Verdict) -> Table:
    table = Table(title=None)
    for col in ("suite", "measure", "pair", "n", "estimate", "lower", "upper", "budget", ""):
        table.add_column(col, justify="left" if col in ("suite", "measure", "pair", "") else "right")
    for d in verdict.drift:
        for r in d.rows:
            table.add_row(
                escape(show_bidi(r.suite)), drift_label(r), PAIRS.get(r.pair, escape(r.pair)), str(r.n),
                *(drift_value(r.measure, v) for v in (r.estimate, r.lower, r.upper)),
                "" if r.budget is None else drift_value(r.measure, r.budget), r.status.upper(),
            )  # fmt: skip
    return table


def _lengths(s: SuiteLengths) -> Table:
    table = Table(title=f"{escape(s.suite)} by context length", title_justify="left")
    for col in HEADERS:
        table.add_column(col, justify="left" if col == "context length" else "right")
    for r in s.rows:
        table.add_row(*length_cells(r))
    return table


def _score(r: Row, passed: int, rate: float) -> str:
    return f"{passed}/{r.n} ({rate:.1%})" if r.suite.startswith("private:") else f"{rate:.3f}"
