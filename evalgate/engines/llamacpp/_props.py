"""llama-server's ``/props``, read in one place: what proves an answer is one (``as_props``), the
context per slot and the slots it reports, and a launched server's copy (``read_props``). Attach
mode (``_attach``), the scorer's context length (``_scorer``), the provenance (``_provenance``) and
the load sweep's slot count (``evalgate.throughput``) all read it through here."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import httpx

__all__ = ["PROPS", "as_props", "read_props", "slot_context", "total_slots"]

PROPS = "/props"


def as_props(data: Any) -> dict[str, Any] | None:
    """``data`` if it is a llama-server's ``/props`` (a dict with its slots or its default
    generation settings), else None."""
    ok = isinstance(data, dict) and any(k in data for k in ("total_slots", "default_generation_settings"))
    return data if ok else None


def slot_context(props: Mapping[str, Any]) -> int:
    """Tokens of context per slot (``default_generation_settings.n_ctx``, else a top-level
    ``n_ctx``); 0 when it does not say."""
    settings = props.get("default_generation_settings") or {}
    return int(settings.get("n_ctx") or props.get("n_ctx") or 0)


def total_slots(props: Any) -> Any:
    """The parallel slots ``props`` reports (``-np``), None when it is not a dict or says none."""
    return props.get("total_slots") if isinstance(props, dict) else None


def read_props(base_url: str, api_key: str) -> dict[str, Any]:
    """A launched server's ``/props``, or {} when it does not answer (its log still speaks)."""
    try:
        resp = httpx.get(f"{base_url}{PROPS}", headers={"Authorization": f"Bearer {api_key}"}, timeout=10.0)
        data = resp.json() if resp.status_code == 200 else {}
    except (httpx.HTTPError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}
