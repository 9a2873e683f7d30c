"""The gate: a run folder's paired records -> tests -> Holm -> PASS / BLOCK / ERROR.

This module is the gate's face: code outside ``evalgate/gate/`` imports from here, never from the
modules below, which are the gate's own (their leading ``_`` marks them private).

- ``_verdict``: the run folder (manifest + records) -> ``RunData`` -> ``Verdict``; the one path for
  ``compare`` and ``report``, so a re-render reproduces the verdict.
- ``_policy`` reads the run's ``GatePolicy``; ``_rows`` checks each metric and builds its paired
  row; ``_tested``: the shape every gated row shares (p, adjusted p, significant, status, reason)
  and ``holm`` over a sequence of them; ``_decide`` forms the Holm family (or the intersection-union
  test of non-inferiority); ``_reasons`` puts the decision in words; ``_model`` is verdict.json's
  schema (``Verdict``).
- ``_agreement``: flips and the flip budget, and unanswered items; ``_answers``: what each arm
  answered (no answer, cut off, identical); ``_repeats``: ``--repeats`` and sampled runs;
  ``_drift``: the token-distribution budget rows; ``_flip_drift``, ``_decode_drift``,
  ``_drift_budget``, ``_drift_text``: their parts.
- Notes beside the rows: ``_comparable`` (can the arms be compared at all), ``_what_ran``,
  ``_lengths`` and ``_output_lengths`` (accuracy by length), ``_repeatability``, ``_capacity``,
  ``_categories``, ``_tiers``, ``_power`` (``plan_power``); ``_kernel_check``: the candidate's
  kernel numerics before launch.

How to add a gate row: compute it as a pure function of the paired records in a module of its
own here (its statistics in ``evalgate.stats``), give it a result type derived from ``Tested`` that
``_model`` writes into verdict.json (then regenerate docs/schemas with ``python -m evalgate.schemas``),
let ``_decide`` put it into the Holm family or beside it, and ``_reasons`` say it in words.
"""

from __future__ import annotations

from evalgate.gate._agreement import (
    DEFAULT_AA_MARGIN,
    DEFAULT_FLIP_BUDGET,
    NOISE_HINT,
    AgreementRow,
    SampledAgreement,
    UnansweredTest,
    agreement_reason,
    agreement_row,
    no_answer,
    noise_hint,
    sampled_excess_phrase,
    unanswered,
    unanswered_test,
)
from evalgate.gate._answers import ArmAnswers, SuiteAnswers, answers_for, suite_answers
from evalgate.gate._categories import CategoryRow, SuiteCategories
from evalgate.gate._decide import decide
from evalgate.gate._drift import (
    DEFAULT_DRIFT_BUDGET,
    DEFAULT_KLD_BUDGET,
    DEFAULT_PPL_MARGIN,
    UNITS,
    DriftBudget,
    DriftRow,
    SuiteDrift,
    check_drift,
    drift_for,
    parse_drift_budget,
)
from evalgate.gate._flip_drift import FlipDrift
from evalgate.gate._kernel_check import KERNELS_EXTRA, installed, kernel_check_for, kernel_failures
from evalgate.gate._lengths import LengthRow, LengthTrend, SuiteLengths
from evalgate.gate._model import VERDICT_SCHEMA, Row, Verdict
from evalgate.gate._policy import POLICIES, GatePolicy, parse_margin, sequential_rule
from evalgate.gate._power import PlanRow, plan_power
from evalgate.gate._rows import METRIC_KINDS, NOT_ESTIMABLE, MetricKind, check_suite, metric_row
from evalgate.gate._tested import HolmTest, Status, Tested, holm
from evalgate.gate._verdict import NO_ANSWER_LIMIT, REFERENCE_ERROR_LIMIT, RunData, load_run, verdict_for

__all__ = [
    "DEFAULT_AA_MARGIN",
    "DEFAULT_DRIFT_BUDGET",
    "DEFAULT_FLIP_BUDGET",
    "DEFAULT_KLD_BUDGET",
    "DEFAULT_PPL_MARGIN",
    "KERNELS_EXTRA",
    "METRIC_KINDS",
    "NOISE_HINT",
    "NOT_ESTIMABLE",
    "NO_ANSWER_LIMIT",
    "POLICIES",
    "REFERENCE_ERROR_LIMIT",
    "UNITS",
    "VERDICT_SCHEMA",
    "AgreementRow",
    "ArmAnswers",
    "CategoryRow",
    "DriftBudget",
    "DriftRow",
    "FlipDrift",
    "GatePolicy",
    "HolmTest",
    "LengthRow",
    "LengthTrend",
    "MetricKind",
    "PlanRow",
    "Row",
    "RunData",
    "SampledAgreement",
    "Status",
    "SuiteAnswers",
    "SuiteCategories",
    "SuiteDrift",
    "SuiteLengths",
    "Tested",
    "UnansweredTest",
    "Verdict",
    "agreement_reason",
    "agreement_row",
    "answers_for",
    "check_drift",
    "check_suite",
    "decide",
    "drift_for",
    "holm",
    "installed",
    "kernel_check_for",
    "kernel_failures",
    "load_run",
    "metric_row",
    "no_answer",
    "noise_hint",
    "parse_drift_budget",
    "parse_margin",
    "plan_power",
    "sampled_excess_phrase",
    "sequential_rule",
    "suite_answers",
    "unanswered",
    "unanswered_test",
    "verdict_for",
]
