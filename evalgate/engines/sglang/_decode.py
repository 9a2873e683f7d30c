"""SGLang's decode path (``Scorer.decode_distributions``): one native ``/generate`` that generates
greedily from ``input_ids`` and returns, per generated token, its logprob and the top k. What
follows is SGLang 0.5.23's source (the wheel's ``sglang/srt``).

The request (``GenerateReqInput`` in ``managers/io_struct.py``): ``return_logprob``,
``top_logprobs_num`` = k, and ``logprob_start_len`` -1, which "means it will only return logprobs
for output tokens": ``Scheduler._handle_generate_request`` (``managers/scheduler.py``) sets it to
the prompt's length when logprobs are asked with no ``token_ids_logprob``, so no prompt position is
scored and the whole prompt may come from the radix cache (``Req._compute_max_prefix_len`` caps
the reused prefix only for a ``logprob_start_len`` >= 0). ``sampling_params`` has
``max_new_tokens``, ``temperature`` 0 (``SamplingParams.normalize`` in
``sampling/sampling_params.py`` makes that ``top_k`` 1, temperature 1: greedy) and the penalties at
their neutral values, sent because a server's ``--preferred-sampling-params`` fills what a
``/generate`` leaves out (``TokenizerManager``: ``{**preferred_sampling_params, **sampling_params}``).

What the numbers are: ``ModelRunner._preprocess_logits`` (``model_executor/model_runner.py``)
applies the penalties, a grammar's vocabulary mask and ``logit_bias`` to the logits in place
(``SamplingBatchInfo.apply_logits_bias``), and only then ``Sampler.forward``
(``layers/sampler.py``) takes, for an all-greedy batch, ``argmax`` and ``log_softmax`` of those
same logits, its top k by ``torch.topk`` (``get_top_logprobs_raw``, ``layers/logprob_processor.py``;
``OutputLogprobProcessor.compute_logprobs`` clamps -inf to float32's lowest). So with no penalty and
no grammar they are the model's raw distribution, and a grammar-forced token would be reported from
the masked one (every other token at the clamp, the forced one near 0): forcing through SGLang's
structured output cannot measure a distribution, hence the greedy generation.
``SGLANG_RETURN_ORIGINAL_LOGPROB`` changes only sampled (non-greedy) requests: their logprobs
before the temperature, still after the penalties and the mask.

The answer (``TokenizerManager._handle_batch_output`` and ``add_logprob_to_meta_info`` in
``managers/tokenizer_manager.py``): ``output_ids``, the generated ids through the stop token
(``Req.output_ids_through_stop``: "Stop position is included"; only the text is trimmed, by the
detokenizer's ``trim_matched_stop``); ``meta_info.output_token_logprobs``, one ``[logprob, id,
text]`` per generated token; ``meta_info.output_top_logprobs``, per token a list of those triples
best first (text None unless ``return_text_in_logprobs``; ``detokenize_top_logprobs_tokens``); and
``meta_info.finish_reason``, ``{"type": "length", "length": n}`` or ``{"type": "stop", "matched":
id or text}`` (``FINISH_LENGTH``, ``FINISH_MATCHED_TOKEN`` in ``managers/schedule_batch.py``), or
``{"type": "abort", ...}``. ``Req.update_finish_state`` tests the stop token before the length,
so a stop token generated as the last allowed one reads "stop"; a token id outside the vocabulary
(NaN logits) ends it as ``{"type": "stop", "matched": "NaN happened"}`` with the id replaced by
the stop token (``_check_vocab_boundary_finish``), which is read as the invalid answer it is.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Literal

from evalgate.engines._decoding import NEUTRAL_PENALTIES, check_decoded
from evalgate.engines._scoring import invalid, parsing
from evalgate.engines.api import Decoded

__all__ = [
    "NAN_FINISH",
    "Side",
    "answered_positions",
    "decode_payload",
    "logprob_lists",
    "one_result",
    "read_decoded",
]

NAN_FINISH = "NaN happened"
"""The ``matched`` of the finish SGLang gives a step whose sampled id fell outside the vocabulary."""


def decode_payload(prompt: Sequence[int], *, max_tokens: int, top_k: int) -> dict[str, Any]:
    """The ``/generate`` body of a greedy generation with the top ``top_k`` per generated token
    and no prompt logprobs (module docstring); pure for tests."""
    return {
        "input_ids": [int(t) for t in prompt],
        "sampling_params": {
            "max_new_tokens": max_tokens,
            "temperature": 0.0,
            **NEUTRAL_PENALTIES,
            "min_new_tokens": 0,
        },
        "return_logprob": True,
        "logprob_start_len": -1,  # output tokens only
        "top_logprobs_num": top_k,
    }


Side = Literal["input", "output"]
"""Which tokens a ``meta_info`` list is about: the prompt's (``input_*``) or the generated ones."""
_WORDS: dict[Side, tuple[str, str, str]] = {
    "input": ("prompt", "forced", "logprob_start_len or top_logprobs_num"),
    "output": ("output", "generated", "top_logprobs_num"),
}
"""Per side, for a miscount: whose logprobs, which tokens, and what such an SGLang ignored."""


def one_result(out: Any) -> Any:
    """The result of a ``/generate`` for one request, which SGLang may answer as a batch of one."""
    return out[0] if isinstance(out, list) and len(out) == 1 else out


def logprob_lists(meta: Mapping[str, Any], side: Side) -> tuple[list[Any], list[Any]]:
    """``meta_info``'s ``{side}_token_logprobs`` (``[logprob, id, text]`` per token) and
    ``{side}_top_logprobs`` (a list of those per token, best first); the input side without its
    first entry, which SGLang never computes (None: ``_scorer``'s module docstring)."""
    skip = 1 if side == "input" else 0
    entries = list(meta.get(f"{side}_token_logprobs") or [])[skip:]
    return entries, list(meta.get(f"{side}_top_logprobs") or [])[skip:]


def answered_positions(
    entries: Sequence[Any], tops: Sequence[Any], n: int, server: str, *, side: Side
) -> list[tuple[Any, Any, Any]]:
    """SGLang's entries and top lists of ``n`` tokens as ``check_positions`` takes them: (id,
    logprob, [(id, logprob), ...]) per position; another count of either is an InvalidResponse."""
    if len(entries) != n or len(tops) != n:
        whose, tokens, ignored = _WORDS[side]
        raise invalid(
            server,
            f"returned {len(entries)} {whose} logprobs and {len(tops)} top lists for {n} {tokens} tokens "
            f"(an SGLang that ignores {ignored}: upgrade SGLang)",
        )
    return [
        (entry[1], entry[0], None if top is None else [(t[1], t[0]) for t in top])
        for entry, top in zip(entries, tops, strict=True)
    ]


def read_decoded(out: Any, *, max_tokens: int, top_k: int, server: str = "SGLang") -> Decoded:
    """The generation in one ``/generate`` result (module docstring): ``output_ids`` (or, from a
    server that leaves them out, the ids of ``output_token_logprobs``), each token's entry and top
    list lined up with it, checked by ``check_decoded``."""
    with parsing(server, "/generate output logprobs"):
        out = one_result(out)
        meta = out.get("meta_info") or {}
        entries, tops = logprob_lists(meta, "output")
        ids = out.get("output_ids")
        tokens = list(ids) if ids is not None else [e[1] for e in entries]
        answered = answered_positions(entries, tops, len(tokens), server, side="output")
        finish = meta.get("finish_reason")
        kind = finish.get("type") if isinstance(finish, dict) else finish
        if isinstance(finish, dict) and finish.get("matched") == NAN_FINISH:
            raise invalid(server, "ended a generation at NaN logits (SGLang's 'NaN happened' finish)")
    return check_decoded(answered, tokens, kind, server, top_k=top_k, max_tokens=max_tokens)
