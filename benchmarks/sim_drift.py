"""The drift rows, simulated (#30): the ratio test alone, then the whole gate on drift.

Section ``ratio``: coverage and blocking rate of the drift rows' ratio test
(``stats.ratio_budget_test``) alone. Each replicate draws n documents: a token count uniform on
32..256 and a per-document mean per-token KLD from a skewed law (per-document KLD is heavy
tailed: a few documents, code or numbers, drift far more than the rest), so theta =
sum(kld_sum) / sum(tokens) estimates E[mean KLD]. For the percentile, studentized and union
bootstraps, on the same resamples:

- ``upper``: how often the one-sided (1 - alpha) upper bound covers the true theta (>= 0.95);
- ``lower``: the same for the lower bound (1 - the type I error of blocking at the budget);
- ``block@r``: P(lower > budget) with budget = theta / r. At r = 1 the budget is the truth, so
  every block is a type I error (<= alpha); r > 1 is the power to see theta above budget.

Section ``zero``: the same test where most documents are bit-identical (numerator exactly 0,
as an A/A run on deterministic servers gives, or a candidate whose numerics change few
documents): each document identical with probability 90 % or 50 %, else drawn from the law above,
at n = 12 and 50, today's plain bootstrap (exact zeros nudged to 1e-300) beside the test as it
is (share x size: ``stats.ratio_budget_test``). Prints the upper and lower bounds' coverage, the
share of upper bounds that are +inf and of samples all 0, and the median finite upper / theta.

Section ``gate``: the whole gate (``evalgate.gate.decide``, ``GatePolicy()`` defaults, agreement
gate on, and once more under ``non-inferiority --margin 2pt``) on a run like the README's first
command plus the drift suite: gsm8k (50 generation items, baseline 8 % right, 8 % empty on both
arms), arc_easy (50 multiple-choice items, 46 % right, per-choice log-likelihoods) and drift (50
documents x 32 positions). Every replicate builds real records: per position a baseline
distribution over a 64-token vocabulary (logits N(0, 3^2)), the candidate's logits the baseline's
plus scale * exp(tau z_doc) * N(0, 1) noise, top-20 lists of both and the log-likelihood of a
token drawn from the baseline. Accuracy flips are drawn at the rate measured for each candidate
kind on ARC-Easy, half each way (accuracy unchanged). The drift is calibrated to the per-document
KL means of benchmarks/data/drift_cpu.csv (scale) and their spread across documents (tau: the
CV of per-document KL), then set to 0.5, 1 and 2 x the default budget (0.01), with flips and
spread interpolated in log KL between the measured candidates. Prints P(BLOCK) of the verdict,
the KL row and the perplexity row, the false BLOCK at the budget and the power at 2 x the budget.

Section ``few`` (#53): lives in benchmarks/sim_drift_few.py (this file would pass 600 lines), run
here or there: the false "within the budget, powered" rate (upper < budget at theta = budget) of
n documents all differing, of k differing among n (the rest exactly 0), and with the gate's
fewest-documents rule applied; its options: ``--parts``, ``--min-docs``, ``--min-differing``.

    python benchmarks/sim_drift.py --section ratio --seed 0 --ratio-reps 1000   # about 75 s of CPU
    python benchmarks/sim_drift.py --section zero --seed 0 --ratio-reps 1000    # about 3 min of CPU
    python benchmarks/sim_drift.py --section gate --seed 0 --reps 200
    python benchmarks/sim_drift.py --section few --seed 0 --ratio-reps 1000     # see sim_drift_few.py
    python benchmarks/sim_drift.py --quick                                      # both, a few replicates

Monte Carlo error of a rate near 0.95 at 1000 replicates: 0.007; of a rate near 0.05 at 200: 0.015.
"""

from __future__ import annotations

import argparse
import csv
import hashlib
import math
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from evalgate import stats
from evalgate.gate import DEFAULT_KLD_BUDGET, GatePolicy, decide
from evalgate.store.records import Pair, Record

METHODS = ("percentile", "studentized", "union")
RATIOS = (0.8, 1.0, 1.25, 1.5, 2.0)
Law = tuple[Callable[[np.random.Generator, int], np.ndarray], float]
"""(draw per-document mean KLDs, their expectation)."""

LAWS: dict[str, Law] = {
    "lognormal s=0.75": (lambda g, n: g.lognormal(math.log(0.01), 0.75, n), 0.01 * math.exp(0.28125)),
    "lognormal s=1.0": (lambda g, n: g.lognormal(math.log(0.01), 1.0, n), 0.01 * math.exp(0.5)),
    "lognormal s=1.5": (lambda g, n: g.lognormal(math.log(0.01), 1.5, n), 0.01 * math.exp(1.125)),
    "gamma k=0.5": (lambda g, n: g.gamma(0.5, 0.02, n), 0.01),
}


def simulate(law: Law, n: int, reps: int, resamples: int, alpha: float, seed: int) -> dict[str, list[float]]:
    """Per method: [upper coverage, lower coverage, P(block) at each ratio]."""
    draw, truth = law
    gen = np.random.default_rng(seed)
    hits = {m: np.zeros(2 + len(RATIOS)) for m in METHODS}
    for _ in range(reps):
        tokens = gen.integers(32, 257, n).astype(float)
        numer = draw(gen, n) * tokens
        rs = int(gen.integers(2**32))
        for m in METHODS:
            res = stats.ratio_budget_test(numer, tokens, budget=truth, alpha=alpha, n_resamples=resamples,
                                          method=m, seed=rs)  # type: ignore[arg-type]  # fmt: skip
            blocks = [res.lower > truth / r for r in RATIOS]
            hits[m] += np.array([res.upper >= truth, res.lower <= truth, *blocks], dtype=float)
    return {m: list(h / reps) for m, h in hits.items()}


# ----------------------------------------------------------------------------- section "zero"

ZERO_NS = (12, 50)
ZERO_SHARES = (0.9, 0.5)
"""Shares of documents bit-identical on both arms (numerator exactly 0)."""


def today(numer: np.ndarray, tokens: np.ndarray, **kw: Any) -> stats.BudgetTest:
    """The test before zero-inflation was handled: exact zeros nudged to 1e-300, so none is 0 and
    the plain union bootstrap runs (all zeros: [0, 0], exact; some: percentile + studentized)."""
    return stats.ratio_budget_test(np.where(numer == 0, 1e-300, numer), tokens, **kw)


def simulate_zero(law: Law, n: int, share: float, reps: int, resamples: int, alpha: float,
                  seed: int) -> dict[str, list[float]]:  # fmt: skip
    """Per method (today, now): [upper covers, lower covers, upper +inf, all documents 0, median
    finite upper / theta]. Each document is identical with probability ``share``, else its mean
    per-token KLD is drawn from ``law``: theta = (1 - share) * E[law]."""
    draw, mean = law
    truth = (1 - share) * mean
    gen = np.random.default_rng(seed)
    hits = {m: np.zeros(4) for m in ("today", "now")}
    widths: dict[str, list[float]] = {m: [] for m in hits}
    for _ in range(reps):
        tokens = gen.integers(32, 257, n).astype(float)
        numer = np.where(gen.random(n) < share, 0.0, draw(gen, n) * tokens)
        rs = int(gen.integers(2**32))
        kw = {"budget": truth, "alpha": alpha, "n_resamples": resamples, "seed": rs}
        for m, test in (("today", today), ("now", stats.ratio_budget_test)):
            res = test(numer, tokens, **kw)
            inf = not math.isfinite(res.upper)
            hits[m] += [res.upper >= truth, res.lower <= truth, inf, not numer.any()]
            if not inf:
                widths[m].append(res.upper / truth)
    return {m: [*(h / reps), float(np.median(widths[m])) if widths[m] else math.nan] for m, h in hits.items()}


def zero_section(args: argparse.Namespace) -> None:
    reps = 50 if args.quick else args.ratio_reps
    print(f"\n## Documents exactly 0 (bit-identical): the ratio test's bounds\nalpha {args.alpha}, {reps} "
          f"replicates, {args.resamples} resamples; theta = (1 - identical share) x E[per-document KLD]; "
          "today: the union bootstrap as it was (exact zeros nudged to 1e-300); now: stats.ratio_budget_test")  # fmt: skip
    print(f"{'law':<16} {'n':>4} {'ident':>6} {'method':<6} {'upper':>6} {'lower':>6} {'inf up':>7} "
          f"{'all 0':>6} {'upper/theta':>12}")  # fmt: skip
    for i, (name, law) in enumerate(LAWS.items()):
        for n in ZERO_NS:
            for j, share in enumerate(ZERO_SHARES):
                seed = args.seed * 1000 + 100 * i + 10 * j + n
                out = simulate_zero(law, n, share, reps, args.resamples, args.alpha, seed)
                for m, (up, low, inf, zero, width) in out.items():
                    print(f"{name:<16} {n:>4} {share:>6.0%} {m:<6} {up:>6.3f} {low:>6.3f} {inf:>7.3f} "
                          f"{zero:>6.3f} {width:>12.2f}", flush=True)  # fmt: skip


# ----------------------------------------------------------------------------- section "gate"

VOCAB, TOP_K, DOCS, POSITIONS, LOGIT_SD = 64, 20, 50, 32, 3.0
ITEMS = 50
ACCURACY = {"gsm8k": 0.08, "arc_easy": 0.46}
"""Baseline accuracy of the README's first command (SmolLM2-135M, 50 items each)."""
UNANSWERED = 0.08
"""gsm8k items empty on both arms in that run (4 / 50): its unanswered test joins the family."""
FLIPS = {"bf16": 0.0, "fp8kv": 0.006, "fp8": 0.018, "kv4": 0.052, "int4": 0.152}
"""Flip rates measured on ARC-Easy per candidate kind (docs/measurements.md, "Agreement and the flip budget")."""
BUDGET_RATIOS = (0.5, 1.0, 2.0)
CSV = Path(__file__).resolve().parent / "data" / "drift_cpu.csv"
POLICIES = {"difference": GatePolicy(), "NI 2pt": GatePolicy(policy="non-inferiority", margin="2pt")}
KINDS = {"gsm8k": "binary", "arc_easy": "binary", "drift": "drift"}
GSM8K_METRICS = ("exact_match,flexible-extract", "exact_match,strict-match")


class Measured(NamedTuple):
    """One candidate in the CSV: mean KL, its CV across documents, top-1 agreement, log ppl ratio."""

    kl: float
    cv: float
    top1: float
    dll: float


@dataclass(frozen=True)
class Scenario:
    name: str
    kl: float
    """The gate's estimand (bucketed top-20 KL, nats per token) the drift is calibrated to."""
    cv: float
    flips: float
    scale: float = 0.0
    tau: float = 0.0
    """Candidate logits = baseline's + scale * exp(tau z_doc) * N(0, 1): z_doc spreads the documents."""


def measured(path: Path = CSV) -> dict[str, Measured]:
    with path.open() as f:
        rows = list(csv.DictReader(f))
    out = {}
    for name in dict.fromkeys(r["candidate"] for r in rows):
        rs = [r for r in rows if r["candidate"] == name]
        pos = np.array([float(r["positions"]) for r in rs])
        kl = np.array([float(r["kld_sum"]) for r in rs]) / pos
        dll = np.array([float(r["loglik_baseline"]) - float(r["loglik_candidate"]) for r in rs])
        top1 = sum(float(r["top1_same"]) for r in rs) / pos.sum()
        cv = float(kl.std(ddof=1) / kl.mean()) if kl.mean() > 0 else 0.0
        out[name] = Measured(float(kl.mean()), cv, top1, float(dll.sum() / pos.sum()))
    return out


def _interpolate(kl: float, points: list[tuple[float, float]]) -> float:
    """Linear in log KL between the measured candidates (flat beyond them)."""
    xs, ys = zip(*sorted(points), strict=True)
    return float(np.interp(math.log(kl), np.log(xs), ys))


def _log_softmax(x: np.ndarray) -> np.ndarray:
    x = x - x.max(axis=-1, keepdims=True)
    return x - np.log(np.exp(x).sum(axis=-1, keepdims=True))


def _tops(lp: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Top-k ids and logprobs, best first, of (..., VOCAB) log-probabilities."""
    ids = np.argsort(-lp, axis=-1, kind="stable")[..., :TOP_K]
    return ids, np.take_along_axis(lp, ids, axis=-1)


def _bucketed(base: tuple[np.ndarray, np.ndarray], cand: tuple[np.ndarray, np.ndarray]) -> np.ndarray:
    """The gate's per-position KL (``stats.position_klds``) of every position at once."""

    def flat(t: tuple[np.ndarray, np.ndarray]) -> np.ndarray:
        return np.stack([t[0].astype(float), t[1]], axis=-1).reshape(-1, TOP_K, 2)

    return stats.position_klds(flat(base), flat(cand))  # type: ignore[arg-type]


def draw_drift(
    rng: np.random.Generator, scale: float, tau: float, docs: int = DOCS
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(baseline log-probs, candidate log-probs, a token drawn from the baseline per position)."""
    logits = rng.normal(0.0, LOGIT_SD, (docs, POSITIONS, VOCAB))
    lb = _log_softmax(logits)
    lc = lb
    if scale > 0:
        s = scale * np.exp(tau * rng.standard_normal(docs))
        lc = _log_softmax(logits + s[:, None, None] * rng.standard_normal(logits.shape))
    token = np.argmax(lb + rng.gumbel(size=lb.shape), axis=-1)  # Gumbel-max: a draw from P
    return lb, lc, token


def calibrate(kl: float, cv: float, seed: int, docs: int) -> tuple[float, float]:
    """(scale, tau) whose bucketed KL has mean ``kl`` and across-document CV ``cv`` on one large
    fixed draw (common random numbers): tau by bisection, the scale by KL ~ scale^2 steps; the
    scale is then refined on a fresh draw three times as large (the mean's own sampling error)."""
    if kl <= 0:
        return 0.0, 0.0
    g = np.random.default_rng(seed)
    logits = g.normal(0.0, LOGIT_SD, (docs, POSITIONS, VOCAB))
    z, e = g.standard_normal(docs), g.standard_normal(logits.shape)
    base = _tops(_log_softmax(logits))

    def per_doc(scale: float, tau: float) -> np.ndarray:
        lc = _log_softmax(logits + (scale * np.exp(tau * z))[:, None, None] * e)
        return _bucketed(base, _tops(lc)).reshape(docs, POSITIONS).mean(axis=1)

    scale = 0.1

    def fit(tau: float) -> tuple[float, np.ndarray]:
        nonlocal scale
        for _ in range(6):
            k = per_doc(scale, tau)
            scale *= math.sqrt(kl / k.mean())
        return scale, per_doc(scale, tau)

    lo, hi = 0.0, 1.5
    _, k0 = fit(0.0)
    if k0.std(ddof=1) / k0.mean() >= cv:  # positions alone spread the documents enough
        hi = 0.0
    for _ in range(10 if hi else 0):
        mid = (lo + hi) / 2
        _, k = fit(mid)
        lo, hi = (mid, hi) if k.std(ddof=1) / k.mean() < cv else (lo, mid)
    tau = (lo + hi) / 2
    fit(tau)
    for i in range(2):
        lb, lc, _ = draw_drift(np.random.default_rng([seed, i]), scale, tau, docs=3 * docs)
        scale *= math.sqrt(kl / _bucketed(_tops(lb), _tops(lc)).mean())
    return scale, tau


def _record(arm: str, suite: str, item: str, target: Any, response: Any, extracted: Any,
            metrics: dict[str, float], extra: dict[str, Any]) -> Record:  # fmt: skip
    return Record(
        run_id="sim", arm=arm, variant=arm, suite=suite, suite_version=1, item_id=item, repeat=0,
        prompt_hash=f"{suite}-{item}", target=target, response=response, extracted=extracted,
        metrics=metrics, extra=extra,
    )  # fmt: skip


def _cells(rng: np.random.Generator, acc: float, flips: float) -> tuple[np.ndarray, np.ndarray]:
    """(baseline right, candidate right) per item: flips half each way, accuracy unchanged."""
    half = flips / 2
    cells = np.repeat(np.arange(4), rng.multinomial(ITEMS, [acc - half, half, half, 1 - acc - half]))
    rng.shuffle(cells)
    return np.isin(cells, (0, 1)), np.isin(cells, (0, 2))


def gsm8k_pairs(rng: np.random.Generator, flips: float) -> list[Pair]:
    """Generation records as the gsm8k suite writes them; 8 % empty on both arms (wrong there)."""
    base, cand = _cells(rng, ACCURACY["gsm8k"], flips)
    both_wrong = ~base & ~cand
    empty = both_wrong & (rng.random(ITEMS) < UNANSWERED / (1 - ACCURACY["gsm8k"] - flips / 2))
    out = []
    for i in range(ITEMS):
        item, answer = f"test-{i}", str(100 + i)

        def rec(arm: str, right: bool, i: int = i, item: str = item, answer: str = answer) -> Record:
            said = answer if right else str(7 * i + 1)
            text = "" if empty[i] else f" So the answer is {said}.\n#### {said}\n\n"
            got = "[invalid]" if empty[i] else said
            return _record(arm, "gsm8k", item, f"... #### {answer}", text,
                           {"strict-match": got, "flexible-extract": got}, dict.fromkeys(GSM8K_METRICS, float(right)),
                           {"empty": bool(empty[i]), "finish_reason": "stop", "no_answer": bool(empty[i])})  # fmt: skip

        out.append(Pair(item, 0, rec("baseline", bool(base[i])), rec("candidate", bool(cand[i]))))
    return out


def arc_pairs(rng: np.random.Generator, flips: float, choices: int = 4) -> list[Pair]:
    """Multiple-choice records with per-choice [loglik, greedy] pairs; the candidate's logliks are
    the baseline's plus small noise, its choice moved on the items the cells flip."""
    base, cand = _cells(rng, ACCURACY["arc_easy"], flips)
    lb = rng.normal(-20.0, 6.0, (ITEMS, choices))
    pred = lb.argmax(axis=1)
    target = np.where(base, pred, (pred + rng.integers(1, choices, ITEMS)) % choices)
    other = (target + rng.integers(1, choices, ITEMS)) % choices
    want = np.where(base == cand, pred, np.where(cand, target, other))
    lc = lb + rng.normal(0.0, 0.05, lb.shape)
    fix = lc.argmax(axis=1) != want
    lc[fix, want[fix]] = lc[fix].max(axis=1) + rng.exponential(0.5, int(fix.sum())) + 1e-3
    out = []
    for i in range(ITEMS):
        recs = []
        for arm, ll in (("baseline", lb[i]), ("candidate", lc[i])):
            p = int(ll.argmax())
            right = float(p == target[i])
            recs.append(_record(arm, "arc_easy", f"q{i}", int(target[i]), [[float(v), False] for v in ll],
                                {"pred": p, "pred_norm": p}, {"acc": right, "acc_norm": right}, {}))  # fmt: skip
        out.append(Pair(f"q{i}", 0, *recs))
    return out


def drift_pairs(rng: np.random.Generator, scale: float, tau: float, docs: int = DOCS) -> list[Pair]:
    """Drift records as the drift suite writes them: top-20 lists per position and the summed
    log-likelihood of the scored tokens (here drawn from the baseline's distribution)."""
    lb, lc, token = draw_drift(rng, scale, tau, docs=docs)
    (ib, pb), (ic, pc) = _tops(lb), _tops(lc)
    llb = np.take_along_axis(lb, token[..., None], axis=-1)[..., 0].sum(axis=1)
    llc = np.take_along_axis(lc, token[..., None], axis=-1)[..., 0].sum(axis=1)
    out = []
    for d in range(docs):
        doc = f"train/{d:05d}"
        sent = hashlib.sha256(doc.encode()).hexdigest()[:16]
        recs = []
        for arm, ids, lps, ll in (("baseline", ib, pb, llb), ("candidate", ic, pc, llc)):
            top = [[[t, v] for t, v in zip(ir, vr, strict=True)] for ir, vr in zip(ids[d].tolist(), lps[d].tolist(), strict=True)]  # fmt: skip
            recs.append(_record(arm, "drift", doc, None, {"top": top}, None,
                                {"loglik": float(ll[d]), "tokens": float(POSITIONS)},
                                {"sent_hash": sent, "prompt_tokens": 40}))  # fmt: skip
        out.append(Pair(doc, 0, *recs))
    return out


def scenarios(meas: dict[str, Measured], cal_docs: int, seed: int) -> list[Scenario]:
    """Each measured candidate, then the drift at 0.5 / 1 / 2 x the default KL budget with the
    flip rate and document spread interpolated (in log KL) between the measured candidates."""
    fitted = [(m.kl, m.cv) for m in meas.values() if m.kl > 0]
    flips = [(meas[k].kl, f) for k, f in FLIPS.items() if k in meas and meas[k].kl > 0]
    out = [Scenario(name, m.kl, m.cv, FLIPS[name]) for name, m in meas.items()]
    for kl in (r * DEFAULT_KLD_BUDGET for r in BUDGET_RATIOS):
        name = f"{kl / DEFAULT_KLD_BUDGET:g} x budget"
        out.append(Scenario(name, kl, _interpolate(kl, fitted), _interpolate(kl, flips)))
    return [
        Scenario(s.name, s.kl, s.cv, s.flips, *calibrate(s.kl, s.cv, seed * 1000 + i, cal_docs))
        for i, s in enumerate(out)
    ]


def run_scenario(
    s: Scenario, reps: int, seed: int, timer: list[float], docs: int = DOCS
) -> dict[str, np.ndarray]:
    """Per policy and replicate: verdict BLOCK, KL row BLOCK, ppl row BLOCK, KL row PASS, KL estimate,
    the KL row's own p < alpha (before Holm: the ratio test alone)."""
    rng = np.random.default_rng(seed)
    out = {p: np.zeros((reps, 6)) for p in POLICIES}
    for j in range(reps):
        t0 = time.perf_counter()
        per_suite = {
            "gsm8k": (GSM8K_METRICS, gsm8k_pairs(rng, s.flips)),
            "arc_easy": (("acc", "acc_norm"), arc_pairs(rng, s.flips)),
            "drift": (("loglik", "tokens"), drift_pairs(rng, s.scale, s.tau, docs)),
        }
        timer[0] += time.perf_counter() - t0
        for name, policy in POLICIES.items():
            t1 = time.perf_counter()
            v = decide(per_suite, policy=policy, kinds=KINDS)
            timer[1], timer[2] = timer[1] + time.perf_counter() - t1, timer[2] + 1
            if v.verdict == "ERROR":
                sys.exit(f"{s.name}, {name}: the gate says ERROR: {v.reason}")
            rows = {r.measure: r for d in v.drift for r in d.rows if r.pair == "candidate"}
            kld, ppl = rows["kld"], rows["ppl_ratio"]
            out[name][j] = [v.verdict == "BLOCK", kld.status == "block", ppl.status == "block",
                            kld.status == "pass", kld.estimate, kld.p_value < policy.alpha]  # fmt: skip
    return out


def _rate(x: np.ndarray) -> str:
    p = float(x.mean())
    return f"{p:.3f} ({math.sqrt(p * (1 - p) / x.size):.3f})"


def gate_section(args: argparse.Namespace) -> None:
    t0 = time.perf_counter()
    meas = measured()
    cal_docs = 200 if args.quick else 1000
    scen = scenarios(meas, cal_docs, args.seed)
    print(f"\n## The whole gate on drift: gsm8k ({ITEMS} items, {ACCURACY['gsm8k']:.0%} right) + arc_easy "
          f"({ITEMS} items, {ACCURACY['arc_easy']:.0%} right) + drift ({args.docs} documents x {POSITIONS} positions, "
          f"top-{TOP_K} of {VOCAB}); evalgate.gate.decide, agreement gate on; {args.reps} replicates; seed {args.seed}")  # fmt: skip
    print(f"calibrated in {time.perf_counter() - t0:.0f} s on {cal_docs} documents\n")
    print("| scenario | KL target | CV target / fitted | scale, tau | full-vocab KL | top-1 sim / CSV "
          "| log ppl ratio sim / CSV | flips |\n|---|---|---|---|---|---|---|---|")  # fmt: skip
    for s in scen:
        g = np.random.default_rng(args.seed + 7)
        lb, lc, token = draw_drift(g, s.scale, s.tau, docs=cal_docs)
        k = _bucketed(_tops(lb), _tops(lc)).reshape(cal_docs, POSITIONS).mean(axis=1)
        full = float((np.exp(lb) * (lb - lc)).sum(axis=-1).mean())
        top1 = float((lb.argmax(-1) == lc.argmax(-1)).mean())
        pick = np.take_along_axis(lb, token[..., None], -1) - np.take_along_axis(lc, token[..., None], -1)
        cv = k.std(ddof=1) / k.mean() if k.mean() > 0 else 0.0
        m = meas.get(s.name)
        csv_top1, csv_dll = (f"{m.top1:.3f}", f"{m.dll:.4f}") if m else ("-", "-")
        print(f"| {s.name} | {s.kl:.3g} (sim {k.mean():.3g}) | {s.cv:.2f} / {cv:.2f} | {s.scale:.3f}, {s.tau:.2f} "
              f"| {full:.3g} | {top1:.3f} / {csv_top1} | {float(pick.mean()):.4f} / {csv_dll} | {s.flips:.1%} |")  # fmt: skip
    timer = [0.0, 0.0, 0]
    results = {}
    print(
        "\nP(BLOCK) (Monte Carlo standard error) of the verdict, the KL row and the perplexity row; P(the KL "
        "row passes, powered); the mean of the KL estimates (the realised truth, docs x reps documents).\n"
    )
    print("| scenario | KL target | policy | verdict BLOCK | KL row BLOCK | ppl row BLOCK | KL row PASS "
          "| mean KL estimate |\n|---|---|---|---|---|---|---|---|")  # fmt: skip
    for i, s in enumerate(scen):
        res = run_scenario(s, args.reps, args.seed * 1000 + 100 + i, timer, args.docs)
        results[s.name] = res
        for name, r in res.items():
            print(f"| {s.name} | {s.kl:.3g} | {name} | {_rate(r[:, 0])} | {_rate(r[:, 1])} | {_rate(r[:, 2])} "
                  f"| {_rate(r[:, 3])} | {r[:, 4].mean():.3g} |", flush=True)  # fmt: skip
    at, twice = results.get("1 x budget"), results.get("2 x budget")
    if at is not None and twice is not None:
        d, ni = at["difference"], at["NI 2pt"]
        print(f"\nfalse BLOCK of the KL row at the budget (difference, alpha 0.05): {_rate(d[:, 1])} after "
              f"Holm; {_rate(d[:, 5])} of its own p-values below alpha (the row alone)")  # fmt: skip
        print(
            f"false PASS of the KL row at the budget (non-inferiority: its type I error): {_rate(ni[:, 3])}"
        )
        print(f"power at 2 x the budget (difference): KL row {_rate(twice['difference'][:, 1])}, "
              f"verdict {_rate(twice['difference'][:, 0])}")  # fmt: skip
    print(f"\nbuilding records: {timer[0] / max(1, timer[2] / len(POLICIES)) * 1e3:.0f} ms a replicate; "
          f"evalgate.gate.decide: {timer[1] / max(1, timer[2]) * 1e3:.0f} ms a call ({timer[2]} calls); "
          f"wall {time.perf_counter() - t0:.0f} s")  # fmt: skip


def ratio_section(args: argparse.Namespace) -> None:
    reps = 50 if args.quick else args.ratio_reps
    ns = [50] if args.quick else args.n
    se = math.sqrt(args.alpha * (1 - args.alpha) / reps)
    print(f"## The ratio test alone\nalpha {args.alpha}, {reps} replicates, {args.resamples} resamples, "
          f"MC SE near 1 - alpha: {se:.4f}")  # fmt: skip
    print(f"{'law':<16} {'n':>4} {'method':<12} {'upper':>6} {'lower':>6} "
          + " ".join(f"{'block@' + format(r, 'g'):>9}" for r in RATIOS))  # fmt: skip
    for i, (name, law) in enumerate(LAWS.items()):
        for n in ns:
            out = simulate(law, n, reps, args.resamples, args.alpha, args.seed * 1000 + 10 * i + n)
            for m, row in out.items():
                cells = " ".join(f"{v:>9.3f}" for v in row[2:])
                print(f"{name:<16} {n:>4} {m:<12} {row[0]:>6.3f} {row[1]:>6.3f} {cells}", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--section", choices=("ratio", "zero", "gate", "few", "both"), default="both",
                    help="both: ratio, zero and gate; few: benchmarks/sim_drift_few.py")  # fmt: skip
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--reps", type=int, default=200, help="whole-gate replicates per scenario")
    ap.add_argument("--docs", type=int, default=DOCS, help="gate section: drift documents per replicate")
    ap.add_argument("--ratio-reps", type=int, default=1000, help="ratio-test replicates per cell")
    ap.add_argument("--resamples", type=int, default=2000, help="ratio section (the gate uses its own)")
    ap.add_argument("--alpha", type=float, default=0.05, help="ratio section (the gate: GatePolicy's)")
    ap.add_argument("--n", type=int, nargs="+", default=[25, 50, 100], help="ratio section: documents")
    ap.add_argument("--quick", action="store_true", help="a few replicates of everything: does it run")
    import sim_drift_few  # its section's options; it imports this file's laws

    sim_drift_few.add_arguments(ap)
    args = ap.parse_args()
    if args.quick:
        args.reps = 10
    if args.section in ("ratio", "both"):
        ratio_section(args)
    if args.section in ("zero", "both"):
        zero_section(args)
    if args.section in ("gate", "both"):
        gate_section(args)
    if args.section == "few":
        sim_drift_few.few_section(args)


if __name__ == "__main__":
    main()
