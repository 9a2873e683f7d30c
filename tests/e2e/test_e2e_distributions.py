"""Teacher-forced token distributions from the real llama-server (SmolLM2 F16), one launch.

The token-id grammar forces the text, yet the top k llama-server reports must be the model's own
distribution (``get_token_probabilities``: the softmax of the raw logits), not the grammar-masked
one, which would give every forced token logprob 0 and list nothing else. And the forced tokens'
logprobs must add up to what ``loglikelihood`` scores for the same split (to float32 rounding)."""

from __future__ import annotations

import asyncio
import math
from collections.abc import Iterator

import pytest

from evalgate.engines import ServerHandle
from evalgate.engines.api import LaunchSlot, Position
from evalgate.engines.llamacpp import LlamaCppEngine, LlamaCppScorer
from evalgate.variants import Variant
from tests.conftest import needs_models

pytestmark = [pytest.mark.e2e, needs_models]

CONTEXT = "The capital of France is"
TEXT = " Paris.\nIt is a large city on the Seine, with many museums and old bridges."
TOP_K = 20


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerHandle]:
    engine = LlamaCppEngine()
    spec = engine.launch_spec(Variant("bf16"))
    with engine.launch(spec, LaunchSlot("baseline", tmp_path_factory.mktemp("llama"))) as handle:
        yield handle


def test_forced_positions_are_the_models_distribution(server: ServerHandle) -> None:
    async def go() -> tuple[list[int], int, list[Position], list[Position], float]:
        scorer = LlamaCppScorer(server, concurrency=1, cache_prompt=False)
        try:
            ctx, cont = await scorer.split_tokens(CONTEXT, TEXT)
            tokens = ctx + cont
            first = await scorer.token_distributions(tokens, start=len(ctx), top_k=TOP_K)
            again = await scorer.token_distributions(tokens, start=len(ctx), top_k=TOP_K)
            loglik, _, n = await scorer.loglikelihood(CONTEXT, TEXT)
            assert n == len(cont)
            return tokens, len(ctx), first, again, loglik
        finally:
            await scorer.aclose()

    tokens, start, first, again, loglik = asyncio.run(go())
    forced = tokens[start:]
    assert len(first) == len(forced) > 10
    assert first == again  # cache_prompt off: the same request gives the same numbers
    # not grammar-masked: somewhere the forced token is not the model's first choice, has a
    # logprob below 0, and other tokens are listed with finite logprobs
    overruled = [
        (lp, top) for tok, (lp, top) in zip(forced, first, strict=True) if top[0][0] != tok and lp < -1e-3
    ]
    assert overruled, "every forced token came back as the top one: a grammar-masked distribution?"
    for lp, top in overruled:
        assert len(top) == TOP_K and top[0][1] > lp and all(math.isfinite(v) for _, v in top)
    assert any(math.fsum(math.exp(v) for _, v in top) < 0.999 for _, top in first)
    # the same logits as loglikelihood's (top_k 1): the float32 softmax normalizer is summed in an
    # order that depends on n_probs (get_token_probabilities partial-sorts the leading n_top), a
    # few 1e-6 per token on this build (-56.47062 vs -56.47074 over 18 tokens)
    assert sum(lp for lp, _ in first) == pytest.approx(loglik, abs=3e-5 * len(forced))


QUESTIONS = {
    "Question: Which gas do plants take in to make food?\nAnswer:": [
        " carbon dioxide", " oxygen", " nitrogen", " helium"],
    "Question: What force pulls objects toward the Earth?\nAnswer:": [
        " gravity", " magnetism", " friction", " electricity"],
}  # fmt: skip


def test_a_questions_choices_reuse_the_slot_that_holds_its_context(server: ServerHandle) -> None:
    """``loglikelihood_many`` sends a question's choices one after another so llama-server's slot
    choice (the idle slot with the longest common prefix) puts each on the slot already holding
    the context: read from the server's own ``timings`` (prompt tokens it evaluated per request).
    The scores match the uncached ones. (With other questions in flight a question's first choice
    may take an idle slot another question holds, when their prompts share over 10 % of their
    tokens; "Question:" can be: that question then prefills once more.)"""
    prefilled: dict[str, list[int]] = {}

    async def go(cache: bool) -> list[list[float]]:
        scorer = LlamaCppScorer(server, concurrency=4, cache_prompt=cache)
        post = scorer.http.post

        async def spy(path: str, body: dict[str, object]) -> object:
            data = await post(path, body)
            if path == "/v1/completions" and isinstance(data, dict):
                prompt = await scorer.detokenize(list(body["prompt"]))  # type: ignore[call-overload]
                prefilled.setdefault(prompt, []).append(int(data["timings"]["prompt_n"]))
            return data

        scorer.http.post = spy  # type: ignore[method-assign]
        try:
            await scorer.flush_cache()
            outs = [await scorer.loglikelihood_many(q, c) for q, c in QUESTIONS.items()]
            return [[ll for ll, _, _ in out] for out in outs]
        finally:
            await scorer.aclose()

    cached = asyncio.run(go(True))
    for counts in prefilled.values():
        assert len(counts) == 4
        assert counts[0] > 10 and max(counts[1:]) <= 2, counts  # the context evaluated once
    prefilled.clear()
    fresh = asyncio.run(go(False))
    assert all(min(counts) > 10 for counts in prefilled.values())
    for got, want in zip(cached, fresh, strict=True):
        assert got == pytest.approx(want, abs=0.05)  # the batch a token shared moves F16 logits
