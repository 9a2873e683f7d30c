"""Attach mode (evalgate/engines/attach/) against scripted test doubles of each engine's HTTP API;
the run on a real llama-server started outside evalgate is tests/e2e/test_e2e_attach.py."""

from __future__ import annotations

import asyncio
import copy
import hashlib
import importlib.util
import json
import socket
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from evalgate.engines import Scorer
from evalgate.engines.api import Generation, LaunchSlot
from evalgate.engines.attach import (
    ExternalEngine,
    ShardedScorer,
    api_key_for,
    attached_settings,
    check_attached_pair,
    fingerprint,
    preflight_all,
    require_attached_pair,
    shard_index,
)
from evalgate.errors import ConfigError, PreflightError, ServerStartError
from evalgate.variants import Variant, parse_variant, require_only_quantization
from tests.helpers.background import serving
from tests.helpers.hostile_server import PROPS

LLAMA_PROPS = {  # the hostile stub's /props (n_ctx 4096, its chat template) under this test's names
    **PROPS,
    "total_slots": 4,
    "model_alias": "smol",
    "model_path": "/models/smol.F16.gguf",
    "build_info": "b6000-test",
}
SGLANG_INFO = {
    "model_path": "Org/Model-BF16",
    "tokenizer_path": "Org/Model-BF16",
    "host": "127.0.0.1",
    "port": 30000,
    "api_key": "must-never-be-recorded",
    "context_length": 8192,
    "tp_size": 1,
    "kv_cache_dtype": "auto",
    "quantization": None,
    "attention_backend": "fa3",
    "chunked_prefill_size": 8192,
    "random_seed": 1234,
    "max_total_num_tokens": 500000,
    "internal_states": [{"last_gen_throughput": 12.5}],
    "version": "0.5.4",
}


@dataclass
class Double:
    """What one scripted server answers, and what it was sent (path, Authorization)."""

    kind: str
    key: str | None = None
    props: dict[str, Any] = field(default_factory=lambda: copy.deepcopy(LLAMA_PROPS))
    server_info: dict[str, Any] = field(default_factory=lambda: copy.deepcopy(SGLANG_INFO))
    legacy: bool = False
    """SGLang before /server_info: only /get_server_info."""
    vllm_dev: bool = False
    owner: str | None = None
    """``owned_by`` in /v1/models (default: the kind); another value makes detection probe."""
    url: str = ""
    seen: list[tuple[str, str | None]] = field(default_factory=list)


def _app(d: Double) -> web.Application:
    # llama-server leaves /health and /v1/models open; vLLM checks keys on /v1 paths only
    public = {"llamacpp": ("/health", "/v1/models"), "sglang": ("/health",), "vllm": ("/version", "/props")}

    @web.middleware
    async def auth(request: web.Request, handler: Any) -> web.StreamResponse:
        got = request.headers.get("Authorization")
        d.seen.append((request.path, got))
        guarded = request.path.startswith("/v1") if d.kind == "vllm" else request.path not in public[d.kind]
        if d.key and guarded and got != f"Bearer {d.key}":
            return web.json_response({"error": "Invalid API Key"}, status=401)
        return await handler(request)

    async def models(_: web.Request) -> web.Response:
        card = {"id": f"{d.kind}-model", "object": "model", "owned_by": d.owner or d.kind}
        if d.kind == "vllm":
            card |= {"root": "/ckpt/model-bf16", "max_model_len": 8192}
        return web.json_response({"object": "list", "data": [card]})

    def const(body: dict[str, Any]) -> Callable[[web.Request], Any]:
        async def handler(_: web.Request) -> web.Response:
            return web.json_response(body)

        return handler

    app = web.Application(middlewares=[auth])
    app.router.add_get("/v1/models", models)
    if d.kind == "llamacpp":
        app.router.add_get("/props", const(d.props))
    elif d.kind == "sglang":
        app.router.add_get("/get_server_info", const(d.server_info))
        if not d.legacy:
            app.router.add_get("/server_info", const(d.server_info))
    else:
        app.router.add_get("/version", const({"version": "0.11.0"}))
        if d.vllm_dev:
            app.router.add_get("/server_info", const({"vllm_config": "model=/ckpt/model-bf16"}))
    return app


@pytest.fixture
def serve() -> Iterator[Callable[..., Double]]:
    """``serve(kind, **script) -> Double`` on 127.0.0.1, in a background loop (the code under test
    runs its own asyncio.run and sync httpx)."""
    with serving(Double, _app) as start:
        yield start


def closed_port_url() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{s.getsockname()[1]}"


# -- protocol detection and fingerprints -------------------------------------------------


@pytest.mark.parametrize(
    ("kind", "script"),
    [
        ("llamacpp", {}),
        ("llamacpp", {"owner": "someone"}),
        ("sglang", {}),
        ("sglang", {"legacy": True, "owner": "someone"}),
        ("vllm", {}),
        ("vllm", {"vllm_dev": True, "owner": "someone"}),  # its /server_info is not SGLang's
    ],
)
def test_detects_each_protocol(serve: Callable[..., Double], kind: str, script: dict[str, Any]) -> None:
    d = serve(kind, **script)
    fp = fingerprint(d.url + "/v1/", api_key=None)  # a pasted .../v1 base URL is accepted too
    assert fp["protocol"] == kind and fp["models"] == [f"{kind}-model"]
    if kind == "llamacpp":
        assert (fp["n_ctx_per_slot"], fp["total_slots"], fp["version"]) == (4096, 4, "b6000-test")
        assert len(fp["chat_template_sha256"]) == 16 and "chat_template" not in fp
    elif kind == "sglang":
        assert fp["version"] == "0.5.4" and fp["server_args"]["context_length"] == 8192
        assert "internal_states" not in fp["server_args"] and "api_key" not in fp["server_args"]
        assert "must-never-be-recorded" not in json.dumps(fp)
    else:
        assert fp["version"] == "0.11.0" and fp["max_model_len"] == 8192


def test_key_echoed_by_the_server_is_masked(serve: Callable[..., Double]) -> None:
    info = {**SGLANG_INFO, "launch_command": "python -m sglang.launch_server --api-key k-123 --port 1"}
    fp = fingerprint(serve("sglang", key="k-123", server_info=info).url, api_key="k-123")
    assert "k-123" not in json.dumps(fp)
    assert "launch_command" not in fp["server_args"]  # raw argv: may hold an admin key evalgate never had


def test_sglang_kv_pool_is_summed_over_dp_ranks_when_only_per_rank(serve: Callable[..., Double]) -> None:
    info = {k: v for k, v in SGLANG_INFO.items() if k != "max_total_num_tokens"}
    info["internal_states"] = [{"max_total_num_tokens": 1000}, {"max_total_num_tokens": 1200}]
    fp = fingerprint(serve("sglang", server_info=info).url, api_key=None)
    assert fp["server_args"]["max_total_num_tokens"] == 2200


def test_explicit_protocol_that_does_not_answer_is_refused(serve: Callable[..., Double]) -> None:
    d = serve("vllm")
    with pytest.raises(ConfigError, match=r"does not answer /props, so it is not a llamacpp server"):
        fingerprint(d.url, api_key=None, protocol="llamacpp")


def test_api_key_from_env_is_sent_and_never_recorded(
    serve: Callable[..., Double], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    base, cand = serve("llamacpp", key="base-secret-1"), serve("llamacpp", key="cand-secret-2")
    monkeypatch.setenv("EVALGATE_BASELINE_API_KEY", "base-secret-1")
    monkeypatch.setenv("EVALGATE_CANDIDATE_API_KEY", "cand-secret-2")
    engine = ExternalEngine({"baseline": [base.url], "candidate": [cand.url]})
    spec = engine.launch_spec(parse_variant("fp8kv"))
    with engine.launch(spec, LaunchSlot("candidate", tmp_path)) as handle:
        assert handle.process is None and handle.alive() and handle.info["protocol"] == "llamacpp"
        assert handle.api_key == "cand-secret-2"  # for the scorers' HttpClient, never for records
        recorded = json.dumps(handle.info) + json.dumps(handle.command) + handle.log_path.read_text()
    assert "secret" not in recorded
    assert {auth for _, auth in cand.seen} == {"Bearer cand-secret-2"} and len(cand.seen) >= 2
    assert api_key_for("aa") == "base-secret-1"  # the A/A arm attaches to the baseline's servers
    with engine.launch(spec, LaunchSlot("aa", tmp_path)) as handle:
        assert handle.urls == [base.url]


@pytest.mark.parametrize(("key", "cause"), [(None, "requires an API key"), ("wrong", "rejected the API key")])
def test_bad_key_names_url_variable_and_fix(
    serve: Callable[..., Double], monkeypatch: pytest.MonkeyPatch, key: str | None, cause: str
) -> None:
    d = serve("llamacpp", key="right")  # /v1/models is public on llama-server: /props must catch it
    if key:
        monkeypatch.setenv("EVALGATE_BASELINE_API_KEY", key)
    engine = ExternalEngine({"baseline": [d.url], "candidate": [d.url]})
    with pytest.raises(ConfigError) as err:
        engine.attach_info("baseline")
    text = err.value.render()
    assert d.url in text and cause in text and "EVALGATE_BASELINE_API_KEY" in text and "HTTP 401" in text


def test_unreachable_url_is_named_with_cause_and_fix(serve: Callable[..., Double], tmp_path: Path) -> None:
    good, dead = serve("llamacpp"), closed_port_url()
    engine = ExternalEngine({"baseline": [good.url, dead], "candidate": [good.url]})
    with (
        pytest.raises(ServerStartError) as err,
        engine.launch(engine.launch_spec(parse_variant("bf16")), LaunchSlot("baseline", tmp_path)),
    ):
        pass
    assert f"cannot connect to {dead}" in str(err.value) and "server is running" in err.value.fix


def test_bad_urls_and_missing_arms_are_config_errors() -> None:
    with pytest.raises(ConfigError, match="not a server URL"):
        ExternalEngine({"baseline": ["localhost:8080"], "candidate": ["http://h:1"]})
    with pytest.raises(ConfigError, match="no URL given for the candidate"):
        ExternalEngine({"baseline": ["http://h:1"]})
    with pytest.raises(ConfigError, match="unknown protocol"):
        ExternalEngine({"baseline": ["http://h:1"], "candidate": ["http://h:2"]}, protocol="tgi")


# -- one arm, one deployment; the pair differs only in quantization ------------------------


def test_differing_fingerprints_within_an_arm_are_refused(serve: Callable[..., Double]) -> None:
    a = serve("llamacpp")
    b = serve("llamacpp", props={**LLAMA_PROPS, "default_generation_settings": {"n_ctx": 2048, "params": {}}})
    engine = ExternalEngine({"baseline": [a.url, b.url], "candidate": [a.url]})
    with pytest.raises(ConfigError) as err:
        engine.attach_info("baseline")
    assert a.url in str(err.value) and b.url in str(err.value) and "n_ctx_per_slot" in str(err.value)
    assert "drop the odd URL" in err.value.fix


def test_replicas_may_differ_in_address_seed_and_kv_pool(serve: Callable[..., Double]) -> None:
    pytest.importorskip("evalgate.engines.sglang")
    other = {**SGLANG_INFO, "port": 30001, "random_seed": 7, "max_total_num_tokens": 499000, "base_gpu_id": 1}
    a, b = serve("sglang"), serve("sglang", server_info=other)
    info = ExternalEngine({"baseline": [a.url, b.url], "candidate": [a.url]}).attach_info("baseline")
    assert info["urls"] == [a.url, b.url] and set(info["servers"]) == {a.url, b.url}
    assert info["servers"][b.url]["server_args"]["max_total_num_tokens"] == 499000  # recorded, not compared


def test_check_attached_pair_finds_n_ctx_and_ignores_quantization(serve: Callable[..., Double]) -> None:
    base = fingerprint(serve("llamacpp").url, api_key=None)
    q4 = {**LLAMA_PROPS, "model_path": "/models/smol.Q4_0.gguf"}  # the weights file may differ
    assert check_attached_pair(base, fingerprint(serve("llamacpp", props=q4).url, api_key=None)) == []
    params = LLAMA_PROPS["default_generation_settings"]["params"]  # type: ignore[index]
    small = {**q4, "default_generation_settings": {"n_ctx": 2048, "params": params}}
    cand = fingerprint(serve("llamacpp", props=small).url, api_key=None)
    assert check_attached_pair(base, cand) == [("n_ctx_per_slot", 4096, 2048)]
    hot = {**LLAMA_PROPS, "default_generation_settings": {"n_ctx": 4096, "params": {**params, "top_k": 1}}}
    cand = fingerprint(serve("llamacpp", props=hot).url, api_key=None)
    assert check_attached_pair(base, cand) == [("sampling.top_k", 40, 1)]  # sampling defaults too


def test_check_attached_pair_ignores_kv_type_and_backends_but_not_context() -> None:
    base = {"protocol": "sglang", "version": "0.5.4", "models": ["a"], "server_args": dict(SGLANG_INFO)}
    fp8 = {
        **SGLANG_INFO,
        "kv_cache_dtype": "fp8_e4m3",
        "model_path": "Org/Model-FP8",
        "tokenizer_path": "Org/Model-FP8",
        "attention_backend": "flashinfer",
        "max_total_num_tokens": 1000000,
        "port": 30001,
        "random_seed": 99,
    }
    cand = {**base, "models": ["b"], "server_args": fp8}
    assert check_attached_pair(base, cand) == []
    longer = {**cand, "server_args": {**fp8, "context_length": 4096}}
    assert check_attached_pair(base, longer) == [("context_length", 8192, 4096)]
    assert check_attached_pair(base, longer, allow=["context_length"]) == []
    with pytest.raises(ConfigError, match="differ in more than quantization") as err:
        require_attached_pair(base, longer)
    assert "context_length: baseline=8192 candidate=4096" in err.value.detail
    assert "kv_cache_dtype" not in attached_settings(base) and "port" not in attached_settings(base)


def test_launch_spec_has_no_urls_and_compares_equal_across_arms() -> None:
    engine = ExternalEngine({"baseline": ["http://10.0.0.1:30000"], "candidate": ["http://10.0.0.2:30000"]})
    base, cand = engine.launch_spec(parse_variant("bf16")), engine.launch_spec(parse_variant("fp8kv"))
    assert "10.0.0" not in repr(base) + repr(cand)
    require_only_quantization(base, cand)
    with pytest.raises(ConfigError, match="does not start attached servers"):
        engine.launch_spec(Variant("x", args=(("-c", "8192"),)))


# -- sharding ----------------------------------------------------------------------------


class FakeScorer(Scorer):
    """Answers the preflight probes like a working model; records every call it got."""

    def __init__(self, concurrency: int = 4, token_offset: int = 0) -> None:
        self.concurrency, self.offset = concurrency, token_offset
        self.calls: list[tuple[str, str]] = []
        self.closed = False

    async def loglikelihood(self, context: str, continuation: str) -> tuple[float, bool, int]:
        self.calls.append(("ll", context))
        return (-1.0 if continuation in (" Paris", " 6", " cold") else -9.0), True, 1

    async def generate(self, prompt: str, gen: Generation) -> dict[str, Any]:
        self.calls.append(("gen", prompt))
        return {"text": "x"}

    async def chat(self, payload: dict[str, Any]) -> dict[str, Any]:
        self.calls.append(("chat", json.dumps(payload["messages"])))
        return {}

    async def tokenize(self, text: str) -> list[int]:
        self.calls.append(("tok", text))
        return [ord(c) + self.offset for c in text]

    async def detokenize(self, tokens: list[int]) -> str:
        return "".join(chr(t - self.offset) for t in tokens)

    async def render_chat(self, messages: list[dict[str, Any]]) -> str:
        return f"<|user|>{messages[0]['content']}<|end|>"

    async def aclose(self) -> None:
        self.closed = True


def test_sharding_is_deterministic_sticky_and_spread() -> None:
    def run() -> list[FakeScorer]:
        fakes = [FakeScorer(concurrency=c) for c in (4, 2, 8)]
        sharded = ShardedScorer(fakes, ["http://a", "http://b", "http://c"])
        assert sharded.concurrency == 14

        async def go() -> None:
            questions = [f"Question {i}: which is right?\nAnswer:" for i in range(90)]
            await asyncio.gather(
                *(sharded.loglikelihood(q, f" choice {k}") for q in questions for k in range(4))
            )
            await sharded.generate("Q: 2+2?\nA:", Generation(max_tokens=8, stop=("\n",)))
            await sharded.chat({"messages": [{"role": "user", "content": "hi"}]})
            assert len(await sharded.loglikelihood_many(questions[0], [" a", " b"])) == 2
            await sharded.aclose()

        asyncio.run(go())
        return fakes

    first, second = run(), run()
    assert [f.calls for f in first] == [f.calls for f in second]  # reproducible assignment
    assert all(f.closed for f in first)
    owners: dict[str, set[int]] = {}
    for i, fake in enumerate(first):
        for kind, key in fake.calls:
            if kind == "ll":
                owners.setdefault(key, set()).add(i)
    assert len(owners) == 90 and all(len(o) == 1 for o in owners.values())
    assert (
        sum(sum(1 for k, c in f.calls if k == "ll" and c.startswith("Question 0:")) for f in first) == 6
    )  # a question's 4 choices: one URL
    per_shard = [sum(1 for k, _ in f.calls if k == "ll") // 4 for f in first]
    assert min(per_shard) >= 15, per_shard  # spread: about 30 questions each
    assert shard_index("The capital of France is", 3) == shard_index("The capital of France is", 3)
    assert [shard_index(str(i), 5) for i in range(6)] == [
        int.from_bytes(hashlib.sha256(str(i).encode()).digest()[:8], "big") % 5 for i in range(6)
    ]


def test_preflight_runs_on_every_url_and_tokenizers_must_agree() -> None:
    fakes = [FakeScorer(), FakeScorer()]
    report = asyncio.run(preflight_all(ShardedScorer(fakes, ["http://a", "http://b"]), server="baseline"))
    assert all(sum(k == "ll" for k, _ in f.calls) == 6 for f in fakes)  # every URL answered every probe
    assert {c["url"] for c in report.checks} == {"http://a", "http://b"} and report.tokenizer_fingerprint
    odd = ShardedScorer([FakeScorer(), FakeScorer(token_offset=7)], ["http://a", "http://b"])
    with pytest.raises(PreflightError, match="baseline URLs tokenize differently"):
        asyncio.run(preflight_all(odd, server="baseline"))


def test_scorer_shards_llamacpp_urls_with_their_slots(serve: Callable[..., Double], tmp_path: Path) -> None:
    from evalgate.engines.llamacpp import LlamaCppScorer

    a, b = serve("llamacpp"), serve("llamacpp")
    engine = ExternalEngine({"baseline": [a.url, b.url], "candidate": [a.url]})
    with engine.launch(engine.launch_spec(parse_variant("bf16")), LaunchSlot("baseline", tmp_path)) as handle:
        scorer = engine.scorer(handle, seed=7)
    assert scorer.urls == [a.url, b.url] and scorer.concurrency == 8
    assert all(isinstance(s, LlamaCppScorer) for s in scorer.scorers)
    assert [s.handle.base_url for s in scorer.scorers] == [a.url, b.url]
    asyncio.run(scorer.aclose())
    assert engine.version() == "llamacpp b6000-test"


@pytest.mark.parametrize("kind", ["sglang", "vllm"])
def test_gpu_protocols_need_their_scorer_module(serve: Callable[..., Double], kind: str) -> None:
    d = serve(kind)
    engine = ExternalEngine({"baseline": [d.url], "candidate": [d.url]})
    if importlib.util.find_spec(f"evalgate.engines.{kind}") is not None:
        assert engine.attach_info("baseline")["protocol"] == kind
        return
    with pytest.raises(ConfigError, match=f"needs evalgate.engines.{kind}"):
        engine.attach_info("baseline")
