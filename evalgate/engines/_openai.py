"""What SGLang's and vLLM's scorers share as OpenAI-compatible servers: a ``Generation`` sent to
``/v1/completions`` and a chat sent to ``/v1/chat/completions``, where a chat whose last message is
the assistant's (the tool_calls suite's prefill) asks the server to continue that message.

Each engine keeps its own words: the fields that say "continue" (``prefill_fields``, cited from
its source in its scorer) and, for vLLM, the served model's name on every request (``_with_model``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

from evalgate.engines._scoring import BatchScorer, check_chat, completion_result
from evalgate.engines.api import Generation

__all__ = ["OpenAIScorer", "ends_with_assistant"]


def ends_with_assistant(payload: Mapping[str, Any]) -> bool:
    """The chat's last message is the assistant's: a prefill to continue, not a turn to answer."""
    messages = payload.get("messages") or []
    return bool(messages) and isinstance(messages[-1], dict) and messages[-1].get("role") == "assistant"


class OpenAIScorer(BatchScorer):
    """A ``BatchScorer`` whose server answers OpenAI's completions and chat completions."""

    prefill_fields: ClassVar[Mapping[str, Any]]
    """Added to a chat that ends with the assistant's message, so the server continues it."""

    def _with_model(self, body: dict[str, Any]) -> dict[str, Any]:
        """``body`` as this server wants it; one that must be told the model overrides this."""
        return body

    async def generate(self, prompt: str, gen: Generation) -> dict[str, Any]:
        payload = {
            "prompt": prompt,
            "max_tokens": gen.max_tokens,
            "stop": list(gen.stop),
            "temperature": gen.temperature,
            "seed": gen.seed,
            **(gen.sampling or {}),  # top_p, top_k, min_p: both servers' completions request fields
        }
        data = await self.http.post("/v1/completions", self._with_model(payload))
        # the servers trim their stop strings already; completion_result keeps every engine identical
        return completion_result(data, gen.stop, self.server)

    async def chat(self, payload: dict[str, Any]) -> dict[str, Any]:
        if ends_with_assistant(payload):
            payload = {**payload, **self.prefill_fields}
        data = await self.http.post("/v1/chat/completions", self._with_model(payload))
        return check_chat(data, self.server)
