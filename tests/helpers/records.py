"""One record built for a gate test: the fields a test varies, the rest fixed."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from evalgate.store.records import Record

__all__ = ["record"]


def record(arm: str, item: str, metrics: Mapping[str, float], *, suite: str = "s", **fields: Any) -> Record:
    """``arm``'s record of ``item`` with ``metrics``: run ``r``, variant = arm, suite version 1,
    repeat 0, the prompt hash the item's, no target, response or extraction; ``fields`` override
    any of them (the gate reads only the metrics, the pairing and, for drift, the response)."""
    base: dict[str, Any] = {
        "run_id": "r",
        "arm": arm,
        "variant": arm,
        "suite": suite,
        "suite_version": 1,
        "item_id": item,
        "repeat": 0,
        "prompt_hash": item,
        "target": None,
        "response": None,
        "extracted": None,
        "metrics": dict(metrics),
    }
    return Record(**{**base, **fields})
