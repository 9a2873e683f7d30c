"""The shared prefix cache on the real llama-server (SmolLM2 F16): the CPU default launches with
the RAM prompt cache and idle-slot caching off (llama.cpp#27148), the concurrency canary gives a
tenant the same greedy answers alone and beside unrelated traffic, and ``evalgate probe cache``
says the server has no isolation to test (exit 2) instead of pretending to test a salt."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from evalgate.cli import main
from evalgate.config import LlamaCppConfig
from evalgate.engines import ServerHandle
from evalgate.engines.api import LaunchSlot
from evalgate.engines.llamacpp import LlamaCppEngine
from evalgate.probe.canary import CanaryResult, filler_prompts, run_canary
from evalgate.variants import Variant
from tests.conftest import needs_models

pytestmark = [pytest.mark.e2e, needs_models]

TENANT = [
    "Question: What is 12 plus 7?\nAnswer:",
    "The three primary colors are",
    "Write the days of the week in order:",
    "Translate 'good morning' into French:",
]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[LlamaCppEngine, ServerHandle]]:
    engine = LlamaCppEngine(LlamaCppConfig(parallel=4, deterministic=False))
    spec = engine.launch_spec(Variant("bf16"))
    with engine.launch(spec, LaunchSlot("baseline", tmp_path_factory.mktemp("llama"))) as handle:
        yield engine, handle


def test_both_arms_launch_without_the_ram_prompt_cache(server: tuple[LlamaCppEngine, ServerHandle]) -> None:
    engine, handle = server
    args = dict(engine.launch_spec(Variant("bf16")).args)
    assert args["--cache-ram"] == "0" and "--no-cache-idle-slots" in args
    assert "--cache-ram" in handle.command and "--no-cache-idle-slots" in handle.command


def test_the_canary_answers_alike_alone_and_under_load(server: tuple[LlamaCppEngine, ServerHandle]) -> None:
    engine, handle = server

    async def go() -> CanaryResult:
        scorer = engine.scorer(handle)
        try:
            return await run_canary(scorer, TENANT, filler_prompts(8), max_tokens=16)
        finally:
            await scorer.aclose()

    result = asyncio.run(go())
    assert all(result.alone), result
    assert result.passed, [(result.alone[i], result.loaded[i]) for i in result.differ]


def test_probe_cache_says_llama_server_has_no_isolation(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(["probe", "cache", "--engine", "llamacpp", "--out", str(tmp_path)])
    assert code == 2
    report = json.loads((tmp_path / "probe.json").read_text())
    assert report["verdict"] == "NO_ISOLATION"
    assert "own server" in report["reasons"][1]
    assert "NO_ISOLATION" in capsys.readouterr().out
