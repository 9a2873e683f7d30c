"""verdict.json's rows and the verdict itself (docs/schemas/verdict.schema.json is generated here)."""

from __future__ import annotations

import json
from dataclasses import asdict, field
from typing import Any, Literal

from pydantic import ConfigDict
from pydantic import dataclasses as pyd

from evalgate.gate._agreement import AgreementRow
from evalgate.gate._answers import SuiteAnswers
from evalgate.gate._categories import SuiteCategories
from evalgate.gate._comparable import Comparability
from evalgate.gate._drift import SuiteDrift
from evalgate.gate._flip_drift import FlipDrift
from evalgate.gate._lengths import SuiteLengths
from evalgate.gate._output_lengths import OutputLengths
from evalgate.gate._repeatability import Repeatability
from evalgate.gate._tested import Tested
from evalgate.store.provenance import WhatRanRow

__all__ = ["EXIT_CODES", "VERDICT_SCHEMA", "Row", "Verdict"]

VERDICT_SCHEMA = 1
EXIT_CODES = {"PASS": 0, "BLOCK": 1, "INCONCLUSIVE": 4}
"""A verdict's exit code; ERROR (and anything else) is 3. 2 is a usage error, before any verdict."""


@pyd.dataclass(config=ConfigDict(use_attribute_docstrings=True))
class Row(Tested):
    """One (suite, metric) of the verdict: the paired counts, the test (``test``: its ``p_value``) and
    the decision. Under non-inferiority ``significant`` means its lower bound is not above -margin."""

    suite: str
    metric: str
    primary: bool
    n: int
    baseline: float
    candidate: float
    delta: float
    n11: int
    """Binary metric: both right. Graded metric: items whose value is the same on both arms."""
    n10: int
    """Binary: only the baseline right (a regression). Graded: the candidate scored lower."""
    n01: int
    """Binary: only the candidate right. Graded: the candidate scored higher."""
    n00: int
    """Binary: both wrong. Graded: 0."""
    flips: float
    ci_low: float
    ci_high: float
    mde: float
    """Smallest |delta| this n and flip rate detect with 80 % power at ``mde_alpha``."""
    sequential: dict[str, Any] | None = None
    """--sequential: where the suite stopped; ``p_value`` is then the always-valid 1 / max E."""
    test: str = "mcnemar"
    """mcnemar (a metric in {0, 1}: exact mid-p, Tango interval) or sign-flip (a graded metric:
    paired sign-flip permutation test of the mean difference, seeded bootstrap interval)."""
    mde_alpha: float | None = None
    """The level ``mde`` is computed at: alpha over the Holm family's size (the level Holm's
    first step demands) for a gated row; alpha for non-inferiority and for info rows."""


@pyd.dataclass(config=ConfigDict(use_attribute_docstrings=True))
class Verdict:
    """verdict.json (schema 1; docs/schemas/verdict.schema.json is generated from this class)."""

    verdict: str
    """PASS (0), BLOCK (1), ERROR (3) or INCONCLUSIVE (4: --require-power and an UNDERPOWERED PASS)."""
    alpha: float
    policy: str
    reason: str
    suites: list[Row] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    margin: str | None = None
    agreement: list[AgreementRow] = field(default_factory=list)
    aa: list[Row] | None = None
    reliable: bool = True
    """False when the A/A pair (baseline against itself) would itself block."""
    lengths: list[SuiteLengths] = field(default_factory=list)
    """Suites whose records carry a context length: rows per length and the gated longest-length
    row (gate/_lengths.py); written only when there is one."""
    answers: list[SuiteAnswers] = field(default_factory=list)
    """Generation suites: pass@1 (avg of k), pass@k, majority@k, no-answer and truncated rates per
    arm (answers.py); written only when there is one."""
    output_lengths: list[OutputLengths] = field(default_factory=list)
    """Generation suites by their answers' length: paired counts per completion-length bucket and
    the trend test, shown, not gated (gate/_output_lengths.py); written only when there is one."""
    categories: list[SuiteCategories] = field(default_factory=list)
    """0/1 suites by category (MMLU subject, MMLU-Pro category, BFCL category): paired counts and
    unadjusted intervals per category, and the overall delta's interval item-level beside clustered
    by category; shown, never gated (gate/_categories.py); written only when there is one."""
    drift: list[SuiteDrift] = field(default_factory=list)
    """Drift suites (metric_kind drift): the KL and perplexity-ratio budget rows, per-token KL
    quantiles and the KL by position (gate/_drift.py); written only when there is one."""
    flip_drift: list[FlipDrift] = field(default_factory=list)
    """Multiple-choice suites: the choice KL of flipped items beside unflipped ones (does the
    distribution predict the flips?); written only when there is one."""
    repeatability: list[Repeatability] = field(default_factory=list)
    """--aa both: per suite, how often each arm repeated its own output exactly on the candidate's
    repeat items, and whether the candidate did so less often (shown, not gated;
    gate/_repeatability.py); written only when there is one."""
    what_ran: list[WhatRanRow] = field(default_factory=list)
    """Each arm's KV dtype and scales, attention backend, weight format, linear kernel, batch
    invariance and speculative decoding as its server reported them (store/provenance.py);
    written only when an arm recorded them."""
    warnings: list[str] = field(default_factory=list)
    """Shown at the top of every report: a candidate's fallback (FP8 asked, a wider cache reported;
    scales given, 1.0 reported; another attention backend than the baseline's) and the launch
    settings declared to differ (--allow-diff); written only when there is one."""
    comparability: Comparability | None = None
    """Whether the arms ran the same comparison (tokenizer, chat template, caps, sample counts),
    read from the run folder before the verdict (gate/_comparable.py); "not comparable" is never PASS."""
    schema: Literal[1] = VERDICT_SCHEMA

    @property
    def exit_code(self) -> int:
        return EXIT_CODES.get(self.verdict, 3)

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        for a in data["agreement"]:  # a row without the unanswered test is written as before it existed
            if a.get("unanswered") is None:
                a.pop("unanswered", None)
            if a.get("sampled") is None:  # likewise a row of a run without --repeats
                a.pop("sampled", None)
        if data["comparability"] is None:  # decided outside a run folder: written as before
            data.pop("comparability")
        if not data["lengths"]:  # a run without long-context records is written as before
            data.pop("lengths")
        if not data["answers"]:  # no generation suite: written as before
            data.pop("answers")
        for key in ("drift", "flip_drift", "output_lengths", "categories", "repeatability", "what_ran", "warnings"):  # fmt: skip  # none: as before
            if not data[key]:
                data.pop(key)
        return {"schema": data.pop("schema"), **data}

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, sort_keys=False) + "\n"
