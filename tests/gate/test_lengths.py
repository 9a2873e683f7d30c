"""Long-context suites (#21): rows per context length, the gated longest-length row, the
sent-prompt proof, and how reports show them. Records are synthetic (the long_context suite's
record interface: ``extra`` with ``context_length``, ``task``, ``depth``, ``prompt_tokens`` and
``sent_hash``), so each test knows its counts exactly."""

from __future__ import annotations

import hashlib
import itertools
import json
import math
import re
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import html5lib
import numpy as np
import pytest
from rich.console import Console
from scipy import stats as st

import evalgate
from evalgate import stats
from evalgate.cli import main
from evalgate.engines.fake import FakeEngine
from evalgate.gate import GatePolicy, decide
from evalgate.gate._lengths import MARGIN_TEST, TREND_TEST, SuiteLengths, length_rows, suite_lengths
from evalgate.report import render_run
from evalgate.report.lengths_svg import lengths_chart
from evalgate.report.terminal import print_verdict
from evalgate.store.records import Pair, Record, RecordStore
from tests.helpers.runs import SynthSuite, build_run, rendered_page

SUITE, METRIC = "long_context", "string_match_all"
Counts = tuple[int, int, int, int]


def _rec(arm: str, item: str, length: int, ok: int, *, sent: str | None = None, **extra: Any) -> Record:
    return Record(
        run_id="r", arm=arm, variant=arm, suite=SUITE, suite_version=1, item_id=item, repeat=0,
        prompt_hash=f"p-{item}", target=["12345"], response="12345" if ok else "nope", extracted=None,
        metrics={METRIC: float(ok)},
        extra={"context_length": length, "task": "niah_single", "depth": 0.5, "prompt_tokens": length - 3,
               "sent_hash": sent or hashlib.sha256(item.encode()).hexdigest()[:16], **extra},
    )  # fmt: skip


def length_pairs(by_length: dict[int, Counts]) -> list[Pair]:
    """Pairs per length from each length's (n11, n10, n01, n00)."""
    out = []
    for length, counts in by_length.items():
        i = 0
        for (b, c), k in zip(((1, 1), (1, 0), (0, 1), (0, 0)), counts, strict=True):
            for _ in range(k):
                item = f"niah_single/{length}/{i:04d}"
                out.append(
                    Pair(item, 0, _rec("baseline", item, length, b), _rec("candidate", item, length, c))
                )
                i += 1
    return out


def midp(n10: int, n01: int, alternative: str) -> float:
    """Independent reference from scipy.stats.binomtest: mid-p = exact p - P(X = observed) (two-sided,
    half in each tail) or - P(X = observed) / 2 (one-sided), X ~ Bin(n10 + n01, 1/2)."""
    nd = n10 + n01
    if nd == 0:
        return 1.0
    point = st.binom.pmf(n10, nd, 0.5)
    if alternative == "less":  # H1: the candidate worse, n10 large
        return st.binomtest(n10, nd, 0.5, alternative="greater").pvalue - point / 2
    if n10 == n01:
        return 1.0
    return st.binomtest(n10, nd, 0.5).pvalue - point


# --- the per-length rows and the trend row ----------------------------------------------------


def test_length_rows_counts_and_two_sided_midp_against_scipy() -> None:
    rows = length_rows(
        length_pairs({2048: (30, 3, 1, 16), 1024: (40, 1, 2, 7), 4096: (20, 9, 2, 19)}), METRIC
    )
    assert [r.context_length for r in rows] == [1024, 2048, 4096]  # shortest first
    r = rows[2]
    assert (r.n, r.n11, r.n10, r.n01, r.n00, r.flips) == (50, 20, 9, 2, 19, 11)
    assert math.isclose(r.baseline, 29 / 50) and math.isclose(r.candidate, 22 / 50)
    assert math.isclose(r.delta, -7 / 50) and math.isclose(r.flip_rate, 11 / 50)
    for row in rows:
        assert math.isclose(row.p_value, midp(row.n10, row.n01, "two-sided"), rel_tol=1e-12)
    # by hand: 9 vs 2 of 11, two-sided mid-p = 2 P(X <= 2) - P(X = 2) = (2 * 67 - 55) / 2048
    assert math.isclose(rows[2].p_value, 79 / 2048, rel_tol=1e-12)


def test_trend_row_blocks_when_only_the_longest_length_regresses() -> None:
    """Three short lengths unchanged, 4k loses 10 of 50 net: pooled over 200 items the change is
    not significant, the longest-length row is, after Holm over the family."""
    pairs = length_pairs({
        1024: (35, 1, 1, 13), 2048: (35, 1, 2, 12), 4096: (34, 2, 2, 12), 8192: (25, 11, 1, 13),
    })  # fmt: skip
    v = decide({SUITE: ([METRIC], pairs)}, policy=GatePolicy(agreement_gate=False))
    pooled = v.suites[0]
    assert (pooled.n, pooled.n10, pooled.n01) == (200, 15, 6)
    assert pooled.p_value > 0.05 and not pooled.significant  # the pooled row alone would pass
    [section] = v.lengths
    t = section.trend
    assert t is not None and t.context_length == 8192 and (t.n10, t.n01, t.n) == (11, 1, 50)
    assert math.isclose(t.p_value, midp(11, 1, "less"), rel_tol=1e-12)
    # Holm over two tests: the trend's p is the smaller, so adjusted = 2 p
    assert math.isclose(t.p_adjusted, min(1.0, 2 * t.p_value), rel_tol=1e-12)
    assert t.significant and t.status == "block"
    exact = stats.discordant_trend([1, 1, 2, 11], [1, 2, 2, 1])  # informational, shown in the reason
    assert t.trend_p == exact.pvalue and f"p = {exact.pvalue:.3g}" in t.reason
    assert v.verdict == "BLOCK" and v.exit_code == 1
    assert "8192 tokens" in v.reason and "lost 11 and gained 1 of 50" in v.reason
    # the primary row's MDE is at the level Holm's first step demands over both tests
    assert math.isclose(pooled.mde_alpha, 0.05 / 2)
    assert v.to_dict()["lengths"][0]["trend"]["status"] == "block"


def test_trend_row_is_one_sided_and_passes_an_improvement() -> None:
    pairs = length_pairs({1024: (40, 1, 1, 8), 8192: (25, 1, 12, 12)})
    v = decide({SUITE: ([METRIC], pairs)}, policy=GatePolicy(agreement_gate=False, policy="regression"))
    t = v.lengths[0].trend
    assert t is not None and t.p_value > 0.99 and t.status == "pass"
    assert v.verdict == "PASS" and "no significant loss at the longest context length" in v.reason


def test_no_lengths_leaves_the_verdict_as_it_was() -> None:
    """Records without a context length: no section, no extra Holm member, no key in verdict.json."""
    pairs = length_pairs({1024: (30, 6, 1, 13)})
    plain = [Pair(p.item_id, 0, _strip(p.baseline), _strip(p.candidate)) for p in pairs]
    v = decide({SUITE: ([METRIC], plain)}, policy=GatePolicy())
    assert v.lengths == [] and "lengths" not in v.to_dict()
    assert v.suites[0].mde_alpha == 0.05 / 2  # the suite and its agreement row only


def _strip(r: Record) -> Record:
    return Record(**{**r.__dict__, "extra": {}})


def test_one_length_has_rows_but_no_trend() -> None:
    s = suite_lengths(SUITE, METRIC, length_pairs({2048: (30, 6, 1, 13)}))
    assert s is not None and len(s.rows) == 1 and s.trend is None and "one context length" in s.note


def test_repeats_give_a_note_not_rows() -> None:
    s = suite_lengths(
        SUITE, METRIC, length_pairs({1024: (3, 1, 0, 1), 2048: (3, 0, 1, 1)}), kind="continuous"
    )
    assert s is not None and s.rows == [] and s.trend is None and "--repeats" in s.note


def test_sequential_shows_the_trend_without_gating_it() -> None:
    pairs = length_pairs({1024: (35, 1, 1, 13), 8192: (25, 11, 1, 13)})
    s = suite_lengths(SUITE, METRIC, pairs, gated=False)
    assert s is not None and s.trend is not None and not s.trend.gated and "--sequential" in s.note


def test_different_sent_prompts_are_an_error_never_a_verdict() -> None:
    pairs = length_pairs({1024: (30, 0, 0, 10), 2048: (30, 0, 0, 10)})
    bad = pairs[41]
    pairs[41] = Pair(bad.item_id, 0, bad.baseline, _rec("candidate", bad.item_id, 2048, 1, sent="f" * 16))
    v = decide({SUITE: ([METRIC], pairs)}, policy=GatePolicy())
    assert v.verdict == "ERROR" and v.exit_code == 3
    assert "the arms were sent different prompts for 1 item(s)" in v.reason and bad.item_id in v.reason
    assert v.suites[0].status == "error" and v.lengths == []


def test_a_failed_item_sent_nothing_to_compare() -> None:
    pairs = length_pairs({1024: (30, 0, 0, 10)})
    p = pairs[0]
    failed = _rec("candidate", p.item_id, 1024, 0, sent="0" * 16, error="HTTP 500")
    pairs[0] = Pair(p.item_id, 0, p.baseline, failed)
    assert decide({SUITE: ([METRIC], pairs)}, policy=GatePolicy()).verdict != "ERROR"


# --- the exact trend test ------------------------------------------------------------------------


def _brute(n10: list[int], n01: list[int]) -> tuple[float, float]:
    """P(T >= t) and the mid-p by enumerating every placement of the regressions among the
    discordant pairs (each equally likely under H0)."""
    groups = [j for j, (a, b) in enumerate(zip(n10, n01, strict=True)) for _ in range(a + b)]
    k, t = sum(n10), sum(j * a for j, a in enumerate(n10))
    law = [sum(groups[i] for i in c) for c in itertools.combinations(range(len(groups)), k)]
    ge, eq = sum(x >= t for x in law), sum(x == t for x in law)
    return ge / len(law), (ge - eq / 2) / len(law)


@pytest.mark.parametrize(
    ("n10", "n01"),
    [([1, 2, 4], [3, 2, 0]), ([0, 1, 1, 3], [2, 1, 1, 0]), ([2, 2], [2, 2]), ([0, 0, 5], [4, 1, 0])],
)
def test_discordant_trend_against_enumeration(n10: list[int], n01: list[int]) -> None:
    r = stats.discordant_trend(n10, n01)
    exact, mid = _brute(n10, n01)
    assert math.isclose(r.pvalue_exact, exact, rel_tol=1e-12) and math.isclose(r.pvalue, mid, rel_tol=1e-12)


def test_discordant_trend_with_two_groups_is_fishers_exact_test() -> None:
    n10, n01 = [2, 9], [6, 1]
    r = stats.discordant_trend(n10, n01, mid_p=False)
    # rows: groups; columns: regression, improvement; H1: the later group has more regressions
    _, p = st.fisher_exact([[n10[1], n01[1]], [n10[0], n01[0]]], alternative="greater")
    assert math.isclose(r.pvalue, p, rel_tol=1e-12)
    assert r.statistic == 9 and math.isclose(r.expected, 11 / 18 * 10)


def test_discordant_trend_edges() -> None:
    assert stats.discordant_trend([0, 0], [0, 0]).pvalue == 1.0  # nothing discordant
    assert stats.discordant_trend([3, 4], [0, 0]).pvalue == 1.0  # all regressions: no variation
    assert stats.discordant_trend([0, 5, 0], [0, 2, 0]).pvalue == 1.0  # one group with any
    with pytest.raises(ValueError):
        stats.discordant_trend([1], [1, 2])


# --- reports -----------------------------------------------------------------------------------


def long_run(
    root: Path, by_length: dict[int, Counts], *, name: str = SUITE, extra: dict[str, Any] | None = None
) -> Path:
    """A run folder (tests/helpers/runs.py) whose records carry the long_context suite's ``extra``."""
    outcomes = [
        (length, b, c)
        for length, counts in by_length.items()
        for (b, c), k in zip(((1, 1), (1, 0), (0, 1), (0, 0)), counts, strict=True)
        for _ in range(k)
    ]
    run = build_run(root, [SynthSuite(name, (len(outcomes), 0, 0, 0), metrics=(METRIC,))], extra=extra)
    for side, arm in enumerate(("baseline", "candidate")):
        path = RecordStore(run).path(name, arm)
        lines = []
        for line in path.read_text(encoding="utf-8").splitlines():
            rec = json.loads(line)
            length, *ok = outcomes[int(rec["item_id"][-4:])]
            rec["metrics"] = {METRIC: float(ok[side])}
            rec["extra"] = {"context_length": length, "task": "niah_single", "depth": 0.5,
                            "prompt_tokens": length - 2, "sent_hash": rec["prompt_hash"][-16:]}  # fmt: skip
            lines.append(json.dumps(rec) + "\n")
        path.write_text("".join(lines), encoding="utf-8")
    return run


REGRESSES_AT_8K = {1024: (35, 1, 1, 13), 2048: (35, 1, 2, 12), 4096: (34, 2, 2, 12), 8192: (25, 11, 1, 13)}


def _svgs(page: str) -> list[ET.Element]:
    return [
        ET.fromstring(m)
        for m in re.findall(r'<svg xmlns="http://www.w3.org/2000/svg" class="lengths".*?</svg>', page, re.S)
    ]


def test_report_shows_the_length_panel_next_to_the_forest_plot(tmp_path: Path) -> None:
    run = long_run(tmp_path / "run", REGRESSES_AT_8K)
    _, verdict = render_run(run)
    assert verdict.verdict == "BLOCK" and "8192 tokens" in verdict.reason
    page = (run / "report.html").read_text(encoding="utf-8")
    html5lib.HTMLParser(strict=True, namespaceHTMLElements=False).parse(page)
    forest, panel, pair = page.index('id="forest"'), page.index('id="lengths-0"'), page.index('id="pair"')
    assert forest < panel < pair  # beside the forest plot
    [svg] = _svgs(page)
    assert svg.find("{http://www.w3.org/2000/svg}title").text.startswith("long_context: string_match_all")
    labels = [t.text for t in svg.iter("{http://www.w3.org/2000/svg}text")]
    assert ["1k", "2k", "4k", "8k"] == [x for x in labels if x and x.endswith("k")]
    assert "BLOCK (gated)" in labels
    # what it buys (the KV buffers of a fixed pool: 90 vs 48 MiB) and what it costs (8k flips)
    assert "90.0 MiB, candidate 48.0 MiB (1.88x the tokens per MiB)" in page
    assert "24.0% of answers flipped at 8k tokens" in page
    assert '<td class="mono">8k (8,192 tokens)</td>' in page and '<td class="mono">11 / 1</td>' in page
    summary = (run / "summary.md").read_text(encoding="utf-8")
    assert "#### long\\_context by context length" in summary
    assert "| 8k (8,192 tokens) | 50 | 0.720 | 0.520 | -20.0 pt | 12 (24.0%) | 11 / 1 |" in summary
    assert json.loads((run / "verdict.json").read_text())["lengths"][0]["trend"]["status"] == "block"
    junit = ET.fromstring((run / "junit.xml").read_bytes())  # the CI sees which length blocked
    [failed] = [c for c in junit.iter("testcase") if c.find("failure") is not None]
    assert failed.get("name") == "string_match_all at 8192 tokens (longest length)"
    assert junit.get("failures") == "1" and "lost 11 and gained 1 of 50" in failed.find("failure").get(
        "message"
    )


def test_capacity_in_tokens_when_the_run_recorded_it(tmp_path: Path) -> None:
    server = {"capacity": {"kv_tokens": 686_000, "kv_mib": 40_000.0, "pool_sized_by_memory": True}}
    cand = {"capacity": {"kv_tokens": 1_372_000, "kv_mib": 40_000.0, "pool_sized_by_memory": True}}
    run = long_run(tmp_path / "run", {1024: (40, 0, 0, 10), 2048: (40, 1, 0, 9)})
    manifest = json.loads((run / "manifest.json").read_text())
    manifest["arms"]["baseline"]["server"], manifest["arms"]["candidate"]["server"] = server, cand
    (run / "manifest.json").write_text(json.dumps(manifest))
    _, verdict = render_run(run)
    page = (run / "report.html").read_text(encoding="utf-8")
    assert (
        "KV capacity: baseline 686,000 tokens, candidate 1,372,000 (+686,000 tokens of KV, 2.00x by KV pool"
        in page
    )
    assert "2.0% of answers flipped at 2k tokens" in page and verdict.verdict == "PASS"


def test_chart_escapes_text_and_parses(tmp_path: Path) -> None:
    hostile = "<script>alert(1)</script>&\"'"
    s = suite_lengths(hostile, "m<x>", length_pairs({1024: (5, 1, 0, 4), 4096: (5, 2, 1, 2)}))
    assert s is not None
    svg = str(lengths_chart(s, arms=("<b>", "fp8&kv")))
    root = ET.fromstring(svg)  # well formed
    assert "<script>" not in svg and "&lt;script&gt;" in svg and "fp8&amp;kv" in svg
    assert root.find("{http://www.w3.org/2000/svg}title").text.startswith(hostile)
    one = suite_lengths(SUITE, METRIC, length_pairs({2048: (5, 1, 0, 4)}))
    assert one is not None and ET.fromstring(str(lengths_chart(one)))  # one length: no trend mark
    assert str(lengths_chart(SuiteLengths(SUITE, METRIC))) == ""


def test_terminal_prints_the_length_table() -> None:
    v = decide({SUITE: ([METRIC], length_pairs(REGRESSES_AT_8K))}, policy=GatePolicy())
    console = Console(record=True, width=160)
    print_verdict(v, console)
    text = console.export_text()
    assert "long_context by context length" in text and "8k (8,192 tokens)" in text
    assert "11 / 1" in text and "Longest length, 8k tokens (BLOCK): 11 item(s) lost, 1 gained of 50" in text


def test_a_run_without_lengths_renders_without_the_panel(tmp_path: Path) -> None:
    run = build_run(tmp_path / "run", [SynthSuite("gsm8k", (40, 3, 2, 5))])
    page = rendered_page(run)
    assert "by context length" not in page and 'class="lengths"' not in page
    assert "lengths" not in json.loads((run / "verdict.json").read_text())
    assert "context length" not in (run / "summary.md").read_text(encoding="utf-8")


def test_non_inferiority_gates_the_longest_length_with_the_agreement_tests() -> None:
    pairs = length_pairs(REGRESSES_AT_8K)
    v = decide({SUITE: ([METRIC], pairs)}, policy=GatePolicy(policy="non-inferiority", margin="5pt"))
    t = v.lengths[0].trend
    assert t is not None and t.test == MARGIN_TEST
    # the family: the flip test, the trend row (the suite's row is tested on its own)
    holm = stats.holm([v.agreement[0].p_value, t.p_value])
    assert math.isclose(t.p_adjusted, holm[1], rel_tol=1e-12)
    assert t.significant and t.status == "block" and "worse by more than the margin" in t.reason
    # the pooled row passes a 15 pt margin; 8k alone loses 30 pt, significantly beyond it
    worse = {**REGRESSES_AT_8K, 8192: (20, 16, 1, 13)}
    off = decide(
        {SUITE: ([METRIC], length_pairs(worse))},
        policy=GatePolicy(policy="non-inferiority", margin="15pt", agreement_gate=False),
    )
    assert off.suites[0].status == "pass" and off.verdict == "BLOCK"
    assert (
        "at the longest context length (8192 tokens)" in off.reason and "loss beyond the margin" in off.reason
    )


def test_under_non_inferiority_the_longest_length_row_tests_against_the_margin() -> None:
    """8k loses 11 and gains 1 of 50 (-20 pt): beyond a 5 pt margin significantly (exact
    unconditional test of the excess loss, the pooled row's Tango statistic), not beyond 10 pt.
    Under the other policies the row stays "any loss" (one-sided McNemar)."""
    pairs = length_pairs(REGRESSES_AT_8K)
    for margin, blocks in (("5pt", True), ("10pt", False)):
        policy = GatePolicy(policy="non-inferiority", margin=margin, agreement_gate=False)
        t = decide({SUITE: ([METRIC], pairs)}, policy=policy).lengths[0].trend
        assert t is not None and t.test == MARGIN_TEST
        expected = stats.excess_test(11, 1, 50, margin=policy.margin_for(t.baseline) or 0.0)
        assert expected.method == "exact" and math.isclose(t.p_value, expected.pvalue, rel_tol=1e-12)
        assert t.significant is blocks, (margin, t.p_value)
    assert math.isclose(stats.excess_test(11, 1, 50, margin=0.1).pvalue, 0.0696, abs_tol=5e-4)
    # a relative margin is taken of the longest length's baseline accuracy (36 / 50)
    rel = decide(
        {SUITE: ([METRIC], pairs)},
        policy=GatePolicy(policy="non-inferiority", margin="10%rel", agreement_gate=False),
    ).lengths[0]
    assert rel.trend is not None and "(7.2 pt)" in rel.note
    plain = decide({SUITE: ([METRIC], pairs)}, policy=GatePolicy(policy="regression", agreement_gate=False))
    assert plain.lengths[0].trend is not None and plain.lengths[0].trend.test == TREND_TEST


def test_a_candidate_inside_the_margin_at_every_length_is_not_blocked_by_the_longest_length() -> None:
    """1 pt worse at every length, 2 pt margin, 2,000 items per length: "no loss" blocked it 56 %
    of the time (#29); against the margin the row does not reject (seeded draw of one run)."""
    rng = np.random.default_rng(29)
    counts = {}
    for length in (1024, 2048, 4096, 8192):
        n10 = int(rng.binomial(2000, 0.04))
        n01 = int(rng.binomial(2000 - n10, 0.03))
        counts[length] = (1400 - n10, n10, n01, 600 - n01)
    policy = GatePolicy(policy="non-inferiority", margin="2pt", agreement_gate=False)
    t = decide({SUITE: ([METRIC], length_pairs(counts))}, policy=policy).lengths[0].trend
    assert t is not None and not t.significant and t.status == "pass", t.reason
    mcnemar = stats.mcnemar(t.n10, t.n01, alternative="less", mid_p=True).pvalue
    assert t.p_value > mcnemar  # the margin test asks less of the candidate than "no loss"


def test_the_exact_trend_is_left_out_where_it_can_say_nothing() -> None:
    only_long = suite_lengths(SUITE, METRIC, length_pairs({1024: (40, 0, 0, 10), 4096: (30, 9, 0, 11)}))
    assert only_long is not None and only_long.trend is not None and only_long.trend.trend_p is None


def test_the_aa_arm_must_be_sent_the_same_prompts_too() -> None:
    pairs = length_pairs({1024: (30, 0, 0, 10)})
    aa = [Pair(p.item_id, 0, p.baseline, _rec("candidate", p.item_id, 1024, 1)) for p in pairs]
    p = aa[3]
    aa[3] = Pair(p.item_id, 0, p.baseline, _rec("candidate", p.item_id, 1024, 1, sent="a" * 16))
    v = decide({SUITE: ([METRIC], pairs)}, policy=GatePolicy(), aa_pairs={SUITE: aa})
    assert (
        v.verdict == "ERROR"
        and "the A/A pair: long_context: the arms were sent different prompts" in v.reason
    )
    v = decide({SUITE: ([METRIC], pairs)}, policy=GatePolicy(), aa_pairs={SUITE: aa[:3] + aa[4:]})
    assert v.verdict != "ERROR"


# --- the compare loop on the fake engine (the long_context suite's own records) ------------------


def _needles(prompt: str) -> str:
    """The right answer to a needle task: every value of the asked key (else nothing right)."""
    asked = re.findall(r"special magic numbers? for (.+?) mentioned in the provided text", prompt)
    if not asked:
        return "I do not know"
    key = re.escape(asked[-1])
    return " ".join(re.findall(rf"One of the special magic numbers for {key} is: (.+?)\.", prompt)) or "none"


def test_compare_on_the_fake_engine_gives_length_rows(tmp_path: Path, use: Any) -> None:
    """The suite's own records (lengths, sent_hash) through the whole loop: the candidate misses
    every needle in its 4k prompts, so the longest-length row blocks and the panel shows it."""

    def answer(arm: str, prompt: str) -> str:
        return "none" if arm == "candidate" and len(prompt) > 3000 else _needles(prompt)

    use(FakeEngine(answer, context=8192))
    out = tmp_path / "run"
    flags = ["--suites", "long_context", "--context-lengths", "1k,2k,4k", "--limit", "12"]
    code = main(
        ["compare", "--engine", "fake", "--baseline", "bf16", "--candidate", "fp8", "--out", str(out), *flags]
    )
    v = json.loads((out / "verdict.json").read_text())
    [section] = v["lengths"]
    assert [r["context_length"] for r in section["rows"]] == [1024, 2048, 4096]
    assert [r["n"] for r in section["rows"]] == [12, 12, 12]
    short, _, longest = section["rows"]
    assert short["n10"] == short["n01"] == 0 and short["baseline"] > 0  # the needles were found
    assert longest["n10"] == round(longest["baseline"] * 12) > 0 and longest["candidate"] == 0.0
    assert section["trend"]["context_length"] == 4096
    records = RecordStore(out).load("long_context", "baseline")
    cand = RecordStore(out).load("long_context", "candidate")
    assert all(r.extra.sent_hash == cand[k].extra.sent_hash for k, r in records.items())
    page = (out / "report.html").read_text(encoding="utf-8")
    assert 'id="lengths-0"' in page and len(_svgs(page)) == 1
    assert code == {"PASS": 0, "BLOCK": 1}[v["verdict"]] == 1
    before = {name: (out / name).read_bytes() for name in ("verdict.json", "report.html", "summary.md")}
    assert main(["report", str(out)]) == 1  # recomputed from the run folder alone: the same bytes
    assert all((out / name).read_bytes() == data for name, data in before.items())


def test_load_run_lists_the_length_rows(tmp_path: Path) -> None:
    run = long_run(tmp_path / "run", REGRESSES_AT_8K)
    render_run(run)
    frame = evalgate.load_run(run).verdict()
    lengths = frame[frame["kind"] == "length"]
    assert list(lengths["context_length"]) == [1024, 2048, 4096, 8192] and list(lengths["n10"]) == [
        1,
        1,
        2,
        11,
    ]
    [longest] = frame[frame["kind"] == "longest length"].to_dict("records")
    assert (longest["suite"], longest["context_length"], longest["status"]) == (SUITE, 8192, "block")
