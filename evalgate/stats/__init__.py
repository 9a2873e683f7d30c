"""Paired statistics for gating a rollout: tests, intervals, power, agreement, e-values and the
sequential rule. Nothing here knows about engines, suites or the runner.

Every function is pure and deterministic given its inputs (random ones take an explicit
``numpy.random.Generator``). Binary outcomes use the paired 2x2 table of one eval run on two arms:

    n11 = both right, n10 = baseline right & candidate wrong (a regression),
    n01 = baseline wrong & candidate right (an improvement), n00 = both wrong,

and ``delta = p_candidate - p_baseline = (n01 - n10) / n``. A negative delta is a regression.
"""

from __future__ import annotations

from evalgate.stats._agreement import (
    DEFAULT_FLIP_BUDGET,
    BinomTestResult,
    choice_kl,
    flip_budget_test,
    top1_agree,
)
from evalgate.stats._clustered import CR1_METHOD, ClusteredCI, clustered_diff_ci
from evalgate.stats._decay import DecayResult, service_decay
from evalgate.stats._drift import (
    DocDrift,
    document_drift,
    kld_quantiles,
    perplexity_ratio,
    position_drift,
    position_kld,
    position_klds,
    top1_same,
)
from evalgate.stats._evalues import (
    SequentialResult,
    flip_evalue,
    flip_futile,
    sequential_evalue,
    sequential_futile,
    sequential_test,
)
from evalgate.stats._graded import GradedCI, graded_diff_ci
from evalgate.stats._intervals import DiffCI, paired_diff_ci
from evalgate.stats._margin import EXACT_LIMIT, ExcessTestResult, excess_test, tango_score
from evalgate.stats._paired import McNemarResult, holm, mcnemar, mde, required_n
from evalgate.stats._perplexity import rolling_aggregates
from evalgate.stats._ratio_budget import IDENTICAL_METHOD, ZERO_INFLATED_METHOD, BudgetTest, ratio_budget_test
from evalgate.stats._repeatability import IdenticalShares, clopper_pearson, identical_shares
from evalgate.stats._resampling import (
    BootstrapResult,
    PermutationResult,
    mde_mean,
    paired_bootstrap,
    sign_flip_test,
)
from evalgate.stats._sampled import SampledExcessResult, sampled_excess_test
from evalgate.stats._seeds import stable_seed
from evalgate.stats._timing import DEFAULT_LEAK_SHARE, DEFAULT_MIN_MARGIN, TimingResult, cache_timing_test
from evalgate.stats._trend import TrendResult, discordant_trend
from evalgate.stats.sequential import (
    SequentialOutcome,
    SequentialRule,
    replay,
    replay_stream,
    rule_for,
    shuffled,
)

__all__ = [
    "CR1_METHOD",
    "DEFAULT_FLIP_BUDGET",
    "DEFAULT_LEAK_SHARE",
    "DEFAULT_MIN_MARGIN",
    "EXACT_LIMIT",
    "IDENTICAL_METHOD",
    "ZERO_INFLATED_METHOD",
    "BinomTestResult",
    "BootstrapResult",
    "BudgetTest",
    "ClusteredCI",
    "DecayResult",
    "DiffCI",
    "DocDrift",
    "ExcessTestResult",
    "GradedCI",
    "IdenticalShares",
    "McNemarResult",
    "PermutationResult",
    "SampledExcessResult",
    "SequentialOutcome",
    "SequentialResult",
    "SequentialRule",
    "TimingResult",
    "TrendResult",
    "cache_timing_test",
    "choice_kl",
    "clopper_pearson",
    "clustered_diff_ci",
    "discordant_trend",
    "document_drift",
    "excess_test",
    "flip_budget_test",
    "flip_evalue",
    "flip_futile",
    "graded_diff_ci",
    "holm",
    "identical_shares",
    "kld_quantiles",
    "mcnemar",
    "mde",
    "mde_mean",
    "paired_bootstrap",
    "paired_diff_ci",
    "perplexity_ratio",
    "position_drift",
    "position_kld",
    "position_klds",
    "ratio_budget_test",
    "replay",
    "replay_stream",
    "required_n",
    "rolling_aggregates",
    "rule_for",
    "sampled_excess_test",
    "sequential_evalue",
    "sequential_futile",
    "sequential_test",
    "service_decay",
    "shuffled",
    "sign_flip_test",
    "stable_seed",
    "tango_score",
    "top1_agree",
    "top1_same",
]
