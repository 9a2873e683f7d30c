"""The decode path (``Scorer.decode_distributions``) on real SGLang 0.5.23 on the CPU (marked
sglang_cpu and e2e), one bf16 server: the greedy generation it reads is the one ``/generate``
gives without logprobs, each step's top-1 is the token generated, and each step's distribution is
the one teacher forcing reads at that prefix; behind tests/helpers/decode_proxy.py the generated
positions from N on change while the prompt side stays exact, as a decode-only FP8-KV fault would.

``EVALGATE_CAPTURE_DECODE=1`` writes the request and SGLang's raw answer to
tests/fixtures/sglang_decode/ (tests/engines/test_decode_distributions.py reads them).
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from evalgate.config import SGLangConfig
from evalgate.engines import ServerHandle
from evalgate.engines.api import Decoded, LaunchSlot, Position
from evalgate.engines.sglang._cpu import SGLangCPUEngine
from evalgate.engines.sglang._decode import decode_payload, read_decoded
from evalgate.variants import parse_variant
from tests.conftest import needs_models
from tests.e2e.test_e2e_sglang_cpu import needs_sglang_cpu
from tests.helpers.decode_proxy import assert_decode_block, compare_through_proxy, decode_proxy

pytestmark = [pytest.mark.e2e, pytest.mark.sglang_cpu, needs_models, needs_sglang_cpu]

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "sglang_decode"
TEXT = "Question: Natalia sold clips to 48 of her friends in April. How many clips did she sell?\nAnswer:"
MAX_TOKENS, TOP_K, FROM = 16, 8, 3


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[SGLangCPUEngine, ServerHandle]]:
    engine = SGLangCPUEngine(SGLangConfig(device="cpu", ready_timeout_s=300))
    spec = engine.launch_spec(parse_variant("bf16"))
    start = time.monotonic()
    with engine.launch(spec, LaunchSlot("decode", tmp_path_factory.mktemp("logs"))) as handle:
        print(f"SGLang CPU server up in {time.monotonic() - start:.0f} s")
        yield engine, handle


SAME = 1e-4
"""Two reads of one position agree this closely: a repeated request reuses the radix cache, so
its prompt is computed in other shapes (float32 rounding, not a change)."""


def same(a: Position, b: Position) -> bool:
    (lp, top), (blp, btop) = a, b
    return [t for t, _ in top] == [t for t, _ in btop] and all(
        abs(x - y) <= SAME
        for x, y in zip([lp, *(v for _, v in top)], [blp, *(v for _, v in btop)], strict=True)
    )


def post(handle: ServerHandle, body: dict[str, Any]) -> Any:
    headers = {"Authorization": f"Bearer {handle.api_key}"}
    resp = httpx.post(f"{handle.base_url}/generate", json=body, headers=headers, timeout=300)
    resp.raise_for_status()
    return resp.json()


def read(engine: SGLangCPUEngine, handle: ServerHandle, prompt: list[int]) -> tuple[Decoded, list[Position]]:
    """The decode path on ``prompt``, and teacher forcing over the prompt and what it generated."""

    async def go() -> tuple[Decoded, list[Position]]:
        scorer = engine.scorer(handle)
        try:
            d = await scorer.decode_distributions(prompt, max_tokens=MAX_TOKENS, top_k=TOP_K)
            forced = await scorer.token_distributions([*prompt, *d.tokens], start=len(prompt), top_k=TOP_K)
            return d, forced
        finally:
            await scorer.aclose()

    return asyncio.run(go())


def tokens_of(engine: SGLangCPUEngine, handle: ServerHandle) -> list[int]:
    async def go() -> list[int]:
        scorer = engine.scorer(handle)
        try:
            return await scorer.tokenize(TEXT)
        finally:
            await scorer.aclose()

    return asyncio.run(go())


def test_decode_distributions_on_real_sglang(server: tuple[SGLangCPUEngine, ServerHandle]) -> None:
    """The greedy tokens are /generate's own, each step's top-1 is its token, one position per
    token, no prompt position scored (logprob_start_len -1), and each step's distribution is the
    one teacher forcing reads at the same prefix (float32 on the CPU: prefill and decode agree)."""
    engine, handle = server
    start = time.monotonic()
    prompt = tokens_of(engine, handle)
    d, forced = read(engine, handle, prompt)
    plain = post(
        handle, {"input_ids": prompt, "sampling_params": {"max_new_tokens": MAX_TOKENS, "temperature": 0}}
    )
    assert list(d.tokens) == plain["output_ids"]
    assert len(d.positions) == len(d.tokens) and d.finish_reason in ("length", "stop")
    assert d.finish_reason == "stop" or len(d.tokens) == MAX_TOKENS
    for tok, (lp, top) in zip(d.tokens, d.positions, strict=True):
        assert len(top) == TOP_K and top[0][0] == tok and lp == top[0][1]
    assert len(forced) == len(d.positions)
    assert all(same(a, b) for a, b in zip(d.positions, forced, strict=True))
    body = decode_payload(prompt, max_tokens=MAX_TOKENS, top_k=TOP_K)
    raw = post(handle, body)
    assert not raw["meta_info"]["input_token_logprobs"] and not raw["meta_info"].get("input_top_logprobs")
    again = read_decoded(raw, max_tokens=MAX_TOKENS, top_k=TOP_K)
    assert again.tokens == d.tokens and all(
        same(a, b) for a, b in zip(again.positions, d.positions, strict=True)
    )
    if os.environ.get("EVALGATE_CAPTURE_DECODE") == "1":
        FIXTURES.mkdir(parents=True, exist_ok=True)
        (FIXTURES / "request.json").write_text(json.dumps(body, indent=1) + "\n")
        (FIXTURES / "response.json").write_text(json.dumps(raw, indent=1) + "\n")
    print(f"decode path on real SGLang: {len(d.tokens)} tokens, {time.monotonic() - start:.1f} s")


def test_the_decode_proxy_moves_generated_positions_only(
    server: tuple[SGLangCPUEngine, ServerHandle],
) -> None:
    """Through the proxy from position ``FROM``: the same tokens, the same distributions before
    ``FROM`` and changed ones from it on, while teacher forcing of the same text is unchanged."""
    engine, handle = server
    start = time.monotonic()
    prompt = tokens_of(engine, handle)
    direct, forced = read(engine, handle, prompt)
    with decode_proxy(handle.base_url, from_position=FROM) as proxy:
        through, forced_through = read(engine, dataclasses.replace(handle, base_url=proxy.url), prompt)
        assert proxy.perturbed == len(direct.tokens) - FROM
    assert through.tokens == direct.tokens and through.finish_reason == direct.finish_reason
    assert all(same(a, b) for a, b in zip(forced_through, forced, strict=True))
    for i, ((lp, top), (dlp, dtop)) in enumerate(zip(through.positions, direct.positions, strict=True)):
        assert [t for t, _ in top] == [t for t, _ in dtop]
        if i < FROM:
            assert same((lp, top), (dlp, dtop))
        else:
            assert lp < dlp - SAME and top[1][1] > dtop[1][1] + SAME
    print(f"decode proxy on real SGLang: {time.monotonic() - start:.1f} s")


def test_a_decode_only_fault_blocks_the_attached_pair_and_names_where_it_starts(
    server: tuple[SGLangCPUEngine, ServerHandle],
    data_dir: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """#42's acceptance on real SGLang: the candidate is the same server behind the decode proxy,
    exact on every prompt logprob and changed on generated tokens from position 64 on. The drift
    suite alone BLOCKs on the decode path, naming the 64-255 bucket; the prefill row does not."""
    _, handle = server
    start = time.monotonic()
    for arm in ("BASELINE", "CANDIDATE"):
        monkeypatch.setenv(f"EVALGATE_{arm}_API_KEY", handle.api_key)
    code, verdict = compare_through_proxy(
        handle, data_dir, tmp_path / "run", from_position=64, decode_tokens=96, limit=6
    )
    rows = assert_decode_block(code, verdict, onset="64-255")
    early = next(r for r in rows if r["path"] == "decode" and r["span"] == "0-63")
    assert early["estimate"] < 1e-4, early
    print(f"decode-only fault through compare on real SGLang: {time.monotonic() - start:.1f} s")
