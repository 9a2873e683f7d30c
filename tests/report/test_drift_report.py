"""Drift suites in every report (#30): the budget rows, the per-token KL quantiles, the chart of the
KL by position, the flip-drift table, and the per-document views that replace the changed items.

Verdicts come from ``evalgate.gate.decide`` on synthetic pairs (kinds={"drift": "drift"}), or from a
synthetic run folder (tests/helpers/runs.py for the multiple-choice suite, drift records written
here in the drift suite's record shape), so every row is a real gate row.
"""

from __future__ import annotations

import dataclasses
import io
import json
import math
import random
import re
import xml.etree.ElementTree as ET
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import html5lib
import pytest
from rich.console import Console

import evalgate
from evalgate.cli import main
from evalgate.gate import GatePolicy, SuiteDrift, Verdict, decide
from evalgate.report import render_run
from evalgate.report._documents import document_view
from evalgate.report._drift import drift_panels, drift_value
from evalgate.report.drift_svg import drift_chart, nice_top
from evalgate.report.github import annotations
from evalgate.report.junit import render_junit
from evalgate.report.markdown import _drift_table
from evalgate.report.terminal import print_verdict
from evalgate.store.manifest import Manifest, write_manifest
from evalgate.store.records import Pair, Record, RecordStore
from tests.helpers.runs import SynthSuite, build_run

SCRIPT = "<script>alert(1)</script>"
SVG = "{http://www.w3.org/2000/svg}"
Top = list[list[list[float]]]


def _dist(rng: random.Random, k: int = 5) -> list[list[float]]:
    lps = sorted((-(rng.random() * 2 + 0.7 * i) for i in range(k)), reverse=True)
    z = math.log(sum(math.exp(x) for x in lps) + 0.05)  # 0.05 of the mass beyond the top-k
    return [[100.0 + i, lp - z] for i, lp in enumerate(lps)]


def _record(
    suite: str, arm: str, i: int, top: Top | None, *, loglik: float | None = None, words: float = 0
) -> Record:
    if top is not None:
        metrics = {"loglik": sum(pos[0][1] for pos in top), "tokens": float(len(top))}
    else:  # an imported lm-eval perplexity task: per document its loglik and word count, no distributions
        metrics = {"loglik": float(loglik or 0.0), "words": float(words)}
    return Record(
        run_id="20260101-000000-bf16-vs-fp8kv-test", arm=arm, variant=arm, suite=suite, suite_version=1,
        item_id=f"{suite}-{i:04d}", repeat=0, prompt_hash=f"h{i:015d}", target=None,
        response=None if top is None else {"top": top}, extracted=None, metrics=metrics,
        tokens={"prompt": 40, "scored": len(top or [])}, extra={"sent_hash": f"s{i:015d}"},
    )  # fmt: skip


def drift_pairs(
    n: int, noise: float, *, seed: int = 0, positions: int = 16, suite: str = "drift", arm: str = "candidate"
) -> list[Pair]:
    """``n`` documents whose candidate logprobs are the baseline's plus Gaussian noise (larger noise:
    larger KL); documents differ in their noise, so the bootstrap over documents has a spread."""
    rng = random.Random(seed)
    out = []
    for d in range(n):
        tb = [_dist(rng) for _ in range(positions)]
        s = noise * (d % 3 + 0.5)
        tc = [[[t, min(0.0, lp + rng.gauss(0, s))] for t, lp in pos] for pos in tb]  # a logprob is <= 0
        out.append(Pair(f"{suite}-{d:04d}", 0, _record(suite, "baseline", d, tb), _record(suite, arm, d, tc)))
    return out


def imported_pairs(n: int, *, suite: str = "wikitext") -> list[Pair]:
    """An imported perplexity task: the candidate loses 0.5 % of log-likelihood on every document."""
    out = []
    for d in range(n):
        words = 200.0 + 10 * d
        ll = -2.0 * words * (1 + 0.01 * (d % 4))
        b = _record(suite, "baseline", d, None, loglik=ll, words=words)
        c = _record(suite, "candidate", d, None, loglik=ll * 1.005, words=words)
        out.append(Pair(f"{suite}-{d:04d}", 0, b, c))
    return out


def _decide(pairs: list[Pair], *, aa: list[Pair] | None = None, suite: str = "drift") -> Verdict:
    metrics = ["loglik", "tokens" if pairs[0].baseline.response is not None else "words"]
    return decide(
        {suite: (metrics, pairs)},
        policy=GatePolicy(),
        kinds={suite: "drift"},
        aa_pairs=None if aa is None else {suite: aa},
    )


def _drift_run(root: Path, *, n: int = 32, noise: float = 0.01, imported: bool = False) -> Path:
    """A run folder with a drift suite (live, or an imported perplexity task) beside arc_easy, a
    multiple-choice suite whose flips give the flip-drift table."""
    pairs = imported_pairs(n, suite="drift") if imported else drift_pairs(n, noise)
    build_run(
        root,
        [
            SynthSuite("drift", (n, 0, 0, 0), kind="loglikelihood", metrics=("loglik", "words" if imported else "tokens")),
            SynthSuite("arc_easy", (30, 3, 2, 10), kind="loglikelihood", metrics=("acc", "acc_norm")),
        ],
    )  # fmt: skip
    store = RecordStore(root)
    for arm in ("baseline", "candidate"):
        path = store.path("drift", arm)
        path.write_text("".join(getattr(p, arm).to_json() + "\n" for p in pairs), encoding="utf-8")
    doc = json.loads((root / "manifest.json").read_text(encoding="utf-8"))
    doc["suites"]["drift"]["metric_kind"] = "drift"
    write_manifest(root, Manifest.model_validate(doc))
    return root


def _parse(text: str) -> object:
    return html5lib.HTMLParser(strict=True, namespaceHTMLElements=False).parse(text)


def _terminal(verdict: Verdict) -> str:
    out = io.StringIO()
    print_verdict(verdict, Console(file=out, width=200, color_system=None))
    return out.getvalue()


def test_a_drift_run_renders_its_rows_quantiles_chart_and_documents_everywhere(tmp_path: Path) -> None:
    """A PASS within budget: report.html (strict HTML5, one script), summary.md, junit.xml, the terminal,
    load_run and export all carry the drift rows; the documents replace the changed-item browser."""
    run_dir = _drift_run(tmp_path / "run")
    _, verdict = render_run(run_dir)
    assert verdict.verdict == "PASS", verdict.reason
    (drift,) = verdict.drift
    kld = next(r for r in drift.rows if r.measure == "kld")
    ppl = next(r for r in drift.rows if r.measure == "ppl_ratio")
    assert kld.status == ppl.status == "pass" and kld.estimate < 0.01
    assert verdict.flip_drift and verdict.flip_drift[0].suite == "arc_easy"

    page = (run_dir / "report.html").read_text(encoding="utf-8")
    tree = _parse(page)
    assert len(tree.findall(".//script")) == 1
    assert 'id="drift-0"' in page and 'href="#drift-0"' in page
    assert "mean KL (nats/token)" in page and "perplexity ratio (per token)" in page
    assert f">{kld.estimate:.3g}<" in page and f">x{ppl.estimate:.4f}<" in page
    assert f">{drift_value('kld', kld.upper)}<" in page and ">0.01<" in page and ">x1.0200<" in page
    top1 = next(r for r in drift.rows if r.measure == "top1_agree")
    assert f">{top1.estimate * 100:.1f}%<" in page
    for q in ("p50", "p90", "p99", "p99.9"):
        assert f"KL {q}" in page and f">{drift.quantiles['candidate'][q]:.3g}<" in page
    (svg,) = re.findall(r'<svg xmlns="http://www.w3.org/2000/svg" class="drift".*?</svg>', page, re.S)
    chart = ET.fromstring(svg)  # well formed on its own
    assert len(chart.findall(f".//{SVG}polyline")) == 1  # the candidate's line
    assert len(chart.findall(f".//{SVG}circle")) == len(drift.positions)
    assert "Does the distribution predict the flips?" in page and "AUC" in page
    assert "0.5 means the distribution" in page
    # the drift suite's items are documents (loglik per arm, mean KL), not regressions of "loglik"
    assert "32 paired documents" in page and "drift-0000" in page
    assert (
        "drift · loglik" not in page
        and "The arms agree on every item" not in page.split('id="suite-0')[1][:400]
    )

    summary = (run_dir / "summary.md").read_text(encoding="utf-8")
    assert "#### drift: distribution drift" in summary
    assert f"| mean KL (nats/token) | candidate | 32 | {kld.estimate:.3g} |" in summary
    assert "| pair | KL p50 | KL p90 | KL p99 | KL p99.9 | top-1 agreement |" in summary
    assert "flipped: mean choice KL" in summary

    junit = ET.fromstring((run_dir / "junit.xml").read_bytes())
    cases = {c.get("name"): c for c in junit.iter("testcase") if c.get("classname") == "evalgate.drift"}
    assert set(cases) == {"mean KL (nats/token) within budget", "perplexity ratio (per token) within budget"}
    assert all(c.find("failure") is None for c in cases.values())
    assert "status=pass" in (cases["mean KL (nats/token) within budget"].findtext("system-out") or "")
    assert junit.get("failures") == "0"

    text = _terminal(verdict)
    assert "mean KL (nats/token)" in text and "perplexity ratio (per token)" in text
    assert "drift per-token KL (candidate): p50" in text and "arc_easy flips vs choice KL" in text

    run = evalgate.load_run(run_dir)
    frame = run.verdict()
    rows = frame[frame["kind"] == "drift"]
    assert set(rows["measure"]) == {"kld", "ppl_ratio", "top1_agree"}
    kl_row = rows[rows["measure"] == "kld"].iloc[0]
    assert kl_row["status"] == "pass" and kl_row["p99.9"] == pytest.approx(
        drift.quantiles["candidate"]["p99.9"]
    )
    assert (frame["kind"] == "flip drift").sum() == 1
    docs = run.drift()
    assert len(docs) == 32 and set(docs["pair"]) == {"candidate"} and docs["kld_mean"].notna().all()
    assert docs["kld_mean"].mean() == pytest.approx(kld.estimate, rel=1e-9)  # equal lengths: mean of means
    pairs = run.pairs()
    assert not pairs[pairs["suite"] == "drift"]["flipped"].any()
    assert set(pairs[pairs["suite"] == "drift"]["direction"]) == {"drift"}

    assert main(["export", str(run_dir), "--format", "csv", "--out", str(tmp_path / "x")]) == 0
    assert (tmp_path / "x" / "drift.csv").read_text(encoding="utf-8").count("\n") == 33
    assert "kld" in (tmp_path / "x" / "verdict.csv").read_text(encoding="utf-8")


def test_a_drift_row_over_budget_blocks_in_junit_github_and_summary() -> None:
    """KL far over its budget: a BLOCK row is a JUnit <failure>, an ::error annotation and a bold
    status with its reason beneath in summary.md."""
    verdict = _decide(drift_pairs(30, 0.05))
    assert verdict.verdict == "BLOCK"
    (panel,) = drift_panels(verdict)
    md = _drift_table(panel)
    assert "| **BLOCK** |" in md and "- BLOCK: drift mean KL" in md
    blocking = [r for r in verdict.drift[0].rows if r.status == "block"]
    assert [line for line in annotations(verdict) if line.startswith("::error")] == [
        f"::error title=evalgate BLOCK::{r.reason}" for r in blocking
    ]
    view = _view_of(verdict)
    junit = ET.fromstring(render_junit(view))
    failures = [c for c in junit.iter("testcase") if c.find("failure") is not None]
    assert [c.get("name") for c in failures] == ["mean KL (nats/token) within budget"]
    assert failures[0].find("failure").get("type") == "evalgate.block"  # type: ignore[union-attr]
    assert junit.get("failures") == "1"


def test_an_underpowered_drift_row_passes_with_its_reason_and_a_warning() -> None:
    """Three documents cannot show the KL within its budget: UNDERPOWERED, which passes (JUnit
    system-out, as an underpowered accuracy row does) and warns; a bound that is not finite reads as a dash."""
    verdict = _decide(drift_pairs(3, 0.15))
    kld = next(r for r in verdict.drift[0].rows if r.measure == "kld")
    assert verdict.verdict == "PASS" and kld.status == "underpowered" and kld.lower is None
    (panel,) = drift_panels(verdict)
    assert panel.rows[0][4] == "—" and panel.rows[0][7] == "UNDERPOWERED"
    assert any(f.startswith("UNDERPOWERED: drift mean KL") for f in panel.flagged)
    assert f"::warning title=evalgate UNDERPOWERED::{kld.reason}" in annotations(verdict)
    junit = ET.fromstring(render_junit(_view_of(verdict)))
    case = next(c for c in junit.iter("testcase") if c.get("name") == "mean KL (nats/token) within budget")
    assert case.find("failure") is None and "status=underpowered" in (case.findtext("system-out") or "")


def test_the_aa_noise_floor_is_a_second_line_and_row() -> None:
    """With --aa the A/A pair's rows, quantiles and line are shown beside the candidate's, not gated."""
    pairs = drift_pairs(20, 0.03, seed=1)
    aa = drift_pairs(20, 0.002, seed=1, arm="aa")
    verdict = _decide(pairs, aa=aa)
    (panel,) = drift_panels(verdict)
    aa_rows = [row for row in panel.rows if row[1] == "A/A (noise floor)"]
    assert len(aa_rows) == 3 and all(row[6] == "not gated" for row in aa_rows)
    assert panel.quantiles is not None and [r[0] for r in panel.quantiles.rows] == [
        "candidate",
        "A/A (noise floor)",
    ]
    assert panel.svg.count("<polyline") == 2 and 'stroke-dasharray="6 4"' in panel.svg
    assert "drift per-token KL (A/A (noise floor))" in _terminal(verdict)
    assert len(panel.gated) == 2 and all(r.pair == "candidate" for r in panel.gated)


def test_an_imported_perplexity_task_has_ratio_rows_and_no_distributions(tmp_path: Path) -> None:
    """lm-eval's word perplexity: one gated ratio row per word, no KL, no quantiles, no chart; its
    documents show log-likelihoods and the change per word, and a dash for the KL."""
    run_dir = _drift_run(tmp_path / "run", n=12, imported=True)
    _, verdict = render_run(run_dir)
    (drift,) = verdict.drift
    assert [r.measure for r in drift.rows] == ["ppl_ratio"] and drift.rows[0].unit == "words"
    page = (run_dir / "report.html").read_text(encoding="utf-8")
    _parse(page)
    assert "perplexity ratio (per word)" in page and 'class="drift"' not in page
    assert "imported perplexity" in page and "no distributions recorded: no KL" in page
    assert "-0.0" in page and "words<" in page
    docs = evalgate.load_run(run_dir).drift()
    assert docs["kld_mean"].isna().all() and (docs["change_per_unit"] < 0).all()
    assert "per word" in _terminal(verdict)


def test_drift_text_is_escaped_and_odd_records_show_a_dash() -> None:
    """A hostile suite name stays text in the chart, Markdown and JUnit; a record whose top lists
    are malformed shows no KL (a dash), and one without any metrics no numbers, never a traceback."""
    verdict = _decide(drift_pairs(12, 0.01, suite=SCRIPT), suite=SCRIPT)
    (panel,) = drift_panels(verdict)
    assert SCRIPT not in panel.svg and "&lt;script&gt;" in panel.svg
    assert "<script" not in _drift_table(panel)
    ET.fromstring(render_junit(_view_of(verdict)))

    good = drift_pairs(1, 0.01)[0]
    odd = dataclasses.replace(good.candidate, response={"top": [[["x", "nan"]]] * 16})
    view = document_view(Pair("d", 0, good.baseline, odd), {"prompt": SCRIPT}, private=False)
    assert view.kld == "—" and view.top1 == "—" and view.baseline != "—" and view.units == "16 tokens"
    bare = dataclasses.replace(good.baseline, metrics={}, response="text")
    assert document_view(Pair("e", 0, bare, bare), None, private=True).baseline == "—"


def test_the_chart_scale_and_the_budget_line() -> None:
    """The axis tops at a round number; the budget line is drawn only near the data."""
    assert [nice_top(x) for x in (0.0031, 0.01, 0.011, 0.03, 0.7)] == [0.005, 0.01, 0.02, 0.05, 1.0]
    near = _decide(drift_pairs(12, 0.03)).drift[0]
    far = _decide(drift_pairs(12, 0.001)).drift[0]
    assert 'stroke="#cf222e" stroke-dasharray="3 3"' in drift_chart(near, budget=0.01)
    chart = drift_chart(far, budget=0.01)
    assert "above the chart" in chart and 'stroke-dasharray="3 3"' not in chart
    assert drift_chart(far) and drift_chart(SuiteDrift("empty")) == ""


def _view_of(verdict: Verdict) -> Any:
    """A minimal RunView for the renderers that read only the verdict's parts (JUnit)."""
    return SimpleNamespace(
        run_id="r", facts=[], rows=[], lengths=[], drift=drift_panels(verdict), verdict=verdict.verdict,
        reason=verdict.reason, errors=[], policy=verdict.policy, alpha=verdict.alpha, engine="fake",
        engine_version="", git="", variants={},
    )  # fmt: skip
