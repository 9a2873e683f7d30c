"""A run's arms, named once: the two it compares and the repeats ``--aa`` adds.

``--aa`` (``--aa baseline``) launches the baseline a second time as the ``aa`` arm: every item, the
noise floor the flip budget is measured against. ``--aa both`` also launches the candidate a second
time as the ``aa_candidate`` arm, on the first ``--aa-items`` items of each suite (and ``AA_PAD``
more, run so that the compared ones share their batches as the first time): enough to show
whether the candidate repeats its own output less often than the baseline (a quantized KV cache
or MoE kernel that is not batch-invariant is the noisy arm then), not a second noise floor. A
repeat arm is its original's launch, servers, GPUs and API key again.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated, Any, Literal

from pydantic import BeforeValidator
from pydantic.json_schema import WithJsonSchema

__all__ = [
    "AA_CHOICES",
    "AA_PAD",
    "DEFAULT_AA_ITEMS",
    "PAIR",
    "READS",
    "REPEATS",
    "AaMode",
    "AaValue",
    "compared_ids",
    "original",
    "repeat_arms",
    "repeat_ids",
]

AaMode = Literal["baseline", "both"]
AA_CHOICES: tuple[str, ...] = ("baseline", "both")


def _legacy(value: Any) -> Any:
    """A request written before ``--aa both`` holds a bool: true is ``baseline``, false unset."""
    return ("baseline" if value else None) if isinstance(value, bool) else value


AaValue = Annotated[
    AaMode | None,
    BeforeValidator(_legacy),
    WithJsonSchema(
        {
            "anyOf": [
                {"enum": list(AA_CHOICES), "type": "string"},
                {"type": "boolean", "description": "a request written before --aa both: true is baseline"},
                {"type": "null"},
            ]
        }
    ),
]
"""``CompareRequest.aa``: baseline, both or unset; old manifests' booleans still load."""
PAIR = ("baseline", "candidate")
REPEATS = {"aa": "baseline", "aa_candidate": "candidate"}
"""Repeat arm -> the arm it repeats."""
READS = {"baseline": ("candidate", "aa"), "candidate": ("baseline",)}
"""Arm -> the arms whose greedy texts it reads (the drift suite's cross rows, ``run/reads.py``):
the baseline judges the candidate's text and the A/A repeat's; the candidate reads the baseline's."""
DEFAULT_AA_ITEMS = 200
"""Items per suite the candidate's repeat is compared on under ``--aa both`` (a suite with fewer:
all). With a baseline that repeats itself exactly, the exact test flags a candidate whose repeat
differs on 5 % of items 98 % of the time at 200 (56 % at 100, 10 % at 50; docs/measurements.md),
for about 200 items per suite of one more arm instead of all of them."""
AA_PAD = 32
"""Items the candidate's repeat runs past the compared ones: the last requests of a run share
their batches with fewer others, and an engine that is not batch-invariant answers them
differently for that alone, so the compared items run with as many neighbours in flight as the
first time (up to 32 requests per arm: the GPU engines' default is 16, attach mode's 32)."""


def original(arm: str) -> str:
    """The arm ``arm`` repeats (itself for baseline and candidate)."""
    return REPEATS.get(arm, arm)


def repeat_arms(aa: str | None) -> tuple[str, ...]:
    """The repeat arms of a run with this ``--aa`` value, in launch order."""
    return () if not aa else ("aa", "aa_candidate") if aa == "both" else ("aa",)


def repeat_ids(item_ids: Sequence[str], arm: str, limit: int | None) -> list[str]:
    """The item ids ``arm`` runs of a suite whose planned ids are ``item_ids``: every one, except
    the candidate's repeat, which runs the first ``limit`` (``DEFAULT_AA_ITEMS`` when None) and
    ``AA_PAD`` more."""
    ids = list(dict.fromkeys(item_ids))
    if arm != "aa_candidate":
        return ids
    return ids[: (DEFAULT_AA_ITEMS if limit is None else limit) + AA_PAD]


def compared_ids(item_ids: Sequence[str], limit: int | None) -> list[str]:
    """The item ids both arms' repeats are compared on: the first ``limit``, or every one when
    the candidate's repeat ran them all (then both repeats ran alike, to the last batch)."""
    ids = list(dict.fromkeys(item_ids))
    n = DEFAULT_AA_ITEMS if limit is None else limit
    return ids if len(ids) <= n + AA_PAD else ids[:n]
