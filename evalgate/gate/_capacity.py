"""What the candidate buys, beside the verdict (#44): the KV capacity each arm's server reported at
launch (``arms.<arm>.server``: SGLang's ``capacity``, vLLM's ``kv_capacity``), or the one
``compare --with-throughput`` recorded (``throughput.capacity``), as one note: a reviewer reads
"x2.00 the tokens" and the answers' verdict in one place. The ratio is ``bench``'s own
(``capacity_ratio``); the gate reads the run folder only, never a server.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from evalgate.store.capacity import capacity_ratio

__all__ = ["capacity_note"]


def _reported(manifest: Any, arm: str) -> dict[str, Any] | None:
    doc = manifest.throughput or {}
    found = (doc.get("capacity") or {}).get(arm) if isinstance(doc, Mapping) else None
    if isinstance(found, Mapping) and found.get("kv_tokens"):
        return dict(found)
    info = manifest.arms.get(arm)
    pools = info.server.kv_pools() if info is not None else []
    return next((pool.to_dict() for pool in pools if pool.kv_tokens), None)


def capacity_note(manifest: Any) -> str | None:
    """``KV capacity: candidate x2.00 the baseline's tokens (...)`` when both arms reported one."""
    b, c = _reported(manifest, "baseline"), _reported(manifest, "candidate")
    if b is None or c is None:
        return None
    ratio = capacity_ratio(b, c)
    if ratio.get("ratio") is None:
        return None
    what = "tokens per MiB" if "per MiB" in str(ratio["basis"]) else "tokens"
    return (
        f"KV capacity: candidate x{ratio['ratio']:.2f} the baseline's {what} (basis: {ratio['basis']}; "
        f"baseline {int(b['kv_tokens']):,}, candidate {int(c['kv_tokens']):,} tokens)"
    )
