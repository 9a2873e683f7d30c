"""The "Each arm run twice" table (verdict.json's ``repeatability``, gate/_repeatability.py) for every
renderer: per suite of a ``--aa both`` run, how often each arm gave its own output again."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from evalgate.report import _format as fmt

__all__ = ["REPEAT_NOTE", "REPEAT_TITLE", "repeatability_table"]

REPEAT_TITLE = "Each arm run twice (--aa both)"
REPEAT_NOTE = (
    "Each arm's repeat paired with its first run on the candidate's repeat items (--aa-items per suite): "
    "identical when the answer text, every choice log-likelihood, or a drift suite's greedy tokens are the "
    "same; intervals Clopper-Pearson. p: exact one-sided McNemar on the same items (H1: the candidate "
    "repeats itself less often), shown, not gated; NOISIER: p below alpha, the candidate is non-deterministic "
    "where the baseline is not. The flip budget still uses the baseline's A/A pair."
)


def _share(share: Any, ci: Any) -> str:
    low, high = (float(x) for x in ci)
    return f"{fmt.pct(float(share))} [{fmt.pct(low)}, {fmt.pct(high)}]"


def repeatability_table(rows: Sequence[dict[str, Any]]) -> tuple[list[str], list[list[str]]]:
    """(headers, rows) from verdict.json's ``repeatability`` (the dict form every renderer reads)."""
    headers = [
        "suite",
        "compared",
        "n",
        "baseline identical",
        "candidate identical",
        "only b / only c",
        "p",
        "",
    ]
    out = []
    for r in rows:
        measured = int(r["n"]) > 0
        out.append([
            fmt.clean(str(r["suite"])), fmt.clean(str(r["compared"])) or "—", str(r["n"]),
            _share(r["baseline"], r["baseline_ci"]) if measured else "—",
            _share(r["candidate"], r["candidate_ci"]) if measured else "—",
            f"{r['only_baseline']} / {r['only_candidate']}", f"{float(r['p_value']):.3g}" if measured else "—",
            "NOISIER" if r.get("noisier") else "",
        ])  # fmt: skip
    return headers, out
