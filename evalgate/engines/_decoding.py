"""The decode path's answers (``Scorer.decode_distributions``), checked where they are read, as
``engines._scoring`` checks the teacher-forced ones: a greedy generation whose every token comes
with its logprob and the top k of the model's raw distribution at that step.

Each engine reads its own layout into ``(token id, logprob, [(id, logprob), ...])`` per generated
token and a finish reason; ``check_decoded`` then holds every engine to one rule, so a difference
between the arms is the servers' alone. On every engine the first generated token is scored by the
prompt's own forward pass (the last prompt position's logits); each later one by a decode step
that reads the keys and values of everything before it back from the KV cache.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from types import MappingProxyType
from typing import Any

from evalgate.engines._scoring import TOP_TOLERANCE, check_positions, invalid
from evalgate.engines.api import Decoded

__all__ = ["FINISH_REASONS", "NEUTRAL_PENALTIES", "check_decoded", "decode_prompt"]

FINISH_REASONS = frozenset({"stop", "length"})
"""How a greedy generation may end: at a stop token ("stop") or at its token cap ("length": the
request's ``max_tokens``, or the server's context window). An abort, an error or a repetition
guard is no generation to compare."""

NEUTRAL_PENALTIES: Mapping[str, float] = MappingProxyType(
    {"repetition_penalty": 1.0, "frequency_penalty": 0.0, "presence_penalty": 0.0}
)
"""The penalties SGLang's and vLLM's decode requests send at their neutral values (both servers'
names): each fills a field a request leaves out from its own defaults (SGLang's
``--preferred-sampling-params``, vLLM's generation config), and a penalty there would move the
greedy pick off the reported top-1 (each engine's ``_decode`` cites the source)."""


def decode_prompt(prompt: Sequence[int], *, max_tokens: int, top_k: int) -> list[int]:
    """The prompt's ids as plain ints; an empty prompt, ``max_tokens < 1`` or ``top_k < 1`` is the
    caller's mistake (ValueError), never the server's."""
    if not prompt:
        raise ValueError("decode_distributions needs a prompt of at least one token")
    if max_tokens < 1 or top_k < 1:
        raise ValueError(f"max_tokens={max_tokens} and top_k={top_k} must both be at least 1")
    return [int(t) for t in prompt]


def check_decoded(
    answered: Sequence[tuple[Any, Any, Any]],
    tokens: Sequence[Any],
    finish_reason: Any,
    server: str,
    *,
    top_k: int,
    max_tokens: int,
) -> Decoded:
    """A greedy generation as a server answered it: ``tokens`` (the generated ids) and, per token,
    ``(the id its logprob entry names, or None when the answer does not say, its logprob, the top
    list best first)``, checked and turned into a ``Decoded``; anything else is an InvalidResponse
    naming ``server``.

    Between 1 and ``max_tokens`` tokens, each a whole number >= 0, with one entry each; a finish
    reason in ``FINISH_REASONS`` ("length" past ``max_tokens`` is no cap); every position as
    ``check_positions`` holds a teacher-forced one (exactly ``top_k`` alternatives, whole-number
    ids, none twice, best first, probabilities summing to at most 1, the token's logprob equal to
    its own entry); and each token greedy: its logprob no lower than the best alternative's
    (``TOP_TOLERANCE``), so it is the top-1 or tied with it. A lower one is a sampled step or a
    masked or penalised distribution, which is not the model's raw one."""
    n = len(tokens)
    if not 1 <= n <= max_tokens:
        raise invalid(server, f"generated {n} tokens where 1 to {max_tokens} were asked")
    if not isinstance(finish_reason, str) or finish_reason not in FINISH_REASONS:
        shown = repr(finish_reason[:40]) if isinstance(finish_reason, str) else type(finish_reason).__name__
        raise invalid(server, f"ended a greedy generation with the finish reason {shown}")
    ids: list[int] = []
    for i, t in enumerate(tokens):
        if isinstance(t, bool) or not isinstance(t, int) or t < 0:
            shown = repr(t) if isinstance(t, (bool, int)) or t is None else f"a {type(t).__name__}"
            raise invalid(server, f"answered a generated token id of {shown} at position {i}")
        ids.append(t)
    positions = check_positions(answered, ids, server, top_k=top_k, kind="generated")
    for i, (tok, (lp, top)) in enumerate(zip(ids, positions, strict=True)):
        if lp < top[0][1] - TOP_TOLERANCE:
            raise invalid(
                server,
                f"generated token {tok} at position {i} with a logprob of {lp!r} below the best "
                f"alternative's {top[0][1]!r}: not a greedy step of the model's raw distribution",
            )
    return Decoded(tuple(ids), tuple(positions), str(finish_reason))
