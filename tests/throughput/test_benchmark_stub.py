"""The benchmark stub server answers each client the way a real server would.

benchmarks/harness_overhead.py is only meaningful while the stub speaks both dialects correctly:
llama.cpp's token-id grammar logprobs (evalgate) and OpenAI legacy echo logprobs (lm-eval). These
tests drive evalgate's real ``LlamaCppScorer`` and lm-eval's own response parsers against it, so a
protocol drift in either shows up here instead of as a silently wrong benchmark.
"""

from __future__ import annotations

import asyncio
import re
from pathlib import Path
from types import ModuleType
from typing import Any

import httpx
import pytest

from evalgate.engines import ServerHandle
from evalgate.engines.api import Generation
from evalgate.engines.llamacpp import LlamaCppScorer
from tests.helpers.modules import load_file

BENCH = Path(__file__).resolve().parents[2] / "benchmarks"


def _stub() -> ModuleType:
    return load_file("_stub_server", BENCH / "_stub_server.py")


stub = _stub()
CONTEXT = "Question: Which gas do plants take in?\nAnswer:"
CHOICES = (" carbon dioxide", " oxygen", " nitrogen gas")


def _scorer(url: str) -> LlamaCppScorer:
    return LlamaCppScorer(ServerHandle("stub", url, "key", [], Path("stub.log")), concurrency=4)


def _expected(ctx: list[int], cont: list[int]) -> tuple[float, bool]:
    model = stub.StubModel
    prevs = [ctx[-1], *cont[:-1]]
    ll = sum(model.logprob(p, t) for p, t in zip(prevs, cont, strict=True))
    return ll, all(model.greedy(p, t) for p, t in zip(prevs, cont, strict=True))


def test_evalgate_scorer_loglikelihood_and_generate() -> None:
    async def go(url: str) -> dict[str, Any]:
        scorer = _scorer(url)
        try:
            ctx = await scorer.tokenize(CONTEXT)
            lls = await asyncio.gather(*(scorer.loglikelihood(CONTEXT, c) for c in CHOICES))
            conts = [(await scorer.split_tokens(CONTEXT, c))[1] for c in CHOICES]
            roundtrip = await scorer.detokenize(await scorer.tokenize(CONTEXT + CHOICES[0]))
            gen = await scorer.generate(CONTEXT, Generation(max_tokens=64, stop=("Question:",)))
            return {"ctx": ctx, "lls": lls, "conts": conts, "roundtrip": roundtrip, "gen": gen}
        finally:
            await scorer.aclose()

    with stub.serve_in_thread(lifetime_s=30) as url:
        out = asyncio.run(go(url))

    assert len(out["ctx"]) == 12  # Question : Which gas do plants take in ? \n Answer :
    assert out["roundtrip"] == CONTEXT + CHOICES[0]
    assert [len(c) for c in out["conts"]] == [2, 1, 2]
    for (ll, greedy, n), cont in zip(out["lls"], out["conts"], strict=True):
        want_ll, want_greedy = _expected(out["ctx"], cont)
        assert n == len(cont)
        assert ll == pytest.approx(want_ll, abs=1e-9)
        assert greedy == want_greedy
        assert -10.1 * n <= ll <= -0.05 * n
    text = out["gen"]["text"]
    assert text == stub.StubModel().answer(CONTEXT).split("Question:")[0]
    assert re.search(r"#### \d+\n\n$", text)
    assert out["gen"]["completion_tokens"] > 0


def test_lmeval_echo_format_matches_evalgate() -> None:
    """lm-eval's own parser reads the echo reply as the same (loglik, greedy) evalgate got."""
    from lm_eval.models.openai_completions import LocalCompletionsAPI

    with stub.serve_in_thread(lifetime_s=30) as url, httpx.Client(base_url=url, timeout=10) as http:
        ctx = http.post("/tokenize", json={"prompt": CONTEXT}).json()["tokens"]
        whole = http.post("/tokenize", json={"content": CONTEXT + CHOICES[0]}).json()["tokens"]
        body = {"prompt": [whole], "max_tokens": 1, "logprobs": 1, "echo": True, "temperature": 0}
        reply = http.post("/v1/completions", json=body).json()
        gen = http.post("/v1/completions", json={"prompt": [ctx], "max_tokens": 64, "stop": ["Question:"]})
        detok = http.post("/detokenize", json={"tokens": ctx}).json()
        info = http.get("/tokenizer_info").json()
        stats = http.get("/stub/stats").json()

    [(ll, greedy)] = LocalCompletionsAPI.parse_logprobs(reply, ctxlens=[len(ctx)])
    want_ll, want_greedy = _expected(ctx, whole[len(ctx) :])
    assert ll == pytest.approx(want_ll, abs=1e-9) and greedy == want_greedy
    assert len(reply["choices"][0]["logprobs"]["token_logprobs"]) == len(whole) + 1
    assert LocalCompletionsAPI.parse_generations(gen.json()) == [
        stub.StubModel().answer(CONTEXT).split("Question:")[0]
    ]
    assert detok["prompt"] == detok["content"] == CONTEXT
    assert info["eos_token"] == "</s>"
    assert stats == {"/tokenize": 2, "/v1/completions": 2, "/detokenize": 1, "/tokenizer_info": 1}


def test_subprocess_server_starts_answers_and_stops() -> None:
    with stub.serve_in_subprocess(lifetime_s=30) as url:
        tokens = httpx.post(f"{url}/tokenize", json={"content": "a b"}, timeout=10).json()["tokens"]
        missing = httpx.get(f"{url}/nope", timeout=10)
    assert tokens == [2, 3]
    assert missing.status_code == 404
    with pytest.raises(httpx.TransportError):
        httpx.get(f"{url}/health", timeout=2)
