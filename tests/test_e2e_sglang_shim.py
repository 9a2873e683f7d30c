"""SGLangEngine and SGLangScorer end to end on CPU: the real llama-server with the real model,
behind tests/sglang_shim.py, which speaks SGLang's protocol (marked e2e).

SGLangEngine.launch starts the shim as if it were ``sglang.launch_server`` (settings.launch_command),
so the real launch, readiness, server-info and scoring code runs; every number is llama-server's.
"""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from evalgate.config import SGLangConfig
from evalgate.engines import ServerHandle
from evalgate.engines.llamacpp import LlamaCppEngine, LlamaCppScorer
from evalgate.engines.sglang import SGLangEngine
from evalgate.preflight import preflight
from evalgate.variants import Variant, parse_variant

from .conftest import needs_models

pytestmark = [pytest.mark.e2e, needs_models]

SHIM = Path(__file__).parent / "sglang_shim.py"
ITEMS = (  # (context, choices): ARC-style, with the trailing-space split lm-eval does
    ("Question: Which is a source of light?\nAnswer:", [" the Sun", " a rock", " a shadow", " water"]),
    ("The opposite of cold is", [" hot", " blue"]),
)


@pytest.fixture(scope="module")
def upstream(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerHandle]:
    """One llama-server (F16 weights) for the whole module. llama-server refuses every slot action,
    erase included, without --slot-save-path, and the shim's /flush_cache erases the slots."""
    engine = LlamaCppEngine()
    slots = tmp_path_factory.mktemp("slots")
    spec = engine.launch_spec(Variant("bf16", args=(("--slot-save-path", str(slots)),)))
    with engine.launch(spec, name="upstream", log_dir=tmp_path_factory.mktemp("llama")) as handle:
        yield handle


def sglang_engine(upstream: ServerHandle, tmp_path: Path) -> SGLangEngine:
    checkpoint = tmp_path / "SmolLM2-135M-Instruct"  # the HF twin of the GGUF, as far as flags go
    checkpoint.mkdir()
    (checkpoint / "config.json").write_text(json.dumps({"model_type": "llama"}))
    shim = (sys.executable, str(SHIM), "--upstream", upstream.base_url, "--upstream-key", upstream.api_key)
    settings = SGLangConfig(
        model_path=str(checkpoint), launch_command=shim, ready_timeout_s=60, concurrency=4, gpus="0"
    )
    return SGLangEngine(settings)


async def stats(handle: ServerHandle) -> dict[str, Any]:
    async with httpx.AsyncClient() as client:
        resp = await client.get(
            f"{handle.base_url}/shim/stats", headers={"Authorization": f"Bearer {handle.api_key}"}
        )
        return dict(resp.json())


async def drive(engine: SGLangEngine, handle: ServerHandle, upstream: ServerHandle) -> dict[str, Any]:
    sgl = engine.scorer(handle, seed=0)
    direct = LlamaCppScorer(upstream, concurrency=4)
    out: dict[str, Any] = {}
    try:
        out["preflight"] = (await preflight(sgl, server="candidate")).checks
        pairs = []
        for context, choices in ITEMS:
            batched = await sgl.loglikelihood_many(context, choices)
            for choice, together in zip(choices, batched, strict=True):
                alone = await sgl.loglikelihood(context, choice)
                reference = await direct.loglikelihood(context, choice)
                pairs.append((choice, together, alone, reference))
        out["pairs"] = pairs
        out["tokens"] = (await sgl.tokenize(ITEMS[0][0]), await direct.tokenize(ITEMS[0][0]))
        prompt = "Question: What is 2 + 2?\nAnswer:"
        out["generate"] = (
            (await sgl.generate(prompt, max_tokens=12, stop=["\n"], temperature=0.0))["text"],
            (await direct.generate(prompt, max_tokens=12, stop=["\n"], temperature=0.0))["text"],
        )
        tool = {
            "type": "function",
            "function": {
                "name": "get_weather",
                "description": "Weather for a city",
                "parameters": {
                    "type": "object",
                    "properties": {"city": {"type": "string"}},
                    "required": ["city"],
                },
            },
        }
        out["chat"] = await sgl.chat(
            {
                "messages": [{"role": "user", "content": "Weather in Paris?"}],
                "tools": [tool],
                "max_tokens": 24,
                "temperature": 0.0,
            }
        )
        out["flushed"] = await sgl.flush_cache()
        out["server_info"] = await sgl.server_info()
        out["stats"] = await stats(handle)
    finally:
        await sgl.aclose()
        await direct.aclose()
    return out


@pytest.mark.timeout(150)
def test_sglang_scorer_through_the_shim_matches_llama_server(upstream: ServerHandle, tmp_path: Path) -> None:
    engine = sglang_engine(upstream, tmp_path)
    spec = engine.launch_spec(parse_variant("fp8kv"))
    with engine.launch(spec, name="candidate", log_dir=tmp_path / "logs") as handle:
        # launch: readiness on /health_generate, flags through to the server, key masked everywhere
        info: dict[str, Any] = dict(handle.info)
        assert info["kv_cache_dtype"] == "fp8_e4m3" and info["max_total_num_tokens"] > 0
        assert info["version"].startswith("shim") and info["cuda_visible_devices"] == "0"
        assert "eg-" not in json.dumps(info) and "***" in handle.command
        # as in SGLang: the key guards everything but /health*
        assert httpx.get(f"{handle.base_url}/server_info", timeout=10).status_code == 401
        assert httpx.get(f"{handle.base_url}/health_generate", timeout=10).status_code == 200
        out = asyncio.run(drive(engine, handle, upstream))
    assert not handle.alive()
    assert all(c["ok"] for c in out["preflight"]) and len(out["preflight"]) == 5
    for choice, together, alone, reference in out["pairs"]:
        assert together[2] == alone[2] == reference[2] > 0, choice
        assert abs(together[0] - reference[0]) < 0.02 and abs(alone[0] - reference[0]) < 0.02, choice
        assert together[1] == alone[1] == reference[1], choice
    assert out["tokens"][0] == out["tokens"][1]
    assert out["generate"][0] == out["generate"][1]
    assert out["chat"]["choices"][0]["message"] is not None
    assert out["flushed"] is True and out["stats"]["flushes"] == 1
    batches = out["stats"]["generate_batches"]
    assert [len(choices) for _, choices in ITEMS] == [b for b in batches if b > 1]  # one request per question
    assert out["server_info"]["kv_cache_dtype"] == "fp8_e4m3" and "api_key" not in out["server_info"]


def test_compare_runs_end_to_end_on_the_sglang_engine(
    upstream: ServerHandle, tmp_path: Path, data_dir: Path
) -> None:
    """`evalgate compare --engine sglang`, every runner path (launch, preflight, /flush_cache between
    suites, batched /generate loglikelihood, generation, records, verdict) over the shim."""
    from evalgate.cli import main

    checkpoint = tmp_path / "SmolLM2-135M-Instruct"
    checkpoint.mkdir()
    (checkpoint / "config.json").write_text(json.dumps({"model_type": "llama"}))
    shim = [sys.executable, str(SHIM), "--upstream", upstream.base_url, "--upstream-key", upstream.api_key]
    config = tmp_path / "evalgate.toml"
    config.write_text(
        f"[sglang]\nmodel_path = {json.dumps(str(checkpoint))}\nlaunch_command = {json.dumps(shim)}\n"
        "ready_timeout_s = 60\nconcurrency = 4\n"
    )
    run = tmp_path / "run"
    code = main(["compare", "--engine", "sglang", "--config", str(config), "--baseline", "bf16",
                 "--candidate", "fp8kv", "--suites", "arc_easy,gsm8k", "--limit", "6", "--max-gen-tokens", "48",
                 "--data-dir", str(data_dir), "--out", str(run), "--skip-kernel-check"])  # fmt: skip
    # the shim serves both arms from one llama-server, so the pair is an A/A: nothing may flip
    assert code == 0
    m = json.loads((run / "manifest.json").read_text())
    assert m["engine"] == "sglang"
    for arm, kv in (("baseline", "auto"), ("candidate", "fp8_e4m3")):
        assert ["--kv-cache-dtype", kv] in m["launch"][arm]["args"]
        assert "max_total_num_tokens" in m["arms"][arm]["server"]
        command = m["arms"][arm]["command"]
        assert command[command.index("--api-key") + 1] == "***"  # the arm's own key never lands on disk
        for suite in ("arc_easy", "gsm8k"):
            lines = (run / "items" / f"{suite}.{arm}.jsonl").read_text().splitlines()
            assert len(lines) == 6 and all(json.loads(line)["error"] is None for line in lines)
    v = json.loads((run / "verdict.json").read_text())
    assert v["verdict"] == "PASS" and all(r["n10"] == r["n01"] == 0 for r in v["suites"])
