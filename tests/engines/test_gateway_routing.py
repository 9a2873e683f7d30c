"""An arm of many workers behind smg, without smg: reading its workers listing, the refusal of an
arm whose workers answer differently, the policy choice, the routed client against test doubles,
the dead worker named, and the config that turns it on (engines/gateway, engines/client.py)."""

from __future__ import annotations

import asyncio
import math
import subprocess
from collections import Counter
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from evalgate.config import EvalgateConfig, LlamaCppConfig, load_config
from evalgate.engines import get_engine
from evalgate.engines._launcher import ServerHandle
from evalgate.engines.api import Generation, Position, Scorer
from evalgate.engines.client import ROUTING_KEY, GatewayRoute, HttpClient, RetryPolicy, routing_key
from evalgate.engines.gateway import (
    PROBE_TEXT,
    GatewayEngine,
    GatewayHandle,
    GatewayScorer,
    compare_workers,
    gateway_policy,
    parse_workers,
)
from evalgate.errors import ConfigError
from evalgate.variants import LaunchSpec
from tests.helpers.background import background_apps

# -- parse_workers ---------------------------------------------------------------------------


def _entry(url: str, role: str = "regular", **more: Any) -> dict[str, Any]:
    return {"url": url, "worker_type": role, "model_id": "m", "status": "ready", "is_healthy": True, **more}


def _listing(*entries: Any) -> dict[str, Any]:
    return {"workers": list(entries), "total": len(entries), "stats": {"regular_count": len(entries)}}


def test_parse_workers_reads_each_entry() -> None:
    data = _listing(
        _entry("http://127.0.0.1:1/", runtime_type="generic"),
        _entry("http://127.0.0.1:2", "prefill", bootstrap_port=8998),
        {"url": "http://127.0.0.1:3", "worker_type": "decode", "bootstrap_port": True, "is_healthy": False},
    )
    a, p, d = parse_workers(data, where="http://gw") or []
    assert (a.url, a.role, a.model_id, a.status, a.healthy, a.runtime) == (
        "http://127.0.0.1:1", "regular", "m", "ready", True, "generic",
    )  # fmt: skip
    assert (p.role, p.bootstrap_port) == ("prefill", 8998)
    assert (d.role, d.bootstrap_port, d.healthy, d.status) == ("decode", None, False, "")  # a bool is no port


@pytest.mark.parametrize(
    ("bad", "named"),
    [
        ({"worker_type": "regular"}, "entry 1"),  # no url
        ({"url": "127.0.0.1:9", "worker_type": "regular"}, "entry 1"),  # not http(s)
        ({"url": "http://127.0.0.1:9", "worker_type": "mixed"}, "'mixed'"),
        ("http://127.0.0.1:9", "entry 1"),
    ],
)
def test_parse_workers_refuses_a_malformed_entry(bad: Any, named: str) -> None:
    with pytest.raises(ConfigError, match="cannot read") as err:
        parse_workers(_listing(_entry("http://127.0.0.1:1"), bad), where="http://gw:30000")
    text = str(err.value)
    assert named in text and "http://gw:30000" in text and "entry 0" not in text
    assert err.value.exit_code == 2


@pytest.mark.parametrize(
    "data",
    [
        {"object": "list", "data": [{"id": "m"}]},  # a worker's /v1/models
        {"workers": [_entry("http://127.0.0.1:1")]},  # no stats: not smg's shape
        {"workers": "none", "stats": {}},
        [_entry("http://127.0.0.1:1")],
        "OK",
        None,
    ],
)
def test_parse_workers_gives_none_for_what_is_not_a_listing(data: Any) -> None:
    assert parse_workers(data, where="x") is None


# -- compare_workers -------------------------------------------------------------------------


def _probe(n: int = 6, shift: float = 0.0) -> list[Position]:
    """``n`` teacher-forced positions; ``shift`` moves probability from the top token to the next."""
    out: list[Position] = []
    for i in range(n):
        p = 0.7 - shift
        top = ((10 + i, math.log(p)), (20 + i, math.log(0.2 + shift)), (30 + i, math.log(0.05)))
        out.append((math.log(p), top))
    return out


def test_identical_workers_are_identical() -> None:
    found, odd = compare_workers({"http://a": _probe(), "http://b": _probe()}, tolerance=0.0)
    assert odd == []
    assert found["http://b"] == {"positions": 6, "identical": True, "mean_kld": 0.0, "top1_agree": "6/6"}


def test_a_worker_past_the_tolerance_is_odd() -> None:
    probes = {"http://a": _probe(), "http://b": _probe(), "http://c": _probe(shift=0.3)}
    found, odd = compare_workers(probes, tolerance=1e-5)
    assert odd == ["http://c"]
    assert found["http://c"]["mean_kld"] > 1e-3 and not found["http://c"]["identical"]
    assert found["http://c"]["top1_agree"] == "0/6"  # 0.5 now beats 0.4: another top-1 token


def test_noise_within_the_tolerance_is_not_odd() -> None:
    probes = {"http://a": _probe(), "http://b": _probe(shift=1e-4)}
    found, odd = compare_workers(probes, tolerance=1e-5)
    assert odd == [] and not found["http://b"]["identical"]
    assert 0 < found["http://b"]["mean_kld"] <= 1e-5
    _, strict = compare_workers(probes, tolerance=0.0)
    assert strict == ["http://b"]


def test_a_different_number_of_positions_is_odd() -> None:
    found, odd = compare_workers({"http://a": _probe(6), "http://b": _probe(5)}, tolerance=1.0)
    assert odd == ["http://b"] and found["http://b"] == {"positions": 5, "identical": False, "mean_kld": None}


# -- gateway_policy --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("deterministic", "resume", "policy"),
    [
        (True, False, "consistent_hashing"),
        (False, True, "consistent_hashing"),
        (False, False, "consistent_hashing"),
    ],
)
def test_auto_policy_routes_by_key_where_a_rerun_must_match(
    deterministic: bool, resume: bool, policy: str
) -> None:
    assert gateway_policy("auto", deterministic=deterministic, resume=resume) == policy


@pytest.mark.parametrize("configured", ["round_robin", "consistent_hashing"])
def test_an_explicit_policy_wins(configured: str) -> None:
    assert gateway_policy(configured, deterministic=True, resume=True) == configured


# -- the routed client -----------------------------------------------------------------------


def _recording_app(seen: list[dict[str, Any]], name: str, routed: str | None) -> web.Application:
    async def handle(request: web.Request) -> web.Response:
        body = await request.json()
        seen.append({"at": name, "path": request.path, "headers": dict(request.headers), "body": body})
        headers = {"x-smg-routed-worker-id": routed} if routed else {}
        return web.json_response({"tokens": [1, 2], "text": "ok"}, headers=headers)

    app = web.Application()
    app.router.add_post("/{path:.*}", handle)
    return app


@pytest.fixture
def gateway_and_worker() -> Iterator[tuple[str, str, list[dict[str, Any]]]]:
    """A "gateway" that names a routed worker in its answers and a "worker", both recording."""
    seen: list[dict[str, Any]] = []
    apps = background_apps()
    serve = next(apps)
    try:
        yield (
            serve(_recording_app(seen, "gateway", "http://w1")),
            serve(_recording_app(seen, "worker", None)),
            seen,
        )
    finally:
        apps.close()


KEY = "eg-worker-key"
"""A key long enough that masking it in a log tail masks nothing else."""
FAST = RetryPolicy(attempts=1, backoff_s=0.01, max_backoff_s=0.02, timeout_s=5)


def test_routed_client_sends_scoring_to_the_gateway_and_tokenizing_to_a_worker(
    gateway_and_worker: tuple[str, str, list[dict[str, Any]]],
) -> None:
    gw, worker, seen = gateway_and_worker
    route = GatewayRoute(direct_url=worker + "/", model="fake")

    async def go() -> None:
        async with HttpClient(gw, api_key="k", concurrency=2, retry=FAST, gateway=route) as client:
            await client.post("/v1/completions", {"prompt": "a"})
            token = ROUTING_KEY.set("item 7")
            try:
                await client.post("/v1/completions", {"model": "mine", "prompt": "b"})
                await client.post("/generate", {"text": "c"})
                await client.post("/tokenize", {"content": "d"})
            finally:
                ROUTING_KEY.reset(token)

    asyncio.run(go())
    unkeyed, kept, generate, tokenize = seen
    assert (unkeyed["at"], unkeyed["path"], unkeyed["body"]) == (
        "gateway",
        "/v1/completions",
        {"model": "fake", "prompt": "a"},
    )
    assert "X-SMG-Routing-Key" not in unkeyed["headers"]
    assert kept["body"] == {"model": "mine", "prompt": "b"}
    assert kept["headers"]["X-SMG-Routing-Key"] == routing_key("item 7")
    assert (generate["at"], generate["body"]) == ("gateway", {"text": "c"})  # smg fills /generate's model
    assert generate["headers"]["X-SMG-Routing-Key"] == routing_key("item 7")
    assert (tokenize["at"], tokenize["path"], tokenize["body"]) == ("worker", "/tokenize", {"content": "d"})
    assert "X-SMG-Routing-Key" not in tokenize["headers"]
    assert all(s["headers"]["Authorization"] == "Bearer k" for s in seen)
    assert route.routed == Counter({"http://w1": 3})  # the tokenizer's call is no routed answer


def test_routing_key_is_a_short_header_safe_digest() -> None:
    key = routing_key("Question: " + "x" * 10_000 + "\ud800")  # long, and not valid UTF-8 on its own
    assert len(key) == 32 and all(c in "0123456789abcdef" for c in key)
    assert routing_key("a") == routing_key("a") != routing_key("b")


# -- GatewayScorer ---------------------------------------------------------------------------


class ProbeDouble(Scorer):
    """A worker (or the gateway) answering the probe with fixed positions; records the routing key
    each call saw."""

    def __init__(self, positions: list[Position] | None = None) -> None:
        self.concurrency = 2
        self.positions = positions if positions is not None else _probe()
        self.keys: list[str | None] = []
        self.probed: list[tuple[list[int], int, int]] = []
        self.cache_prompt: bool | None = None
        """llama.cpp's per-request switch, where a test gives the double one."""
        self.route: GatewayRoute | None = None

    def set_prompt_cache(self, on: bool) -> bool | None:
        before = self.cache_prompt
        if before is not None:
            self.cache_prompt = on
        return before

    def gateway_route(self) -> GatewayRoute | None:
        return self.route

    async def token_distributions(self, tokens: Sequence[int], *, start: int, top_k: int) -> list[Position]:
        self.probed.append((list(tokens), start, top_k))
        return self.positions

    async def tokenize(self, text: str) -> list[int]:
        return [len(w) for w in text.split()]

    async def loglikelihood(self, context: str, continuation: str) -> tuple[float, bool, int]:
        self.keys.append(ROUTING_KEY.get())
        await asyncio.sleep(0)
        return -1.0, True, 1

    async def generate(self, prompt: str, gen: Generation) -> dict[str, Any]:
        self.keys.append(ROUTING_KEY.get())
        return {"text": "x"}


def _check(scorer: GatewayScorer) -> dict[str, dict[str, Any]]:
    return asyncio.run(scorer.check_workers(server="candidate"))


def test_check_workers_passes_alike_workers_and_probes_each_with_the_gateways_tokens() -> None:
    workers = {"http://w0": ProbeDouble(), "http://w1": ProbeDouble()}
    probe = _check(GatewayScorer(ProbeDouble(), workers, tolerance=0.0))
    assert set(probe) == set(workers) and all(
        v["identical"] and v["role"] == "regular" for v in probe.values()
    )
    tokens = [len(w) for w in PROBE_TEXT.split()]
    assert all(w.probed == [(tokens, 1, 8)] for w in workers.values())


def test_workers_probe_without_their_prompt_cache_and_the_gateway_keeps_its() -> None:
    """llama.cpp's logprobs move with the prompt-cache state: the probe must not depend on it."""
    through, worker = ProbeDouble(), ProbeDouble()
    through.cache_prompt = worker.cache_prompt = True
    GatewayScorer(through, {"http://w0": worker})
    assert worker.cache_prompt is False and through.cache_prompt is True


def test_check_workers_refuses_a_mixed_arm_naming_the_odd_worker() -> None:
    workers = {
        "http://w0": ProbeDouble(),
        "http://w1": ProbeDouble(),
        "http://w2": ProbeDouble(_probe(shift=0.3)),
    }
    with pytest.raises(ConfigError, match="candidate arm mixes workers") as err:
        _check(GatewayScorer(ProbeDouble(), workers, tolerance=1e-5))
    assert err.value.exit_code == 2
    assert "http://w2 answers a fixed probe differently from http://w0" in str(err.value)
    assert "http://w1 answers" not in str(err.value)


def test_check_workers_compares_only_workers_of_one_role() -> None:
    workers = {
        "http://p0": ProbeDouble(),
        "http://d0": ProbeDouble(_probe(shift=0.3)),  # a decode worker need not answer as a prefill one
        "http://d1": ProbeDouble(_probe(shift=0.3)),
    }
    roles = {"http://p0": "prefill", "http://d0": "decode", "http://d1": "decode"}
    probe = _check(GatewayScorer(ProbeDouble(), workers, roles=roles, tolerance=1e-5))
    assert {u: v["role"] for u, v in probe.items()} == roles
    assert all(v["mean_kld"] == 0.0 for v in probe.values())

    workers["http://d1"] = ProbeDouble()  # now the decode workers differ from each other
    with pytest.raises(ConfigError, match="http://d1 answers a fixed probe differently from http://d0"):
        _check(GatewayScorer(ProbeDouble(), workers, roles=roles, tolerance=1e-5))


def test_each_call_carries_its_items_routing_key_and_only_during_the_call() -> None:
    through = ProbeDouble()
    through.route = GatewayRoute("http://w0", "m", Counter({"http://w0": 2}))
    scorer = GatewayScorer(through, {"http://w0": ProbeDouble(), "http://w1": ProbeDouble()})
    assert scorer.concurrency == 4  # every worker's requests in flight

    async def go() -> None:
        await asyncio.gather(scorer.loglikelihood("Q1", " a"), scorer.loglikelihood("Q2", " b"))
        assert await scorer.loglikelihood_many("Q3", [" a", " b"]) == [(-1.0, True, 1)] * 2
        await scorer.generate("P", Generation(max_tokens=1))
        assert ROUTING_KEY.get() is None

    asyncio.run(go())
    assert through.keys == ["Q1", "Q2", "Q3", "Q3", "P"]
    assert ROUTING_KEY.get() is None
    assert scorer.routed() == {"http://w0": 2}


# -- a dead worker, and the config ------------------------------------------------------------


def test_gateway_handle_names_the_dead_worker(tmp_path: Path) -> None:
    exited = subprocess.Popen(["sleep", "0"])
    exited.wait()
    (tmp_path / "baseline-w1.log").write_text("worker one said goodbye\n")
    live = ServerHandle("baseline-w0", "http://127.0.0.1:1", KEY, ["llama-server"], tmp_path / "w0.log")
    dead = ServerHandle(
        "baseline-w1",
        "http://127.0.0.1:2",
        KEY,
        ["llama-server", "--port", "2"],
        tmp_path / "baseline-w1.log",
        exited,
    )
    handle = GatewayHandle(
        "baseline", "http://127.0.0.1:3", KEY, ["smg"], tmp_path / "gw.log", workers=[live, dead]
    )
    assert not handle.alive()
    err = handle.died("while scoring")
    assert "the baseline-w1 server died while scoring (exit code 0)" in str(err)
    assert "worker one said goodbye" in err.detail and "--port 2" in err.detail

    healthy = GatewayHandle(
        "baseline", "http://127.0.0.1:3", KEY, ["smg"], tmp_path / "gw.log", workers=[live]
    )
    assert healthy.alive() and "the baseline server died" in str(healthy.died())


@pytest.mark.parametrize(
    ("toml", "where"),
    [("[llamacpp]\nworkers = 0\n", "llamacpp.workers"), ('[gateway]\npolicy = "bogus"\n', "gateway.policy")],
)
def test_config_refuses_bad_gateway_settings(tmp_path: Path, toml: str, where: str) -> None:
    path = tmp_path / "evalgate.toml"
    path.write_text(toml)
    with pytest.raises(ConfigError, match=where) as err:
        load_config(path)
    assert err.value.exit_code == 2


def test_workers_wrap_the_engine_in_a_gateway() -> None:
    assert not isinstance(get_engine("llamacpp", EvalgateConfig()), GatewayEngine)
    engine = get_engine("llamacpp", EvalgateConfig(llamacpp=LlamaCppConfig(workers=2, deterministic=True)))
    assert isinstance(engine, GatewayEngine) and engine.workers == 2 and engine.name == "llamacpp"
    assert engine.policy == "consistent_hashing"
    spec = LaunchSpec("llamacpp", "/models/m.gguf", (("-c", "4096"),))
    cmd = engine.launch_command(spec, name="baseline", port=8080, api_key="k")
    smg = next(i for i, part in enumerate(cmd) if Path(part).name == "smg")
    assert cmd[smg + 1] == "launch" and "--disable-retries" in cmd[smg:]
    assert cmd[smg:].count("--worker-urls") == 1 and "/models/m.gguf" in cmd[:smg]
    assert cmd[cmd.index("--policy") + 1] == "consistent_hashing"
    assert any("2 workers per arm behind smg" in note for note in engine.plan_notes(spec))
