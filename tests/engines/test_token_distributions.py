"""``Scorer.token_distributions`` on every engine without a model: the shared checker
(``engines._scoring.check_positions``), the request each engine sends and how it reads the answer
laid out as that engine's own source lays it out. The real numbers are checked end to end in
tests/e2e/test_e2e_distributions.py (llama-server) and test_e2e_sglang_cpu.py (SGLang)."""

from __future__ import annotations

import asyncio
import math
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from evalgate.engines import ServerHandle
from evalgate.engines._scoring import check_positions, forced_split
from evalgate.engines.fake import UNKNOWN_LOGPROB, FakeEngine, FakeScorer
from evalgate.engines.llamacpp import LlamaCppScorer
from evalgate.engines.llamacpp._scorer import UPGRADE_ATTACHED, read_forced_positions
from evalgate.engines.sglang import SGLangScorer
from evalgate.engines.sglang._scorer import distributions_payload
from evalgate.engines.sglang._scorer import read_positions as sglang_read
from evalgate.engines.vllm import VLLMScorer
from evalgate.engines.vllm._scorer import distributions_payload as distributions_payload_vllm
from evalgate.engines.vllm._scorer import read_positions as vllm_read
from evalgate.errors import InvalidResponse
from tests.helpers.background import background_apps

TOP = [(7, -0.5), (3, -1.5), (9, -2.5)]


# -- the shared checker ------------------------------------------------------------------------------
def test_checked_positions_keep_the_forced_logprob_and_the_top_list() -> None:
    answered = [(3, -1.5, TOP), (None, -4.0, [[7, -0.5], [3, -1.5], [9, -2.5]])]
    assert check_positions(answered, [3, 11], "candidate", top_k=3) == [
        (-1.5, ((7, -0.5), (3, -1.5), (9, -2.5))),
        (-4.0, ((7, -0.5), (3, -1.5), (9, -2.5))),
    ]


@pytest.mark.parametrize(
    ("answered", "match"),
    [
        ([(3, -1.5, TOP)], "1 positions for 2 forced tokens"),
        ([(4, -1.5, TOP), (3, -1.5, TOP)], "token 4 at position 0 where 3 was forced"),
        ([(3, float("nan"), TOP), (3, -1.5, TOP)], "not a finite number"),
        ([(3, 0.5, TOP), (3, -1.5, TOP)], "not a finite number"),
        ([(3, None, TOP), (3, -1.5, TOP)], "logprob of null"),
        ([(3, -1.5, TOP[:2]), (3, -1.5, TOP)], "2 alternatives at position 0 where 3"),
        ([(3, -1.5, None), (3, -1.5, TOP)], "null alternatives"),
        ([(3, -1.5, [(7, -0.5), ("3", -1.5), (9, -2.5)]), (3, -1.5, TOP)], "token id of a str"),
        ([(3, -1.5, [(7, -0.5), (True, -1.5), (9, -2.5)]), (3, -1.5, TOP)], "token id of True"),
        ([(3, -1.5, [(7, -0.5), (3, -1.5), (9, float("-inf"))]), (3, -1.5, TOP)], "not a finite"),
        ([(3, -1.5, [(7, -0.5), (3, -1.5), (7, -2.5)]), (3, -1.5, TOP)], "a token twice"),
        ([(3, -1.5, [(3, -1.5), (7, -0.5), (9, -2.5)]), (3, -1.5, TOP)], "out of order"),
        ([(3, -0.1, [(7, -0.1), (3, -0.1), (9, -0.1)]), (3, -1.5, TOP)], "sum above 1"),
        ([(3, -1.0, TOP), (3, -1.5, TOP)], "disagrees with its alternatives"),
        ([(3, -1.5, TOP), (11, 0.0, TOP)], "disagrees with its alternatives"),  # 0 outside the top k
        ([(3, -1.5, [(7, -0.5), (3,), (9, -2.5)]), (3, -1.5, TOP)], "unexpected shape"),
    ],
)
def test_the_checker_refuses_what_is_not_one_distribution(answered: Any, match: str) -> None:
    with pytest.raises(InvalidResponse, match=match) as err:  # position 0 fails first but in two
        check_positions(answered, [3, 11], "candidate", top_k=3)
    assert "the candidate server" in str(err.value)


def test_forced_split_refuses_the_callers_mistakes() -> None:
    assert forced_split([1, 2, 3], 1, 5) == ([1], [2, 3])
    assert forced_split([1, 2, 3], 3, 5) == ([1, 2, 3], [])
    for start, top_k in ((0, 5), (4, 5), (1, 0)):
        with pytest.raises(ValueError, match=r"start|top_k"):
            forced_split([1, 2, 3], start, top_k)


# -- llama.cpp: the token-id grammar forces the text, n_probs reports the raw logits' top k ----------
def llama_entry(tok: int, logprob: float, top: list[tuple[int, float]]) -> dict[str, Any]:
    """One ``logprobs.content`` entry as llama-server writes it (server-task.cpp,
    ``completion_token_output::to_json`` with post_sampling_probs false): id, token, bytes, logprob,
    top_logprobs of the same keys. Numbers from a real SmolLM2 answer, where the forced token is
    not always the top one."""
    piece = {"token": "x", "bytes": [120]}
    return {
        "id": tok,
        **piece,
        "logprob": logprob,
        "top_logprobs": [{"id": t, **piece, "logprob": lp} for t, lp in top],
    }


LLAMA_CONTENT = [
    llama_entry(4649, -2.440122, [(260, -2.179193), (4649, -2.440122), (7476, -3.484821)]),
    llama_entry(1589, -5.221, [(198, -0.875), (29, -2.219), (26, -2.456)]),
]


def test_llama_reads_each_forced_token_and_its_top_k() -> None:
    data = {"choices": [{"text": "", "logprobs": {"content": LLAMA_CONTENT}}]}
    positions = read_forced_positions(data, [4649, 1589], "baseline", top_k=3)
    assert positions[0] == (-2.440122, ((260, -2.179193), (4649, -2.440122), (7476, -3.484821)))
    assert positions[1][0] == -5.221 and positions[1][1][0] == (198, -0.875)


def test_llama_too_few_entries_names_the_grammar_upgrade() -> None:
    data = {"choices": [{"text": "", "logprobs": {"content": LLAMA_CONTENT[:1]}}]}
    with pytest.raises(InvalidResponse, match=r"1 logprobs for 2 forced tokens.*upgrade the llama-server"):
        read_forced_positions(data, [4649, 1589], "baseline", top_k=3, upgrade=UPGRADE_ATTACHED)
    with pytest.raises(InvalidResponse, match="no choice"):
        read_forced_positions({"choices": []}, [4649], "baseline", top_k=3)


@pytest.fixture
def llama(tmp_path: Path) -> Iterator[tuple[ServerHandle, list[dict[str, Any]]]]:
    """A llama-server double that honours the grammar: it 'generates' the forced ids it parses
    from ``root ::= <[a]> <[b]> ...`` and reports a fixed distribution per position."""
    seen: list[dict[str, Any]] = []

    async def completions(request: web.Request) -> web.Response:
        body = await request.json()
        seen.append(body)
        forced = [int(t.strip("<[]>")) for t in body["grammar"].removeprefix("root ::= ").split()]
        k = int(body["n_probs"])
        content = []
        for i, tok in enumerate(forced):
            top = [(100 + j, math.log(0.5 / 2**j)) for j in range(k)]
            content.append(llama_entry(tok, math.log(0.5 / 2**k) - i, top))
        return web.json_response({"choices": [{"text": "", "logprobs": {"content": content}}]})

    app = web.Application()
    app.router.add_post("/v1/completions", completions)
    apps = background_apps()
    url = next(apps)(app)
    yield ServerHandle("double", url, "key", ["llama-server"], tmp_path / "log"), seen
    apps.close()


def test_llama_token_distributions_sends_the_split_and_reads_the_answer(llama: Any) -> None:
    handle, seen = llama

    async def go() -> Any:
        scorer = LlamaCppScorer(handle, concurrency=1, cache_prompt=False)
        try:
            return (
                await scorer.token_distributions([5, 6, 7, 8], start=2, top_k=4),
                await scorer.token_distributions([5, 6], start=2, top_k=4),
            )
        finally:
            await scorer.aclose()

    positions, none = asyncio.run(go())
    assert none == [] and len(seen) == 1  # nothing forced: no request
    body = seen[0]
    assert body["prompt"] == [5, 6] and body["grammar"] == "root ::= <[7]> <[8]>"
    assert body["max_tokens"] == 2 and body["temperature"] == 0.0 and body["cache_prompt"] is False
    assert body["n_probs"] == body["logprobs"] == 4 and body["post_sampling_probs"] is False
    assert [lp for lp, _ in positions] == pytest.approx([math.log(0.5 / 16), math.log(0.5 / 16) - 1])
    assert [t for t, _ in positions[0][1]] == [100, 101, 102, 103]


# -- SGLang: /generate with max_new_tokens 0, input_top_logprobs per position -----------------------
def double(path: str, answer: Any) -> Iterator[tuple[ServerHandle, list[dict[str, Any]]]]:
    """A server answering POST ``path`` with ``answer(body)``, recording every body."""
    seen: list[dict[str, Any]] = []

    async def route(request: web.Request) -> web.Response:
        body = await request.json()
        seen.append(body)
        return web.json_response(answer(body))

    app = web.Application()
    app.router.add_post(path, route)
    apps = background_apps()
    url = next(apps)(app)
    yield ServerHandle("double", url, "key", ["server"], Path("/dev/null")), seen
    apps.close()


def top_of(i: int, k: int) -> list[tuple[int, float]]:
    """Position i's top k: ids 100.. with probabilities 1/2, 1/4, ... (logprobs best first)."""
    return [(100 + j, math.log(0.5 / 2**j) - 0.01 * i) for j in range(k)]


def sglang_meta(ids: list[int], start_len: int, k: int) -> dict[str, Any]:
    """A /generate result laid out as SGLang 0.5.23 writes it (TokenizerManager: ``[logprob, id,
    text]`` triples, text None; the first position None in both lists): every forced token is
    outside its top k, so its logprob is below all of them."""
    entries: list[Any] = [[None, ids[start_len], None]]
    tops: list[Any] = [None]
    for i, t in enumerate(ids[start_len + 1 :]):
        entries.append([math.log(0.5 / 2**k) - i, t, None])
        tops.append([[lp, tok, None] for tok, lp in top_of(i, k)])
    return {"text": "", "meta_info": {"input_token_logprobs": entries, "input_top_logprobs": tops}}


@pytest.fixture
def sglang() -> Iterator[tuple[ServerHandle, list[dict[str, Any]]]]:
    yield from double(
        "/generate",
        lambda b: sglang_meta(b["input_ids"], b["logprob_start_len"], b["top_logprobs_num"]),
    )


def test_sglang_token_distributions_drops_the_leading_none(sglang: Any) -> None:
    handle, seen = sglang

    async def go() -> Any:
        scorer = SGLangScorer(handle, concurrency=1)
        try:
            return await scorer.token_distributions([5, 6, 7, 8, 9], start=2, top_k=3)
        finally:
            await scorer.aclose()

    positions = asyncio.run(go())
    assert seen == [distributions_payload([5, 6, 7, 8, 9], start=2, top_k=3)]
    assert seen[0]["logprob_start_len"] == 1 and seen[0]["sampling_params"]["max_new_tokens"] == 0
    assert seen[0]["return_logprob"] is True and seen[0]["top_logprobs_num"] == 3
    assert len(positions) == 3
    assert [lp for lp, _ in positions] == pytest.approx([math.log(0.5 / 8) - i for i in range(3)])
    assert positions[1][1] == tuple(top_of(1, 3))


def test_sglang_positions_that_do_not_line_up_are_invalid() -> None:
    out = sglang_meta([5, 6, 7, 8], 1, 3)
    with pytest.raises(InvalidResponse, match="2 prompt logprobs and 2 top lists for 3 forced"):
        sglang_read(out, [6, 7, 8], top_k=3, server="candidate")
    out["meta_info"]["input_top_logprobs"][2] = None  # a forced position without its top list
    with pytest.raises(InvalidResponse, match="null alternatives at position 1"):
        sglang_read(out, [7, 8], top_k=3, server="candidate")
    out = sglang_meta([5, 6, 7, 8], 1, 3)
    with pytest.raises(InvalidResponse, match="token 8 at position 1 where 9 was forced"):
        sglang_read(out, [7, 9], top_k=3, server="candidate")


# -- vLLM: prompt_logprobs, the forced token listed with its own rank -------------------------------
def vllm_position(tok: int, i: int, k: int, *, inside: bool) -> dict[str, dict[str, Any]]:
    """One ``prompt_logprobs`` entry as vLLM 0.33.0 builds it (``append_logprobs_for_next_position``):
    the prompt token first with its rank, then the top k with ranks 1..k; ``inside`` puts the
    prompt token at rank 2 of the top k, else it sits outside at rank k + 5."""
    top = top_of(i, k)
    if inside:
        top[1] = (tok, top[1][1])
    own = next((j + 1 for j, (t, _) in enumerate(top) if t == tok), k + 5)
    own_lp = dict(top).get(tok, math.log(0.5 / 2**k) - i)
    out = {str(tok): {"logprob": own_lp, "rank": own, "decoded_token": "x"}}
    for j, (t, lp) in enumerate(top):
        out[str(t)] = {"logprob": lp, "rank": j + 1, "decoded_token": "y"}
    return out


def vllm_completion(body: dict[str, Any]) -> dict[str, Any]:
    ids, k = body["prompt"], body["prompt_logprobs"]
    prompt = [None] + [vllm_position(t, i, k, inside=i % 2 == 0 and k > 1) for i, t in enumerate(ids[1:])]
    choice = {"index": 0, "text": "", "logprobs": None, "finish_reason": "length", "prompt_logprobs": prompt}
    return vllm_answer(choice, prompt_tokens=len(ids), completion_tokens=0)


def vllm_answer(choice: dict[str, Any], *, prompt_tokens: int, completion_tokens: int) -> dict[str, Any]:
    """vLLM's ``/v1/completions`` answer around one ``choice``, with its usage."""
    total = prompt_tokens + completion_tokens
    usage = {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens, "total_tokens": total}
    return {
        "id": "cmpl-1",
        "object": "text_completion",
        "created": 1,
        "model": "m",
        "choices": [choice],
        "usage": usage,
    }


def test_vllm_top_k_are_the_entries_ranked_within_k() -> None:
    choice = vllm_completion({"prompt": [5, 6, 7, 8], "prompt_logprobs": 3})["choices"][0]
    positions = vllm_read(choice, [5, 6, 7, 8], 1, top_k=3, server="baseline")
    assert len(positions) == 3
    (lp0, top0), (lp1, top1), _ = positions
    assert [t for t, _ in top0] == [100, 6, 102] and lp0 == top0[1][1]  # inside: listed once
    assert [t for t, _ in top1] == [100, 101, 102] and lp1 < top1[-1][1]  # outside, rank k + 5
    assert vllm_read(choice, [5, 6, 7, 8], 3, top_k=3, server="baseline") == positions[2:]


def test_vllm_token_distributions_sends_one_prompt_and_reads_from_start() -> None:
    gen = double("/v1/completions", vllm_completion)
    handle, seen = next(gen)

    async def go() -> Any:
        scorer = VLLMScorer(handle, concurrency=1)
        try:
            return await scorer.token_distributions([5, 6, 7, 8], start=2, top_k=3)
        finally:
            await scorer.aclose()

    try:
        positions = asyncio.run(go())
    finally:
        gen.close()
    assert seen == [distributions_payload_vllm([5, 6, 7, 8], top_k=3, model=None)]
    assert seen[0]["max_tokens"] == 0 and seen[0]["echo"] is True and seen[0]["prompt_logprobs"] == 3
    assert "logprobs" not in seen[0] and len(positions) == 2


def test_vllm_misaligned_prompt_logprobs_are_invalid() -> None:
    choice = vllm_completion({"prompt": [5, 6, 7, 8], "prompt_logprobs": 3})["choices"][0]
    with pytest.raises(InvalidResponse, match="do not line up with the 5 prompt tokens"):
        vllm_read(choice, [5, 6, 7, 8, 9], 1, top_k=3, server="candidate")
    with pytest.raises(InvalidResponse, match="no logprob for token 9"):
        vllm_read(choice, [5, 6, 9, 8], 2, top_k=3, server="candidate")
    choice["prompt_logprobs"][1]["6"]["rank"] = None
    with pytest.raises(InvalidResponse, match="unexpected shape"):
        vllm_read(choice, [5, 6, 7, 8], 1, top_k=3, server="candidate")
    raw_logits = vllm_completion({"prompt": [5, 6], "prompt_logprobs": 1})["choices"][0]
    raw_logits["prompt_logprobs"][1] = {"6": {"logprob": 3.5, "rank": 1, "decoded_token": "x"}}
    with pytest.raises(InvalidResponse, match="not a finite number <= 0"):  # logprobs_mode raw_logits
        vllm_read(raw_logits, [5, 6], 1, top_k=1, server="candidate")


# -- the fake engine: a deterministic model, the same on every arm unless told to drift -------------
def fake_positions(engine: FakeEngine, arm: str, tokens: list[int], start: int = 1, k: int = 5) -> Any:
    scorer = FakeScorer(engine, arm, arm)
    return asyncio.run(scorer.token_distributions(tokens, start=start, top_k=k))


def test_the_fake_model_is_one_distribution_the_same_on_every_arm() -> None:
    engine = FakeEngine()
    tokens = [ord(c) for c in "the cat sat on the mat"]
    base = fake_positions(engine, "baseline", tokens)
    assert base == fake_positions(engine, "candidate", tokens) and len(base) == len(tokens) - 1
    answered = [(t, lp, top) for t, (lp, top) in zip(tokens[1:], base, strict=True)]
    assert check_positions(answered, tokens[1:], "fake", top_k=5) == base  # one distribution each
    assert fake_positions(engine, "baseline", tokens, start=4) == base[3:]
    assert fake_positions(engine, "baseline", tokens[:6]) == base[:5]  # a position sees only its prefix
    assert [c.kind for c in engine.calls] == ["token_distributions"] * 4
    ids = ",".join(map(str, tokens))
    assert engine.calls[1][:4] == ("candidate", "candidate", "token_distributions", ids)
    assert fake_positions(engine, "baseline", [70, 70000])[0][0] == UNKNOWN_LOGPROB  # outside the vocabulary


def test_the_fake_model_is_stable_across_processes() -> None:
    code = (
        "import asyncio; from evalgate.engines.fake import FakeEngine, FakeScorer; "
        "s = FakeScorer(FakeEngine(), 'a', 'a'); "
        "print(asyncio.run(s.token_distributions([104, 105, 33], start=1, top_k=3)))"
    )
    runs = set()
    for seed in ("1", "2"):
        env = {**os.environ, "PYTHONHASHSEED": seed}
        run = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env
        )
        runs.add(run.stdout)
    assert len(runs) == 1
    assert repr(fake_positions(FakeEngine(), "a", [104, 105, 33], k=3)) + "\n" in runs


def test_drift_moves_only_the_arm_it_names_by_its_scale() -> None:
    engine = FakeEngine(drift=lambda arm: 0.5 if arm == "candidate" else 0.0)
    tokens = [ord(c) for c in "a longer sentence to teacher force, with drift on one arm"]
    base, same = fake_positions(engine, "baseline", tokens), fake_positions(FakeEngine(), "baseline", tokens)
    cand = fake_positions(engine, "candidate", tokens)
    assert base == same and cand != base

    def mean_abs_gap(drift: float) -> float:
        far = fake_positions(FakeEngine(drift=lambda arm: drift), "candidate", tokens)
        return sum(abs(a[0] - b[0]) for a, b in zip(base, far, strict=True)) / len(base)

    assert 0 < mean_abs_gap(0.1) < mean_abs_gap(0.5) < mean_abs_gap(2.0)
