"""Policy to verdict: paired outcomes per (suite, metric) -> tests -> Holm -> PASS / BLOCK / ERROR.

``_policy`` reads the run's policy, ``_rows`` checks each metric and builds its paired row,
``_decide`` forms the Holm family (or the intersection-union test of non-inferiority) and
``_reasons`` puts the decision in words; ``_model`` is verdict.json's schema.
"""

from __future__ import annotations

from evalgate.gate._decide import decide
from evalgate.gate._flip_drift import FlipDrift
from evalgate.gate._lengths import LengthRow, LengthTrend, SuiteLengths
from evalgate.gate._model import VERDICT_SCHEMA, Row, Verdict
from evalgate.gate._policy import POLICIES, GatePolicy, parse_margin, sequential_rule
from evalgate.gate._power import plan_power
from evalgate.gate._rows import METRIC_KINDS, NOT_ESTIMABLE, MetricKind, check_suite, metric_row
from evalgate.gate.drift import DriftBudget, DriftRow, SuiteDrift

__all__ = [
    "METRIC_KINDS",
    "NOT_ESTIMABLE",
    "POLICIES",
    "VERDICT_SCHEMA",
    "DriftBudget",
    "DriftRow",
    "FlipDrift",
    "GatePolicy",
    "LengthRow",
    "LengthTrend",
    "MetricKind",
    "Row",
    "SuiteDrift",
    "SuiteLengths",
    "Verdict",
    "check_suite",
    "decide",
    "metric_row",
    "parse_margin",
    "plan_power",
    "sequential_rule",
]
