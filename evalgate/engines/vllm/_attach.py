"""Attach mode's reading of a running vLLM server: ``/version`` proves it is one; vLLM reports its
settings only through the model card (``root``, ``max_model_len``)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from evalgate.engines._gpu import attached_concurrency
from evalgate.engines.api import AttachDialect, Get, scorer_ignoring_determinism
from evalgate.engines.vllm._scorer import VLLMScorer

__all__ = ["DIALECT"]


def _read(get: Get) -> dict[str, Any] | None:
    data = get("/version")
    return data if isinstance(data, dict) and "version" in data else None


def _fingerprint(data: Mapping[str, Any], cards: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    card = cards[0] if cards else {}
    return {
        "version": data.get("version"),
        "model": card.get("root"),
        "max_model_len": card.get("max_model_len"),
    }


DIALECT = AttachDialect(
    name="vllm",
    endpoint="/version",
    read=_read,
    fingerprint=_fingerprint,
    settings=lambda fp: {"model": fp.get("model"), "max_model_len": fp.get("max_model_len")},
    concurrency=attached_concurrency,
    scorer=scorer_ignoring_determinism(VLLMScorer),
)
