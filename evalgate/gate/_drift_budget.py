"""What a drift row may show: the KL and perplexity-ratio budgets (``--drift-budget``,
``[suites.drift]``), re-exported by ``gate/_drift.py``."""

from __future__ import annotations

import math

from pydantic import dataclasses as pyd

from evalgate.errors import ConfigError

__all__ = [
    "DEFAULT_DRIFT_BUDGET",
    "DEFAULT_KLD_BUDGET",
    "DEFAULT_LENGTH_MARGIN",
    "DEFAULT_PPL_MARGIN",
    "DriftBudget",
    "parse_drift_budget",
]

DEFAULT_KLD_BUDGET = 0.01
"""Mean per-token KL (nats) a candidate may show; measured on the CPU engine (docs/measurements.md)."""
DEFAULT_PPL_MARGIN = 0.02
"""The perplexity ratio a candidate may show is 1 + this; log(1 + this) nats per token is also the
cross row's budget (a text read by the baseline against the baseline's own)."""
DEFAULT_LENGTH_MARGIN = 0.10
"""How far the candidate's greedy generations may run longer or shorter than the baseline's, in
total generated tokens (Model-Optimizer gates mean completion length two-sided)."""


@pyd.dataclass(frozen=True)
class DriftBudget:
    """The budgets a drift row is tested against (``--drift-budget``, ``[suites.drift]``)."""

    kld: float = DEFAULT_KLD_BUDGET
    ppl_margin: float = DEFAULT_PPL_MARGIN
    length: float = DEFAULT_LENGTH_MARGIN
    source: str = "default"


DEFAULT_DRIFT_BUDGET = DriftBudget()


def parse_drift_budget(text: str | None) -> DriftBudget:
    """``0.01`` (the KL budget), ``kld=0.01``, ``ppl=2%``, ``len=10%`` or ``kld=0.01,ppl=0.02``;
    None: defaults."""
    if text is None:
        return DriftBudget()
    kld, ppl, length = DEFAULT_KLD_BUDGET, DEFAULT_PPL_MARGIN, DEFAULT_LENGTH_MARGIN
    fix = (
        "e.g. --drift-budget kld=0.01,ppl=2%,len=10% (KL in nats per token; perplexity ratio up to "
        "1.02; greedy generations within 10 % of the baseline's length)"
    )
    for part in [p.strip() for p in str(text).split(",") if p.strip()] or [""]:
        key, sep, value = part.partition("=")
        key, value = (key.strip(), value.strip()) if sep else ("kld", key.strip())
        try:
            number = float(value[:-1]) / 100 if value.endswith("%") else float(value)
        except ValueError:
            raise ConfigError(f"--drift-budget: {part!r} is not a number", fix=fix) from None
        if not (math.isfinite(number) and number > 0):
            raise ConfigError(f"--drift-budget: {part!r} must be a positive finite number", fix=fix)
        if key == "kld":
            kld = number
        elif key == "ppl":
            ppl = number
        elif key == "len":
            length = number
        else:
            raise ConfigError(f"--drift-budget: unknown budget {key!r}", fix=fix)
    return DriftBudget(
        kld=kld, ppl_margin=ppl, length=length, source="set for this run (--drift-budget or [suites.drift])"
    )
