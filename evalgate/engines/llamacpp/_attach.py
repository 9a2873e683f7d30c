"""Attach mode's reading of a running llama-server: ``/props`` proves it is one, and holds the
settings two arms must share (context per slot, slots, chat template, sampling defaults) and
the marker that tells one running server from another (``media_marker``)."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping, Sequence
from typing import Any

from evalgate.engines._launcher import ServerHandle
from evalgate.engines.api import AttachDialect, Get
from evalgate.engines.llamacpp._props import PROPS, as_props
from evalgate.engines.llamacpp._provenance import props_provenance
from evalgate.engines.llamacpp._scorer import LlamaCppScorer

__all__ = ["DIALECT"]


def _read(get: Get) -> dict[str, Any] | None:
    return as_props(get(PROPS))


# llama-server draws its media marker at random on every start (tools/server/server-common.h,
# ``get_media_marker``: "each time the server restarts, the marker will be different"; since
# ggml-org/llama.cpp#21962) and reports it in /props; LLAMA_MEDIA_MARKER can pin it, and older
# builds send the fixed "<__media__>", which tells nothing.
_RANDOM_MARKER = re.compile(r"<__media_[A-Za-z0-9]{16,}__>")


def _fingerprint(data: Mapping[str, Any], cards: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    general = data.get("default_generation_settings") or {}
    template = str(data.get("chat_template") or "")
    marker = str(data.get("media_marker") or "")
    return {
        # a digest: the marker itself guards the server's prompts against injected media markers
        "instance_sha256": (
            hashlib.sha256(marker.encode()).hexdigest()[:16] if _RANDOM_MARKER.fullmatch(marker) else None
        ),
        "version": data.get("build_info"),
        "model_path": data.get("model_path"),
        "model_ftype": data.get("model_ftype"),
        "n_ctx_per_slot": general.get("n_ctx"),
        "total_slots": data.get("total_slots"),
        "chat_template_sha256": hashlib.sha256(template.encode()).hexdigest()[:16],
        "sampling": general.get("params") or {},
    }


def _settings(fp: Mapping[str, Any]) -> dict[str, Any]:
    out = {k: fp.get(k) for k in ("model_path", "n_ctx_per_slot", "total_slots", "chat_template_sha256")}
    return out | {f"sampling.{k}": v for k, v in (fp.get("sampling") or {}).items()}


def _scorer(handle: ServerHandle, *, concurrency: int, seed: int, deterministic: bool) -> LlamaCppScorer:
    return LlamaCppScorer(handle, concurrency=concurrency, seed=seed, cache_prompt=not deterministic)


DIALECT = AttachDialect(
    name="llamacpp",
    endpoint=PROPS,
    read=_read,
    fingerprint=_fingerprint,
    settings=_settings,
    concurrency=lambda fp: int(fp.get("total_slots") or 4),
    scorer=_scorer,
    instance=lambda fp: fp.get("instance_sha256"),
    provenance=props_provenance,
    replica_keys=frozenset({"instance_sha256"}),
)
