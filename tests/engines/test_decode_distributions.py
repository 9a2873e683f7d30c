"""``Scorer.decode_distributions`` (the drift suite's decode path) on every engine without a model:
the shared checker (``engines._decoding.check_decoded``), the request each engine sends, checked
against the field names of the engine's own source, and how it reads an answer laid out as that
engine lays it out; the fake engine's decode-only drift; the decode proxy (tests/helpers/
decode_proxy.py) that makes a real server look like one with a decode-only fault. The real
numbers are checked end to end in tests/e2e/test_e2e_decode_sglang_cpu.py.

The doubles here answer from the fake model (``FakeScorer.decode_distributions``), each in its
engine's layout, so every engine's reading must give back exactly what the fake model generated."""

from __future__ import annotations

import asyncio
import json
import math
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from evalgate.engines import ServerHandle
from evalgate.engines._decoding import check_decoded, decode_prompt
from evalgate.engines.api import Decoded, Scorer
from evalgate.engines.attach import ShardedScorer
from evalgate.engines.client import ROUTING_KEY, RequestFailed
from evalgate.engines.fake import FakeEngine, FakeScorer, decode_drift_from
from evalgate.engines.gateway import GatewayScorer
from evalgate.engines.llamacpp import LlamaCppScorer
from evalgate.engines.llamacpp._scorer import read_decoded as llama_read
from evalgate.engines.sglang import SGLangScorer
from evalgate.engines.sglang._decode import decode_payload as sglang_payload
from evalgate.engines.sglang._decode import read_decoded as sglang_read
from evalgate.engines.vllm import VLLMScorer
from evalgate.engines.vllm._decode import decode_payload as vllm_payload
from evalgate.engines.vllm._decode import read_decoded as vllm_read
from evalgate.errors import InvalidResponse
from tests.engines.test_token_distributions import vllm_answer
from tests.helpers.background import background_apps
from tests.helpers.decode_proxy import decode_proxy, shift_top

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "sglang_decode"
TOP = [(7, -0.5), (3, -1.5), (9, -2.5)]
PROMPT = [11, 12, 13, 14, 15]


# -- the shared checker ------------------------------------------------------------------------------
def test_a_greedy_generation_is_read_as_decoded() -> None:
    answered = [(7, -0.5, TOP), (None, -0.5, [[7, -0.5], [3, -1.5], [9, -2.5]])]
    got = check_decoded(answered, [7, 7], "length", "candidate", top_k=3, max_tokens=2)
    assert got == Decoded((7, 7), ((-0.5, tuple(TOP)), (-0.5, tuple(TOP))), "length")
    # a tie for the best: the generated token listed second with the best's logprob is greedy
    tie = [(3, -0.9, [(7, -0.9), (3, -0.9), (9, -2.5)])]
    assert check_decoded(tie, [3], "stop", "candidate", top_k=3, max_tokens=4).tokens == (3,)
    # a tie with k = 1: the generated token need not be the one listed
    assert check_decoded([(3, -0.9, [(7, -0.9)])], [3], "stop", "c", top_k=1, max_tokens=1).tokens == (3,)
    # "length" short of max_tokens: the server's context window capped it
    assert (
        check_decoded([(7, -0.5, TOP)], [7], "length", "c", top_k=3, max_tokens=8).finish_reason == "length"
    )


@pytest.mark.parametrize(
    ("answered", "tokens", "finish", "match"),
    [
        ([], [], "stop", "generated 0 tokens where 1 to 2"),
        ([(7, -0.5, TOP)] * 3, [7, 7, 7], "length", "generated 3 tokens where 1 to 2"),
        ([(7, -0.5, TOP)], [7], "abort", "finish reason 'abort'"),
        ([(7, -0.5, TOP)], [7], None, "finish reason NoneType"),
        ([(7, -0.5, TOP)], [7], {"type": "stop"}, "finish reason dict"),
        ([(7, -0.5, TOP)], [True], "stop", "generated token id of True"),
        ([(7, -0.5, TOP)], ["7"], "stop", "generated token id of a str"),
        ([(7, -0.5, TOP)], [-1], "stop", "generated token id of -1"),
        ([(7, -0.5, TOP)], [7, 7], "stop", "1 positions for 2 generated tokens"),
        ([(3, -0.5, TOP)], [7], "stop", "token 3 at position 0 where 7 was generated"),
        ([(7, float("nan"), TOP)], [7], "stop", "not a finite number"),
        ([(7, -0.5, TOP[:2])], [7], "stop", "2 alternatives at position 0 where 3"),
        ([(7, -0.5, None)], [7], "stop", "null alternatives"),
        ([(7, -0.5, [(7, -0.5), (7, -1.5), (9, -2.5)])], [7], "stop", "a token twice"),
        ([(7, -0.5, [(7, -0.5), (9, -2.5), (3, -1.5)])], [7], "stop", "out of order"),
        ([(7, -0.1, [(7, -0.1), (3, -0.1), (9, -0.1)])], [7], "stop", "sum above 1"),
        ([(7, -0.7, TOP)], [7], "stop", "disagrees with its alternatives"),
        ([(3, -1.5, TOP)], [3], "stop", "generated token 3 at position 0 with a logprob of -1.5 below"),
        ([(11, -3.0, TOP)], [11], "stop", "not a greedy step"),  # not listed, below the best
        ([(7, -0.5, [(7, -0.5), (3,), (9, -2.5)])], [7], "stop", "unexpected shape"),
    ],
)
def test_the_checker_refuses_what_is_not_a_greedy_raw_generation(
    answered: Any, tokens: Any, finish: Any, match: str
) -> None:
    with pytest.raises(InvalidResponse, match=match) as err:
        check_decoded(answered, tokens, finish, "candidate", top_k=3, max_tokens=2)
    assert "the candidate server" in str(err.value)


def test_decode_prompt_refuses_the_callers_mistakes() -> None:
    assert decode_prompt((1, 2), max_tokens=1, top_k=1) == [1, 2]
    for prompt, max_tokens, top_k in (([], 4, 4), ([1], 0, 4), ([1], 4, 0)):
        with pytest.raises(ValueError, match=r"prompt|max_tokens"):
            decode_prompt(prompt, max_tokens=max_tokens, top_k=top_k)


# -- what the fake model generates, in each engine's layout -----------------------------------------
def generated(prompt: list[int], max_tokens: int, top_k: int, eos: int | None = None) -> Decoded:
    scorer = FakeScorer(FakeEngine(eos=eos), "double", "double")
    return asyncio.run(scorer.decode_distributions(prompt, max_tokens=max_tokens, top_k=top_k))


def sglang_result(d: Decoded, prompt: list[int], max_tokens: int) -> dict[str, Any]:
    """A ``/generate`` result as SGLang 0.5.23 writes one (``TokenizerManager._handle_batch_output``
    and ``add_logprob_to_meta_info``: ``[logprob, id, text]`` triples with text None, per-token top
    lists; ``FINISH_LENGTH.to_json`` / ``FINISH_MATCHED_TOKEN.to_json`` as the finish reason; no
    prompt position scored with ``logprob_start_len`` -1)."""
    n = len(d.tokens)
    finish = (
        {"type": "length", "length": max_tokens}
        if d.finish_reason == "length"
        else {"type": "stop", "matched": d.tokens[-1]}
    )
    meta = {
        "id": "9f1c",
        "finish_reason": finish,
        "prompt_tokens": len(prompt),
        "weight_version": "default",
        "num_retractions": 0,
        "input_token_logprobs": [],
        "output_token_logprobs": [[lp, t, None] for t, (lp, _) in zip(d.tokens, d.positions, strict=True)],
        "output_token_logprobs_length": n,
        "input_top_logprobs": [],
        "output_top_logprobs": [[[v, t, None] for t, v in top] for _, top in d.positions],
        "reasoning_tokens": 0,
        "completion_tokens": n,
        "cached_tokens": 0,
    }
    return {"text": "x" * n, "output_ids": list(d.tokens), "meta_info": meta}


def vllm_result(d: Decoded, prompt: list[int], top_k: int, *, extra: bool = False) -> dict[str, Any]:
    """A ``/v1/completions`` answer as vLLM 0.33.0 writes one with ``return_tokens_as_token_ids`` and
    ``return_token_ids`` (``_create_completion_logprobs``: the first k + 1 entries of the position's
    dict, which ``append_logprobs_for_next_position`` fills with the sampled token first, then the top
    k). ``extra`` drops the sampled token from each position's top k, as a tie at the k-th place
    would, so the dict has k + 1 entries."""
    tops = []
    for tok, (lp, top) in zip(d.tokens, d.positions, strict=True):
        ranked = [p for p in top if p[0] != tok][:top_k] if extra else list(top)
        step = {tok: lp} | dict(ranked)
        tops.append({f"token_id:{t}": max(v, -9999.0) for t, v in list(step.items())[: top_k + 1]})
    lps = {
        "text_offset": list(range(len(d.tokens))),
        "token_logprobs": [lp for lp, _ in d.positions],
        "tokens": [f"token_id:{t}" for t in d.tokens],
        "top_logprobs": tops,
    }
    choice = {
        "index": 0,
        "text": "x" * len(d.tokens),
        "logprobs": lps,
        "finish_reason": d.finish_reason,
        "stop_reason": None,
        "token_ids": list(d.tokens),
        "prompt_logprobs": None,
        "prompt_token_ids": list(prompt),
    }
    return vllm_answer(choice, prompt_tokens=len(prompt), completion_tokens=len(d.tokens))


def llama_result(d: Decoded) -> dict[str, Any]:
    """A ``/v1/completions`` answer as llama-server writes one (``completion_token_output::to_json``
    with post_sampling_probs false: id, token, bytes, logprob, top_logprobs of the same keys)."""
    piece = {"token": "x", "bytes": [120]}
    content = [
        {"id": t, **piece, "logprob": lp, "top_logprobs": [{"id": a, **piece, "logprob": v} for a, v in top]}
        for t, (lp, top) in zip(d.tokens, d.positions, strict=True)
    ]
    choice = {"text": "x", "index": 0, "logprobs": {"content": content}, "finish_reason": d.finish_reason}
    return {"choices": [choice], "object": "text_completion"}


# -- SGLang ------------------------------------------------------------------------------------------
def test_sglang_payload_asks_for_output_logprobs_only() -> None:
    body = sglang_payload((5, 6), max_tokens=8, top_k=4)
    # GenerateReqInput (sglang/srt/managers/io_struct.py): return_logprob, logprob_start_len ("-1 ...
    # will only return logprobs for output tokens"), top_logprobs_num; SamplingParams
    # (sglang/srt/sampling/sampling_params.py): max_new_tokens, temperature, the penalties
    assert body == {
        "input_ids": [5, 6],
        "sampling_params": {
            "max_new_tokens": 8,
            "temperature": 0.0,
            "repetition_penalty": 1.0,
            "frequency_penalty": 0.0,
            "presence_penalty": 0.0,
            "min_new_tokens": 0,
        },
        "return_logprob": True,
        "logprob_start_len": -1,
        "top_logprobs_num": 4,
    }


def test_sglang_payload_passes_sglangs_own_contract_check() -> None:
    """SGLang 0.5.23's ``generate_contract_error`` (sglang/srt/entrypoints/api_contract.py, what
    ``http_server.generate_request`` runs) accepts the body and refuses an unknown sampling field;
    from the parser install (``evalgate setup --parsers``), in a child: it imports SGLang."""
    from evalgate.engines.sglang import parser_dir

    if not (parser_dir() / "sglang" / "srt" / "entrypoints" / "api_contract.py").is_file():
        pytest.skip("SGLang's parser install is absent (`evalgate setup --parsers`)")
    body = sglang_payload([5, 6], max_tokens=8, top_k=4)
    bad = {**body, "sampling_params": {**body["sampling_params"], "max_tokens": 8}}
    code = (
        "import json, sys; sys.path.insert(0, sys.argv[1]);"
        "from sglang.srt.entrypoints.api_contract import generate_contract_error as g;"
        "print(json.dumps([g(json.loads(b)) for b in sys.argv[2:]]))"
    )
    argv = [sys.executable, "-c", code, str(parser_dir()), json.dumps(body), json.dumps(bad)]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    ok, refused = json.loads(proc.stdout.splitlines()[-1])
    assert ok is None and "unknown field `max_tokens`" in refused


def test_sglang_reads_each_generated_token_and_its_top_k() -> None:
    d = generated(PROMPT, 6, 5)
    assert sglang_read(sglang_result(d, PROMPT, 6), max_tokens=6, top_k=5, server="baseline") == d
    assert sglang_read([sglang_result(d, PROMPT, 6)], max_tokens=6, top_k=5) == d  # a batch of one
    out = sglang_result(d, PROMPT, 6)
    del out["output_ids"]  # the ids of the logprob entries then
    assert sglang_read(out, max_tokens=6, top_k=5) == d


@pytest.mark.skipif(not FIXTURES.is_dir(), reason="no captured SGLang answer")
def test_sglang_reads_a_real_answer() -> None:
    """An answer of real SGLang 0.5.23 on the CPU (SmolLM2-135M), captured by
    tests/e2e/test_e2e_decode_sglang_cpu.py with the body it answered."""
    sent = json.loads((FIXTURES / "request.json").read_text())
    out = json.loads((FIXTURES / "response.json").read_text())
    max_tokens, k = sent["sampling_params"]["max_new_tokens"], sent["top_logprobs_num"]
    d = sglang_read(out, max_tokens=max_tokens, top_k=k, server="real")
    assert list(d.tokens) == out["output_ids"] and len(d.positions) == len(d.tokens)
    assert all(top[0][0] == tok for tok, (_, top) in zip(d.tokens, d.positions, strict=True))
    assert out["meta_info"]["input_token_logprobs"] in ([], None)  # no prompt position scored


def test_sglang_answers_that_do_not_line_up_are_invalid() -> None:
    d = generated(PROMPT, 4, 3)
    out = sglang_result(d, PROMPT, 4)
    out["meta_info"]["output_top_logprobs"].pop()
    with pytest.raises(InvalidResponse, match="4 output logprobs and 3 top lists for 4 generated"):
        sglang_read(out, max_tokens=4, top_k=3, server="candidate")
    out = sglang_result(d, PROMPT, 4)
    out["output_ids"][1] += 1
    with pytest.raises(InvalidResponse, match=r"at position 1 where .* was generated"):
        sglang_read(out, max_tokens=4, top_k=3, server="candidate")
    out = sglang_result(d, PROMPT, 4)
    out["meta_info"]["finish_reason"] = {"type": "abort", "message": "x", "status_code": 400}
    with pytest.raises(InvalidResponse, match="finish reason 'abort'"):
        sglang_read(out, max_tokens=4, top_k=3, server="candidate")
    out["meta_info"]["finish_reason"] = {"type": "stop", "matched": "NaN happened"}
    with pytest.raises(InvalidResponse, match="NaN logits"):
        sglang_read(out, max_tokens=4, top_k=3, server="candidate")
    with pytest.raises(InvalidResponse, match="unexpected shape"):
        sglang_read({"meta_info": {"output_token_logprobs": [[-0.1]]}}, max_tokens=4, top_k=3)


# -- vLLM --------------------------------------------------------------------------------------------
def test_vllm_payload_generates_greedily_with_ids_for_tokens() -> None:
    # CompletionRequest (vllm/entrypoints/openai/completion/protocol.py, 0.33.0): logprobs,
    # return_tokens_as_token_ids, return_token_ids, the penalties of _DEFAULT_SAMPLING_PARAMS
    assert vllm_payload([5, 6], max_tokens=8, top_k=4, model="m") == {
        "model": "m",
        "prompt": [5, 6],
        "max_tokens": 8,
        "temperature": 0.0,
        "logprobs": 4,
        "return_tokens_as_token_ids": True,
        "return_token_ids": True,
        "repetition_penalty": 1.0,
        "frequency_penalty": 0.0,
        "presence_penalty": 0.0,
    }
    assert "model" not in vllm_payload([5], max_tokens=1, top_k=1, model=None)
    assert "echo" not in vllm_payload([5], max_tokens=1, top_k=1, model=None)  # no prompt logprobs


@pytest.mark.parametrize("extra", [False, True])
def test_vllm_reads_the_k_best_of_each_top_dict(extra: bool) -> None:
    d = generated(PROMPT, 6, 5)
    got = vllm_read(vllm_result(d, PROMPT, 5, extra=extra), max_tokens=6, top_k=5, server="baseline")
    assert got.tokens == d.tokens and got.finish_reason == "length"
    if not extra:
        assert got == d
    else:  # k + 1 entries: the sampled token (the best) and the k after it, cut to the k best
        assert all(
            top == ((tok, lp), *ref[1][1:5])
            for tok, (lp, top), ref in zip(d.tokens, got.positions, d.positions, strict=True)
        )


VLLM_WROTE = (
    '{"id":"cmpl-0","object":"text_completion","created":0,"model":"m","choices":[{"index":0,"text":"ab",'
    '"logprobs":{"text_offset":[0,11],"token_logprobs":[-0.25,-1.25],"tokens":["token_id:10","token_id:20"],'
    '"top_logprobs":[{"token_id:10":-0.25,"token_id:11":-1.75},{"token_id:20":-1.25,"token_id:21":-1.25,'
    '"token_id:22":-1.25}]},"finish_reason":"length","stop_reason":null,"token_ids":[10,20],'
    '"prompt_logprobs":null,"prompt_token_ids":[5,6],"routed_experts":null,"weight_versions":null}],'
    '"service_tier":null,"system_fingerprint":null,"usage":{"prompt_tokens":2,"total_tokens":4,'
    '"completion_tokens":2,"prompt_tokens_details":null,"completion_tokens_details":null},'
    '"kv_transfer_params":null,"ec_transfer_params":null,"metrics":null}'
)
"""An answer vLLM 0.33.0's own code wrote (``append_logprobs_for_next_position`` per step, then
``OpenAIServingCompletion._create_completion_logprobs`` with ``return_as_token_id`` and
``CompletionResponse.model_dump_json``), k = 2: step 0 sampled 10 inside the top 2 (2 entries),
step 1 sampled 20 of a three-way tie at rank 3, outside the top 2 that ``topk`` picked (3 entries)."""


def test_vllm_reads_an_answer_vllm_itself_wrote() -> None:
    d = vllm_read(json.loads(VLLM_WROTE), max_tokens=2, top_k=2, server="baseline")
    assert d == Decoded(
        (10, 20), ((-0.25, ((10, -0.25), (11, -1.75))), (-1.25, ((20, -1.25), (21, -1.25)))), "length"
    )


def test_vllm_answers_that_are_not_ids_or_do_not_line_up_are_invalid() -> None:
    d = generated(PROMPT, 3, 2)
    out = vllm_result(d, PROMPT, 2)
    out["choices"][0]["logprobs"]["tokens"][0] = "Hello"
    with pytest.raises(InvalidResponse, match="not 'token_id:N'"):
        vllm_read(out, max_tokens=3, top_k=2, server="candidate")
    out = vllm_result(d, PROMPT, 2)
    out["choices"][0]["token_ids"] = [1, 2, 3]
    with pytest.raises(InvalidResponse, match="token_ids that are not the tokens"):
        vllm_read(out, max_tokens=3, top_k=2, server="candidate")
    out = vllm_result(d, PROMPT, 2)
    out["choices"][0]["logprobs"]["top_logprobs"].pop()
    with pytest.raises(InvalidResponse, match="3 logprobs and 2 top lists for 3 generated"):
        vllm_read(out, max_tokens=3, top_k=2, server="candidate")
    out = vllm_result(d, PROMPT, 2)
    out["choices"][0]["finish_reason"] = "repetition"
    with pytest.raises(InvalidResponse, match="finish reason 'repetition'"):
        vllm_read(out, max_tokens=3, top_k=2, server="candidate")
    out = vllm_result(d, PROMPT, 2)
    out["choices"][0]["logprobs"], out["choices"][0]["token_ids"] = None, None  # logprobs ignored
    with pytest.raises(InvalidResponse, match="generated 0 tokens"):
        vllm_read(out, max_tokens=3, top_k=2, server="candidate")
    with pytest.raises(InvalidResponse, match="no choice"):
        vllm_read({"choices": []}, max_tokens=3, top_k=2, server="candidate")


# -- llama.cpp ---------------------------------------------------------------------------------------
def test_llama_reads_a_greedy_generation() -> None:
    d = generated(PROMPT, 5, 4, eos=None)
    assert llama_read(llama_result(d), "baseline", max_tokens=5, top_k=4) == d
    bad = llama_result(d)
    del bad["choices"][0]["logprobs"]["content"][2]["id"]
    with pytest.raises(InvalidResponse, match="unexpected shape"):
        llama_read(bad, "baseline", max_tokens=5, top_k=4)


# -- each scorer against a double of its server -------------------------------------------------------
class Double:
    """One server answering from the fake model in ``layout``, recording every body and header."""

    def __init__(self, layout: str) -> None:
        self.layout, self.seen, self.headers = layout, list[dict[str, Any]](), list[dict[str, str]]()

    async def answer(self, request: web.Request) -> web.Response:
        body = await request.json()
        self.seen.append(body)
        self.headers.append(dict(request.headers))
        fake = FakeScorer(FakeEngine(), "double", "double")
        if self.layout == "sglang":
            ids, sp = body["input_ids"], body["sampling_params"]
            if sp["max_new_tokens"] == 0:  # token_distributions: prompt positions from logprob_start_len + 1
                start = body["logprob_start_len"] + 1
                pos = await fake.token_distributions(ids, start=start, top_k=body["top_logprobs_num"])
                entries = [[None, ids[start - 1], None]] + [
                    [lp, t, None] for t, (lp, _) in zip(ids[start:], pos, strict=True)
                ]
                tops = [None] + [[[v, a, None] for a, v in top] for _, top in pos]
                return web.json_response(
                    {"text": "", "meta_info": {"input_token_logprobs": entries, "input_top_logprobs": tops}}
                )
            d = await fake.decode_distributions(
                ids, max_tokens=sp["max_new_tokens"], top_k=body["top_logprobs_num"]
            )
            return web.json_response(sglang_result(d, ids, sp["max_new_tokens"]))
        k = int(body["logprobs"])
        d = await fake.decode_distributions(body["prompt"], max_tokens=body["max_tokens"], top_k=k)
        return web.json_response(
            vllm_result(d, body["prompt"], k) if self.layout == "vllm" else llama_result(d)
        )

    async def models(self, request: web.Request) -> web.Response:
        self.headers.append(dict(request.headers))
        return web.json_response({"object": "list", "data": [{"id": "m", "max_model_len": 2048}]})

    async def teapot(self, request: web.Request) -> web.Response:
        return web.Response(status=418, text="short and stout")

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_post("/generate", self.answer)
        app.router.add_post("/v1/completions", self.answer)
        app.router.add_get("/v1/models", self.models)
        app.router.add_post("/teapot", self.teapot)
        return app


@pytest.fixture
def serve() -> Iterator[Callable[[str], tuple[Double, str]]]:
    apps = background_apps()
    start = next(apps)

    def up(layout: str) -> tuple[Double, str]:
        double = Double(layout)
        return double, start(double.app())

    yield up
    apps.close()


SCORERS: dict[str, Callable[[ServerHandle], Scorer]] = {
    "sglang": lambda h: SGLangScorer(h, concurrency=1),
    "vllm": lambda h: VLLMScorer(h, concurrency=1),
    "llamacpp": lambda h: LlamaCppScorer(h, concurrency=1, cache_prompt=False),
}


def handle(url: str) -> ServerHandle:
    return ServerHandle("double", url, "sekrit", ["server"], Path("/dev/null"))


def on(scorer: Scorer, call: Callable[[Scorer], Any]) -> Any:
    async def go() -> Any:
        try:
            return await call(scorer)
        finally:
            await scorer.aclose()

    return asyncio.run(go())


@pytest.mark.parametrize("layout", list(SCORERS))
def test_every_scorer_reads_back_what_the_model_generated(
    layout: str, serve: Callable[[str], tuple[Double, str]]
) -> None:
    double, url = serve(layout)
    got = on(SCORERS[layout](handle(url)), lambda s: s.decode_distributions(PROMPT, max_tokens=7, top_k=5))
    assert got == generated(PROMPT, 7, 5)
    (body,) = double.seen
    assert body == {
        "sglang": sglang_payload(PROMPT, max_tokens=7, top_k=5),
        "vllm": vllm_payload(PROMPT, max_tokens=7, top_k=5, model=None),
    }.get(layout, body)
    if layout == "llamacpp":
        assert body["prompt"] == PROMPT and body["n_probs"] == body["logprobs"] == 5
        assert body["post_sampling_probs"] is False and body["temperature"] == 0.0 and "grammar" not in body
    with pytest.raises(ValueError, match="top_k"):
        on(SCORERS[layout](handle(url)), lambda s: s.decode_distributions(PROMPT, max_tokens=7, top_k=0))


def test_vllm_over_its_max_logprobs_names_the_flag() -> None:
    async def refuse(request: web.Request) -> web.Response:
        msg = "Requested sample logprobs of 30, which is greater than max allowed: 20"
        return web.json_response(
            {"error": {"message": msg, "type": "BadRequestError", "code": 400}}, status=400
        )

    app = web.Application()
    app.router.add_post("/v1/completions", refuse)
    apps = background_apps()
    try:
        url = next(apps)(app)
        with pytest.raises(RequestFailed, match="greater than max allowed: 20") as err:
            on(
                VLLMScorer(handle(url), concurrency=1),
                lambda s: s.decode_distributions([1], max_tokens=2, top_k=30),
            )
    finally:
        apps.close()
    assert "--max-logprobs 30" in err.value.fix and "[suites.drift] top_k to 20" in err.value.fix


# -- which path each scorer's teacher forcing measures -----------------------------------------------
def test_forced_path_is_decode_only_where_forcing_generates() -> None:
    h = handle("http://127.0.0.1:9")
    llama, sglang, vllm = (SCORERS[n](h) for n in ("llamacpp", "sglang", "vllm"))
    assert (llama.forced_path, sglang.forced_path, vllm.forced_path) == ("decode", "prefill", "prefill")
    assert FakeScorer(FakeEngine(), "a", "a").forced_path == "prefill"
    assert ShardedScorer([llama, SCORERS["llamacpp"](h)], ["a", "b"]).forced_path == "decode"
    assert ShardedScorer([sglang], ["a"]).forced_path == "prefill"
    assert GatewayScorer(llama, {"w": SCORERS["llamacpp"](h)}).forced_path == "decode"
    assert GatewayScorer(vllm, {"w": SCORERS["vllm"](h)}).forced_path == "prefill"
    with pytest.raises(ValueError, match="different paths"):
        ShardedScorer([llama, sglang], ["a", "b"])

    async def close() -> None:
        for s in (llama, sglang, vllm):
            await s.aclose()

    asyncio.run(close())


def test_sharded_and_gateway_scorers_route_a_prompt_like_its_forced_positions() -> None:
    engine = FakeEngine(urls=3)
    shards = [FakeScorer(engine, "arm", f"arm/{i}") for i in range(3)]
    sharded = ShardedScorer(shards, [s.url for s in shards])
    prompts = [[i, i + 1, i + 2] for i in range(12)]
    for p in prompts:
        assert asyncio.run(sharded.decode_distributions(p, max_tokens=2, top_k=3)) == generated(p, 2, 3)
        asyncio.run(sharded.token_distributions(p, start=1, top_k=3))
    by_kind: dict[str, dict[str, str]] = {}
    for c in engine.calls:
        by_kind.setdefault(c.kind, {})[c.prompt] = c.url
    assert by_kind["decode_distributions"] == by_kind["token_distributions"]  # same key, same URL
    assert len(set(by_kind["decode_distributions"].values())) > 1  # and spread over the URLs

    class Keyed(FakeScorer):
        async def decode_distributions(self, prompt: Any, *, max_tokens: int, top_k: int) -> Decoded:
            keys.append(ROUTING_KEY.get())
            return await super().decode_distributions(prompt, max_tokens=max_tokens, top_k=top_k)

    keys: list[str | None] = []
    through = Keyed(FakeEngine(), "arm", "gateway")
    gateway = GatewayScorer(through, {"w": FakeScorer(FakeEngine(), "arm", "w")})
    assert asyncio.run(gateway.decode_distributions([1, 2], max_tokens=2, top_k=3)) == generated([1, 2], 2, 3)
    assert keys == [repr([1, 2])] and ROUTING_KEY.get() is None  # the item's key, then none


# -- the fake engine's decode path ----------------------------------------------------------------------
def test_the_fake_decode_path_reads_the_teacher_forced_model() -> None:
    engine = FakeEngine()
    scorer = FakeScorer(engine, "baseline", "baseline")
    d = asyncio.run(scorer.decode_distributions(PROMPT, max_tokens=6, top_k=4))
    forced = asyncio.run(scorer.token_distributions(PROMPT + list(d.tokens), start=len(PROMPT), top_k=4))
    assert list(d.positions) == forced and d.finish_reason == "length" and len(d.tokens) == 6
    assert check_decoded([(t, lp, top) for t, (lp, top) in zip(d.tokens, d.positions, strict=True)], d.tokens,
                         d.finish_reason, "fake", top_k=4, max_tokens=6) == d  # fmt: skip
    assert engine.calls[0].kind == "decode_distributions" and engine.calls[0].prompt == "11,12,13,14,15"
    stop = asyncio.run(
        FakeScorer(FakeEngine(eos=d.tokens[2]), "b", "b").decode_distributions(PROMPT, max_tokens=6, top_k=4)
    )
    assert stop.tokens == d.tokens[:3] and stop.finish_reason == "stop"


def test_decode_drift_moves_the_candidates_decode_path_only_from_its_position() -> None:
    engine = FakeEngine(decode_drift=decode_drift_from("candidate", 3, 2.0))
    base, cand = FakeScorer(engine, "baseline", "b"), FakeScorer(engine, "candidate", "c")

    async def go(s: FakeScorer) -> tuple[Decoded, Any]:
        return await s.decode_distributions(PROMPT, max_tokens=8, top_k=5), await s.token_distributions(
            [*PROMPT, 1, 2, 3, 4, 5, 6], start=2, top_k=5
        )

    (db, tb), (dc, tc) = asyncio.run(go(base)), asyncio.run(go(cand))
    assert tb == tc  # the prefill path is exact
    assert db.positions[:3] == dc.positions[:3] and db.tokens[:3] == dc.tokens[:3]
    assert all(a != b for a, b in zip(db.positions[3:], dc.positions[3:], strict=False))
    assert db == generated(PROMPT, 8, 5)  # the baseline is the undisturbed model


# -- the decode proxy ------------------------------------------------------------------------------
def test_shift_top_moves_mass_from_the_best_to_the_second_keeping_order_and_sum() -> None:
    top = [(7, math.log(0.6)), (3, math.log(0.2)), (9, math.log(0.1))]
    new = shift_top(top, 0.5)
    assert [t for t, _ in new] == [7, 3, 9]
    assert [math.exp(v) for _, v in new] == pytest.approx([0.5, 0.3, 0.1])
    assert math.exp(shift_top([(7, math.log(0.6))], 0.5)[0][1]) == pytest.approx(0.45)


@pytest.mark.parametrize("layout", ["sglang", "vllm"])
def test_the_proxy_changes_generated_positions_from_n_on_and_nothing_else(
    layout: str, serve: Callable[[str], tuple[Double, str]]
) -> None:
    double, url = serve(layout)
    direct = on(SCORERS[layout](handle(url)), lambda s: s.decode_distributions(PROMPT, max_tokens=6, top_k=4))
    with decode_proxy(url, from_position=2) as proxy:
        through = on(
            SCORERS[layout](handle(proxy.url)),
            lambda s: s.decode_distributions(PROMPT, max_tokens=6, top_k=4),
        )
        assert proxy.perturbed == 4 and proxy.requests[-1][0] == "POST"
        if layout == "sglang":  # the prompt side (max_new_tokens 0) comes back exact
            forced = [on(SCORERS[layout](handle(u)), lambda s: s.token_distributions(PROMPT, start=1, top_k=4))
                      for u in (url, proxy.url)]  # fmt: skip
            assert forced[0] == forced[1] and proxy.perturbed == 4
    assert through.tokens == direct.tokens and through.positions[:2] == direct.positions[:2]
    for (lp, top), (_, top0) in zip(through.positions[2:], direct.positions[2:], strict=True):
        assert [t for t, _ in top] == [t for t, _ in top0] and top[0][1] < top0[0][1] and lp == top[0][1]
    assert double.headers[-1]["Authorization"] == "Bearer sekrit"


def test_the_proxy_passes_every_other_request_through(serve: Callable[[str], tuple[Double, str]]) -> None:
    double, url = serve("vllm")
    echo = vllm_payload(PROMPT, max_tokens=3, top_k=2, model=None) | {"echo": True}

    async def go(base: str) -> list[Any]:
        async with aiohttp.ClientSession(headers={"Authorization": "Bearer k"}) as s:
            async with s.get(base + "/v1/models?x=1") as r:
                models = (r.status, await r.json())
            async with s.post(base + "/teapot", data=b"{}") as r:
                teapot = (r.status, await r.text())
            async with s.post(base + "/v1/completions", json=echo) as r:
                completion = await r.json()
            return [models, teapot, completion]

    with decode_proxy(url, from_position=0) as proxy:
        models, teapot, completion = asyncio.run(go(proxy.url))
    assert models == (200, {"object": "list", "data": [{"id": "m", "max_model_len": 2048}]})
    assert teapot == (418, "short and stout") and double.headers[0]["Authorization"] == "Bearer k"
    assert ("GET", "/v1/models") in proxy.requests
    # the double does not echo, so with echo the proxy takes its first len(prompt) positions as the
    # prompt's: with 3 generated they are all "prompt" and none is changed
    assert proxy.perturbed == 0 and completion == vllm_result(generated(PROMPT, 3, 2), PROMPT, 2)
    with pytest.raises(ValueError, match="loopback"):
        with decode_proxy("http://example.com", from_position=1):
            pass
