"""Planning a run's power before it starts: the items each suite needs for 80 % power at the
level the gate will really test it at (``evalgate plan-power``).

The same model as the MDE a run prints (``stats.mde``): a change comes on top of the server's
own flips, so a suite flipping at f has discordance f + d under a change of d, and the needed n
and the MDE here are what a run's rows will report. A long-context suite over two or more lengths
adds its gated longest-length row (gate/_lengths.py): one more test in the Holm family, and a row
here sized one-sided on the items of the longest length alone (``--limit`` is items per length)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from evalgate import stats

__all__ = ["PlanRow", "family_size", "plan_power"]


DRIFT_GATED_ROWS = 2
"""A live drift suite's rows in the Holm family: the mean KL and the perplexity ratio."""


def family_size(
    kinds: Sequence[str],
    *,
    policy: str,
    agreement_gate: bool,
    errors_as_wrong: bool = False,
    longest: int = 0,
) -> int:
    """Tests in the Holm family of a run over suites of these ``kinds`` (loglikelihood, generate,
    chat, drift): each suite's accuracy row (none under non-inferiority, an intersection-union test), its
    agreement row, and the unanswered test of a generation suite (every suite with errors as wrong);
    a drift suite adds its two budget rows (KL and perplexity ratio) instead, none under NI.
    ``longest``: suites with a gated longest-length row (long context over two or more lengths),
    one more test each under every policy (``gate/_decide.py`` counts it so)."""
    drift = sum(1 for k in kinds if k == "drift")
    kinds = [k for k in kinds if k != "drift"]
    accuracy = 0 if policy == "non-inferiority" else len(kinds) + DRIFT_GATED_ROWS * drift
    if not agreement_gate:
        return accuracy + longest
    unanswered = sum(1 for k in kinds if errors_as_wrong or k != "loglikelihood")
    return accuracy + len(kinds) + unanswered + longest


@dataclass(frozen=True)
class PlanRow:
    suite: str
    available: int | None
    """Items in the suite's test split (None when its data is not at hand)."""
    flip_rate: float
    flip_source: str
    level: float
    """The alpha this suite's test must reach (Holm's first step), one- or two-sided."""
    alternative: str
    needed: int
    """Items for ``power`` at an absolute change (or margin) of ``mde``."""
    mde_available: float | None
    """What the whole suite detects with ``power`` at ``level`` (None when its size is unknown)."""
    longest: int | None = None
    """The longest-length row of a long-context suite: that length in tokens (``needed`` and
    ``available`` are then items at that length, ``level`` one-sided); None for a suite's own row."""


def plan_power(
    suites: Mapping[str, tuple[str, int | None]],
    *,
    mde: float,
    flip_rates: Mapping[str, tuple[float, str]],
    alpha: float = 0.05,
    power: float = 0.8,
    policy: str = "difference",
    agreement_gate: bool = True,
    lengths: Mapping[str, Sequence[int]] | None = None,
    longest_rates: Mapping[str, tuple[float, str]] | None = None,
) -> tuple[int, list[PlanRow]]:
    """``suites``: name -> (kind, items available); ``flip_rates``: name -> (rate, where it came
    from). Returns the family's size and one row per suite. Under non-inferiority ``mde`` is the
    margin and a row's n is what shows non-inferiority with ``power`` when nothing changed.

    ``lengths``: a long-context suite -> its context lengths. Over two or more, its gated
    longest-length row is one more test, and gets a row of its own (after the suite's): the items
    at the longest length that detect a loss of ``mde`` there, one-sided (the row's test is) at
    Holm's first step, with the flip rate of that length from ``longest_rates`` (else the
    suite's). Under non-inferiority that row only blocks on a loss beyond the margin and has
    nothing to show, so it is counted in the family but not sized."""
    longest = {s: max(ls) for s, ls in (lengths or {}).items() if len(set(ls)) >= 2 and s in suites}
    tests = family_size(
        [k for k, _ in suites.values()], policy=policy, agreement_gate=agreement_gate, longest=len(longest)
    )
    ni = policy == "non-inferiority"
    level = alpha if ni else alpha / max(1, tests)
    alternative = "two-sided" if policy == "difference" else "less"
    rows = []
    for name, (kind, available) in suites.items():
        if kind == "drift":  # budget rows: no accuracy change to size
            continue
        rate, source = flip_rates[name]
        rows.append(_row(name, available, rate, source, mde, level, power, alternative))
        if name in longest and not ni:
            per_length = None if available is None else available // len(set((lengths or {})[name]))
            rate, source = (longest_rates or {}).get(name, (rate, source))
            row = _row(name, per_length, rate, source, mde, level, power, "less")
            rows.append(replace(row, longest=longest[name]))
    return tests, rows


def _row(
    name: str,
    available: int | None,
    rate: float,
    source: str,
    mde: float,
    level: float,
    power: float,
    alternative: str,
) -> PlanRow:
    needed = stats.required_n(mde, rate, alpha=level, power=power, alternative=alternative)  # type: ignore[arg-type]
    at = None
    if available:
        d = stats.mde(available, rate, alpha=level, power=power, alternative=alternative)  # type: ignore[arg-type]
        at = None if math.isinf(d) else d
    return PlanRow(name, available, rate, source, level, alternative, needed, at)
