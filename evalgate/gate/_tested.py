"""The shape every gate test shares, and the Holm family that adjusts a sequence of them.

Each member of a Holm family (a suite's primary row, an agreement row, its unanswered test, a
longest-length row, a gated drift row) carries its p-value and what Holm's step-down made of it
(``HolmTest``); a row of verdict.json adds the status and reason the report shows (``Tested``).
Their fields are keyword-only, so a row keeps its own positional constructor; they lead each row
in verdict.json (a dataclass lists its base's fields first).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

from pydantic import Field
from pydantic import dataclasses as pyd

from evalgate import stats

__all__ = ["HolmTest", "Status", "Tested", "holm"]

Status = Literal[
    "pass", "block", "underpowered", "info", "missing", "error",
    "advisory-pass", "advisory-block", "advisory-underpowered",
]  # fmt: skip


@pyd.dataclass(kw_only=True)
class HolmTest:
    """A test in a Holm family: its p-value (the class that holds it says what it tests) and what
    Holm made of it. Descriptions are ``Field``s (a subclass's schema would not read attribute
    docstrings here), each ``kw_only`` itself (the decorator's does not reach a ``Field``)."""

    p_value: float
    p_adjusted: float | None = Field(
        None, kw_only=True, description="Holm-adjusted over the family it was decided in; None when in none."
    )
    significant: bool = Field(
        False,
        kw_only=True,
        description="True when this test blocks: its adjusted p is below alpha (a row tested on its own, "
        "such as a non-inferiority bound: its own test rejects).",
    )


@pyd.dataclass(kw_only=True)
class Tested(HolmTest):
    """A row of verdict.json that the gate judges: its test, then the status and reason shown."""

    status: Status = Field(
        "pass",
        kw_only=True,
        description="pass, block, underpowered, info (shown, not gated), missing or error; an advisory "
        "suite's gated row (never gating) advisory-pass, advisory-block (it would block) or "
        "advisory-underpowered.",
    )
    reason: str = Field("", kw_only=True, description="The status in words, as the report shows it.")


def holm(family: Sequence[HolmTest], alpha: float) -> None:
    """Adjust the family's p-values (Holm's step-down) and mark each test significant at ``alpha``."""
    adjusted = stats.holm([t.p_value for t in family]) if family else []
    for test, p_adj in zip(family, adjusted, strict=True):
        test.p_adjusted = float(p_adj)
        test.significant = bool(p_adj < alpha)
