"""SGLangEngine and SGLangScorer end to end on CPU: the real llama-server with the real model,
behind tests/helpers/sglang_shim.py, which speaks SGLang 0.5.23's protocol and validates every request with
SGLang's own request models (marked e2e; skipped without `evalgate setup --parsers`).

SGLangEngine.launch starts the shim as if it were ``sglang.launch_server`` (settings.launch_command),
so the real launch, readiness, server-info and scoring code runs; every number is llama-server's.
The llama-server and the import check are session fixtures (tests/e2e/conftest.py).
"""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest

from evalgate.config import SGLangConfig
from evalgate.engines import ServerHandle
from evalgate.engines.api import Generation, LaunchSlot
from evalgate.engines.llamacpp import LlamaCppScorer
from evalgate.engines.preflight import preflight
from evalgate.engines.sglang import SGLangEngine
from evalgate.variants import Variant, parse_variant
from tests.conftest import needs_models

pytestmark = [pytest.mark.e2e, needs_models, pytest.mark.usefixtures("sglang_models")]


SHIM = Path(__file__).resolve().parents[1] / "helpers" / "sglang_shim.py"
ITEMS = (  # (context, choices): ARC-style, with the trailing-space split lm-eval does
    ("Question: Which is a source of light?\nAnswer:", [" the Sun", " a rock", " a shadow", " water"]),
    ("The opposite of cold is", [" hot", " blue"]),
)


def shim_checkpoint(upstream: ServerHandle, tmp_path: Path) -> tuple[Path, list[str]]:
    """A checkpoint folder (the HF twin of the GGUF, as far as flags go) and the command that serves it
    through the shim in front of ``upstream``."""
    checkpoint = tmp_path / "SmolLM2-135M-Instruct"
    checkpoint.mkdir()
    (checkpoint / "config.json").write_text(json.dumps({"model_type": "llama"}))
    return checkpoint, [
        sys.executable,
        str(SHIM),
        "--upstream",
        upstream.base_url,
        "--upstream-key",
        upstream.api_key,
    ]


def shim_config(upstream: ServerHandle, tmp_path: Path) -> Path:
    """An evalgate.toml whose [sglang] section launches the shim, for ``compare --engine sglang``."""
    checkpoint, shim = shim_checkpoint(upstream, tmp_path)
    config = tmp_path / "evalgate.toml"
    config.write_text(
        f"[sglang]\nmodel_path = {json.dumps(str(checkpoint))}\nlaunch_command = {json.dumps(shim)}\n"
        "ready_timeout_s = 60\nconcurrency = 4\n"
    )
    return config


def sglang_engine(upstream: ServerHandle, tmp_path: Path) -> SGLangEngine:
    checkpoint, shim = shim_checkpoint(upstream, tmp_path)
    settings = SGLangConfig(
        model_path=str(checkpoint), launch_command=tuple(shim), ready_timeout_s=60, concurrency=4, gpus="0"
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
            (await sgl.generate(prompt, Generation(max_tokens=12, stop=("\n",))))["text"],
            (await direct.generate(prompt, Generation(max_tokens=12, stop=("\n",))))["text"],
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
    with engine.launch(spec, LaunchSlot("candidate", tmp_path / "logs")) as handle:
        # launch: readiness on /health_generate, flags through to the server, key masked everywhere
        info: dict[str, Any] = dict(handle.info)
        assert info["kv_cache_dtype"] == "fp8_e4m3" and info["max_total_num_tokens"] > 0
        assert "shim" in info["version"] and info["cuda_visible_devices"] == "0"
        assert info["kv_scales"]["scale"] == "1.0"  # no scale file: SGLang's fallback, read from the log
        assert info["capacity"]["kv_types"] == "float8_e4m3fn"  # the pool's dtype, from the log line
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
    assert out["flushed"] == "flushed" and out["stats"]["flushes"] == 1
    batches = out["stats"]["generate_batches"]
    assert [len(choices) for _, choices in ITEMS] == [b for b in batches if b > 1]  # one request per question
    assert out["server_info"]["kv_cache_dtype"] == "fp8_e4m3" and "api_key" not in out["server_info"]


def test_compare_runs_end_to_end_on_the_sglang_engine(
    upstream: ServerHandle, tmp_path: Path, data_dir: Path
) -> None:
    """`evalgate compare --engine sglang`, every runner path (launch, preflight, /flush_cache between
    suites, batched /generate loglikelihood, generation, records, verdict) over the shim."""
    from evalgate.cli import main

    config = shim_config(upstream, tmp_path)
    run = tmp_path / "run"
    code = main(["compare", "--engine", "sglang", "--config", str(config), "--baseline", "bf16",
                 "--candidate", "fp8kv", "--suites", "arc_easy,gsm8k", "--limit", "6", "--max-gen-tokens", "48",
                 "--data-dir", str(data_dir), "--out", str(run), "--skip-kernel-check"])  # fmt: skip
    # the shim serves both arms from one llama-server, so the pair is an A/A: nothing may flip
    assert code == 0
    m = json.loads((run / "manifest.json").read_text())
    assert m["engine"] == "sglang"
    for arm, kv in (("baseline", "bfloat16"), ("candidate", "fp8_e4m3")):
        assert ["--kv-cache-dtype", kv] in m["launch"][arm]["args"]
        assert ["--sampling-defaults", "openai"] in m["launch"][arm]["args"]
        server = m["arms"][arm]["server"]
        assert "max_total_num_tokens" in server
        assert server["cache_flush"] == {"arc_easy": "flushed", "gsm8k": "flushed"}  # per suite (#18.6)
        command = m["arms"][arm]["command"]
        assert command[command.index("--api-key") + 1] == "***"  # the arm's own key never lands on disk
        for suite in ("arc_easy", "gsm8k"):
            lines = (run / "items" / f"{suite}.{arm}.jsonl").read_text().splitlines()
            assert len(lines) == 6 and all(json.loads(line)["error"] is None for line in lines)
    cand = m["arms"]["candidate"]["server"]
    assert cand["kv_scales"]["scale"] == "1.0" and "kv_scales" not in m["arms"]["baseline"]["server"]
    assert "kv_scales" in (run / "report.html").read_text()  # the scale used, shown with the arm's facts
    v = json.loads((run / "verdict.json").read_text())
    assert v["verdict"] == "PASS" and all(r["n10"] == r["n01"] == 0 for r in v["suites"])


async def _protocol(handle: ServerHandle, engine: SGLangEngine) -> dict[str, Any]:
    """What a client of SGLang 0.5.23 sees, through the shim: errors, sampling, prefill, tools, flush."""
    from evalgate.suites.tool_calls import probe_tool_call

    headers = {"Authorization": f"Bearer {handle.api_key}"}
    out: dict[str, Any] = {}
    async with httpx.AsyncClient(base_url=handle.base_url, headers=headers, timeout=120) as http:
        bad_chat = await http.post("/v1/chat/completions", json={"max_tokens": 4})  # no messages
        bad_generate = await http.post("/generate", json={"input_ids": "seven"})
        out["bad"] = (bad_chat.status_code, bad_chat.json(), bad_generate.status_code, bad_generate.json())
        prefill = [{"role": "user", "content": "Say hi."}, {"role": "assistant", "content": "Hi"}]
        await http.post("/v1/chat/completions", json={"messages": prefill, "max_tokens": 2})
        out["raw_info"] = (await http.get("/server_info")).json()
        sgl = engine.scorer(handle, seed=0)
        try:
            await sgl.chat({"messages": prefill, "max_tokens": 2})  # the scorer continues it
            await sgl.chat({"messages": prefill[:1], "max_tokens": 2})  # sampling left to the defaults
            try:
                # SmolLM2 calls a tool only when its turn is prefilled (the suite's prefill option),
                # which the scorer continues (continue_final_message) with tool_choice=required
                out["probe"] = await probe_tool_call(sgl, prefill=True, server="candidate")
            except Exception as exc:  # the message is what is checked
                out["probe"] = exc
            count = [{"role": "user", "content": "Count from 1 to 100."}]
            busy = asyncio.ensure_future(sgl.chat({"messages": count, "max_tokens": 96, "ignore_eos": True}))
            await asyncio.sleep(0.3)
            out["busy_flush"] = (await http.post("/flush_cache")).status_code  # timeout 0: not while busy
            out["flushed"] = await sgl.flush_cache()  # ?timeout=30: waits for the chat, then flushes
            await busy
        finally:
            await sgl.aclose()
        out["stats"] = (await http.get("/shim/stats")).json()
    return out


@pytest.mark.timeout(240)
def test_the_shim_answers_as_sglang_0_5_23(upstream: ServerHandle, tmp_path: Path) -> None:
    """#18 against the faithful shim: 400s in SGLang's shapes, the trailing assistant message, the
    generation_config defaults without --sampling-defaults openai, no tool_calls without a parser,
    a busy flush, an admin key, and /server_info's per-launch keys."""
    from evalgate.engines.attach import attached_settings
    from evalgate.engines.sglang import DIALECT

    engine = sglang_engine(upstream, tmp_path)
    (Path(engine.config.model_path or "") / "generation_config.json").write_text(
        json.dumps({"temperature": 0.6, "top_p": 0.9, "top_k": 20, "repetition_penalty": 1.3})
    )
    # the SGLang default (--sampling-defaults model), and an admin key evalgate does not hold
    odd = Variant(
        "bf16-model-defaults", args=(("--sampling-defaults", "model"), ("--admin-api-key", "ADMIN-K"))
    )
    with engine.launch(engine.launch_spec(odd), LaunchSlot("baseline", tmp_path / "logs")) as handle:
        model_defaults = asyncio.run(_protocol(handle, engine))
    pinned = SGLangEngine(engine.config.model_copy(update={"tool_call_parser": "hermes"}))
    with pinned.launch(
        pinned.launch_spec(parse_variant("bf16")), LaunchSlot("candidate", tmp_path / "l2")
    ) as h:
        openai_defaults = asyncio.run(_protocol(h, pinned))

    status, body, gstatus, gbody = model_defaults["bad"]
    assert (
        status == 400 and body["object"] == "error" and body["code"] == 400
    )  # SGLang's ErrorResponse, not 502
    assert gstatus == 400 and "error" in gbody  # /generate's contract check
    chats = model_defaults["stats"]["chats"]
    assert chats[0]["roles"][-1] == "user" and not chats[0]["continued"]  # no continue_final_message
    assert chats[1]["roles"][-1] == "assistant" and chats[1]["continued"]  # the scorer sends it
    assert chats[2]["sampling"] == {
        "temperature": 0.6,
        "top_p": 0.9,
        "top_k": 20,
        "min_p": 0.0,
        "repetition_penalty": 1.3,
    }
    assert openai_defaults["stats"]["chats"][2]["sampling"] == {
        "temperature": 1.0, "top_p": 1.0, "top_k": -1, "min_p": 0.0, "repetition_penalty": 1.0
    }  # fmt: skip
    assert "no parsed tool call" in str(model_defaults["probe"])  # no --tool-call-parser: calls stay text
    assert isinstance(openai_defaults["probe"], dict), openai_defaults["probe"]
    assert openai_defaults["probe"]["ok"]  # with one, the call comes back parsed
    assert openai_defaults["busy_flush"] == 400 and openai_defaults["flushed"] == "flushed"  # waited for idle
    assert model_defaults["busy_flush"] == 401  # the admin key guards /flush_cache (ADMIN_OPTIONAL)
    assert model_defaults["flushed"].startswith("cannot flush: HTTP 401")  # recorded, not an abort
    raw = openai_defaults["raw_info"]
    assert raw["startup_time"] and "--port" in raw["launch_command"] and raw["version"].startswith("0.5.23")
    fp = {"protocol": "sglang", "version": raw["version"], "models": [], **DIALECT.fingerprint(raw, [])}
    settings = attached_settings(fp)
    assert not {"startup_time", "launch_command", "kv_events", "status", "port"} & set(settings)
