"""The drift rows: budgets on the KL and the perplexity ratio, in the Holm family or under NI."""

from __future__ import annotations

import hashlib
import math

import numpy as np
import pytest

from evalgate.errors import ConfigError
from evalgate.gate import (
    DEFAULT_KLD_BUDGET,
    DEFAULT_PPL_MARGIN,
    DriftBudget,
    GatePolicy,
    decide,
    parse_drift_budget,
)
from evalgate.store.records import Pair, Record
from tests.helpers.records import record

VOCAB = 64
K = 20


def _log_softmax(x: np.ndarray) -> np.ndarray:
    x = x - x.max()
    return x - math.log(float(np.exp(x).sum()))


def _top(logp: np.ndarray) -> list[list[float]]:
    order = np.argsort(-logp, kind="stable")[:K]
    return [[int(t), float(logp[t])] for t in order]


def _record(
    arm: str, doc: str, tops: list[list[list[float]]], loglik: float, *, sent: str | None = None
) -> Record:
    return record(
        arm, doc, {"loglik": loglik, "tokens": float(len(tops))}, suite="drift",
        prompt_hash=f"p-{doc}", response={"top": tops},
        extra={"sent_hash": sent or hashlib.sha256(doc.encode()).hexdigest()[:16], "prompt_tokens": 40},
    )  # fmt: skip


def drift_pairs(
    n_docs: int, *, noise: float, positions: int = 24, seed: int = 0, arm: str = "candidate"
) -> list[Pair]:
    """Documents whose candidate logits are the baseline's plus Gaussian noise of scale ``noise``
    (0: the same numbers, an A/A pair of deterministic servers)."""
    rng = np.random.default_rng(seed)
    out = []
    for d in range(n_docs):
        doc = f"train/{d:05d}"
        tb, tc, llb, llc = [], [], 0.0, 0.0
        for _ in range(positions):
            logits = rng.normal(0, 3, VOCAB)
            lb = _log_softmax(logits)
            lc = _log_softmax(logits + noise * rng.normal(0, 1, VOCAB)) if noise else lb
            token = int(rng.choice(VOCAB, p=np.exp(lb)))
            tb.append(_top(lb))
            tc.append(_top(lc))
            llb, llc = llb + float(lb[token]), llc + float(lc[token])
        out.append(Pair(doc, 0, _record("baseline", doc, tb, llb), _record(arm, doc, tc, llc)))
    return out


def _decide(pairs: list[Pair], *, policy: GatePolicy | None = None, aa: list[Pair] | None = None):
    return decide(
        {"drift": (("loglik", "tokens"), pairs)},
        policy=policy or GatePolicy(),
        kinds={"drift": "drift"},
        aa_pairs=None if aa is None else {"drift": aa},
    )


def _row(verdict, measure: str, pair: str = "candidate"):
    return next(r for d in verdict.drift for r in d.rows if r.measure == measure and r.pair == pair)


def test_identical_arms_drift_exactly_zero_and_say_how_many_could_differ() -> None:
    """Every document bit-identical sizes nothing: no upper bound, and no advice that cannot help
    (issue 42: a bound that collapsed to [0, 0] printed "within budget, powered" at n = 12)."""
    v = _decide(drift_pairs(50, noise=0.0))
    kld, ppl, top1 = _row(v, "kld"), _row(v, "ppl_ratio"), _row(v, "top1_agree")
    assert kld.estimate == 0.0 and kld.upper is None and kld.p_value == 1.0
    assert kld.status == "underpowered" and "more documents narrow it" not in kld.reason
    assert "identical on all 50 documents" in kld.reason and "5.8%" in kld.reason
    assert ppl.estimate == 1.0 and top1.estimate == 1.0
    assert kld.status == ppl.status == "underpowered" and top1.status == "info"
    assert v.verdict == "PASS" and "drift within budget, powered" not in v.reason
    assert "UNDERPOWERED drift" in v.reason
    assert v.drift[0].quantiles["candidate"]["p99.9"] == 0.0


def test_a_large_drift_blocks_on_the_drift_row_alone() -> None:
    v = _decide(drift_pairs(50, noise=1.0))
    kld = _row(v, "kld")
    assert kld.lower is not None and kld.lower > DEFAULT_KLD_BUDGET
    assert kld.significant and kld.status == "block"
    assert v.verdict == "BLOCK" and "mean KL" in v.reason and "above the budget" in v.reason


def test_a_small_drift_passes_powered_at_fifty_documents() -> None:
    v = _decide(drift_pairs(50, noise=0.05))
    kld = _row(v, "kld")
    assert 0 < kld.estimate < kld.upper < DEFAULT_KLD_BUDGET
    assert kld.status == "pass" and v.verdict == "PASS"


def test_drift_rows_join_the_holm_family_with_the_accuracy_rows() -> None:
    """One binary suite (its accuracy row and its flip row) + two gated drift rows: Holm over 4."""
    acc = []
    for i in range(50):
        rb = record("baseline", str(i), {"acc": 1.0}, suite="arc", variant="b", target=0)
        acc.append(Pair(str(i), 0, rb, rb))
    v = decide(
        {"arc": (("acc",), acc), "drift": (("loglik", "tokens"), drift_pairs(20, noise=0.05))},
        policy=GatePolicy(),
        kinds={"arc": "binary", "drift": "drift"},
    )
    row = next(r for r in v.suites if r.suite == "arc")
    assert row.mde_alpha == pytest.approx(0.05 / 4)
    assert all(r.p_adjusted is not None for d in v.drift for r in d.rows if r.gated)
    assert not any(r.suite == "drift" for r in v.suites)  # no difference row for a drift suite


def test_non_inferiority_blocks_a_drift_not_shown_within_budget() -> None:
    """Few documents, drift near the budget: under difference it is UNDERPOWERED (a PASS that says
    so); under non-inferiority it must be shown within the budget, so it blocks."""
    pairs = drift_pairs(4, noise=0.15, positions=6, seed=3)
    diff = _decide(pairs)
    kld = _row(diff, "kld")
    assert kld.status == "underpowered" and diff.verdict == "PASS" and "UNDERPOWERED drift" in diff.reason
    ni = _decide(pairs, policy=GatePolicy(policy="non-inferiority", margin="2pt"))
    assert _row(ni, "kld").status == "block" and ni.verdict == "BLOCK" and "not shown within" in ni.reason


def test_the_aa_pair_is_shown_as_the_noise_floor_and_not_gated() -> None:
    v = _decide(drift_pairs(30, noise=0.05), aa=drift_pairs(30, noise=0.0, arm="aa"))
    aa = _row(v, "kld", "aa")
    assert aa.estimate == 0.0 and aa.budget is None and aa.status == "info" and not aa.gated
    assert set(v.drift[0].quantiles) == {"candidate", "aa"}


def test_different_token_ids_on_the_two_arms_are_an_error() -> None:
    pairs = drift_pairs(10, noise=0.0)
    p = pairs[3]
    pairs[3] = Pair(p.item_id, 0, p.baseline, _record("candidate", p.item_id, p.candidate.response["top"],
                                                      p.candidate.metrics["loglik"], sent="0" * 16))  # fmt: skip
    v = _decide(pairs)
    assert v.verdict == "ERROR" and "drift" in v.reason


def test_a_positive_or_missing_loglik_is_an_error() -> None:
    pairs = drift_pairs(10, noise=0.0)
    p = pairs[0]
    bad = Record(**{**p.candidate.__dict__, "metrics": {"loglik": float("nan"), "tokens": 24.0}})
    pairs[0] = Pair(p.item_id, 0, p.baseline, bad)
    assert _decide(pairs).verdict == "ERROR"


def _imported(n: int, *, worse: float, seed: int = 0) -> list[Pair]:
    """lm-eval loglikelihood_rolling documents: loglik per document with word and byte counts."""
    rng = np.random.default_rng(seed)
    out = []
    for d in range(n):
        words = float(rng.integers(100, 400))
        llb = -2.5 * words * float(rng.uniform(0.8, 1.2))
        llc = llb - worse * words * float(rng.uniform(0.5, 1.5))
        recs = [
            record(arm, str(d), {"loglik": ll, "words": words, "bytes": words * 5.5}, suite="wikitext")
            for arm, ll in (("baseline", llb), ("candidate", llc))
        ]
        out.append(Pair(str(d), 0, *recs))
    return out


def test_imported_perplexity_gates_the_word_ratio_and_shows_the_byte_ratio() -> None:
    pairs = _imported(60, worse=0.05)
    v = decide(
        {"wikitext": (("loglik", "words", "bytes"), pairs)}, policy=GatePolicy(), kinds={"wikitext": "drift"}
    )
    rows = {(r.measure, r.unit): r for r in v.drift[0].rows}
    assert set(rows) == {("ppl_ratio", "words"), ("ppl_ratio", "bytes")}
    words = rows[("ppl_ratio", "words")]
    expected = math.exp(
        sum(p.baseline.metrics["loglik"] - p.candidate.metrics["loglik"] for p in pairs)
        / sum(p.baseline.metrics["words"] for p in pairs)
    )
    assert words.estimate == pytest.approx(expected, rel=1e-12)
    assert words.gated and words.status == "block" and v.verdict == "BLOCK"
    assert not rows[("ppl_ratio", "bytes")].gated


def test_drift_budget_parsing() -> None:
    assert parse_drift_budget(None) == DriftBudget()
    assert parse_drift_budget("0.02").kld == 0.02
    b = parse_drift_budget("kld=0.005, ppl=1%")
    assert (b.kld, b.ppl_margin) == (0.005, pytest.approx(0.01))
    assert parse_drift_budget("ppl=0.03").kld == DEFAULT_KLD_BUDGET and DEFAULT_PPL_MARGIN != 0.03
    for bad in ("kld=-1", "foo=1", "kld=abc", "ppl=inf"):
        with pytest.raises(ConfigError, match="--drift-budget"):
            parse_drift_budget(bad)
