"""Issue #43, an attached gateway's side: its listing chooses where evalgate connects with the arm's
key, its routed-worker header is the server's text, and what answers through it may not be what
it lists. Each case ends in exit 2 (or, for an item, an error naming the cause) with no key in any
file and nothing sent off the machine, never in a PASS.

Fake gateways are small aiohttp apps on 127.0.0.1 returning a crafted ``GET /workers`` listing and
forwarding scoring requests to hostile llama-server stubs (tests/helpers/hostile_server.py). No
packet leaves the loopback: ``no_leaving`` replaces name resolution and ``connect`` so that any
attempt to reach another host fails the test's assertion instead of the network.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import json
import socket
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from evalgate.config import load_config
from evalgate.engines.attach import ExternalEngine
from evalgate.engines.client import GatewayRoute, HttpClient, RetryPolicy, UnlistedWorker
from evalgate.engines.gateway import parse_workers
from evalgate.errors import ConfigError
from tests.engines.test_hostile_answers import compare, exam, records
from tests.helpers.background import background_apps, serving
from tests.helpers.hostile_server import Hostile, hostile_app

BASE_KEY = "eg-base-key-0123456789"
CAND_KEY = "eg-cand-key-9876543210"


# -- nothing leaves the loopback ---------------------------------------------------------------------


def _loopback(host: Any) -> bool:
    if host is None:
        return True
    name = host.decode() if isinstance(host, bytes) else str(host)
    if name.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(name.split("%")[0]).is_loopback
    except ValueError:
        return False


@pytest.fixture
def no_leaving(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every name resolution and every connect to anything but the loopback is refused, and
    listed: the test asserts the list is empty (httpx and aiohttp both resolve and connect through
    these two)."""
    tried: list[str] = []
    resolve, connect = socket.getaddrinfo, socket.socket.connect

    def guarded_resolve(host: Any, *args: Any, **kwargs: Any) -> Any:
        if not _loopback(host):
            tried.append(f"resolve {host}")
            raise socket.gaierror(socket.EAI_NONAME, "refused by the test: not the loopback")
        return resolve(host, *args, **kwargs)

    def guarded_connect(sock: socket.socket, address: Any) -> Any:
        if isinstance(address, tuple) and not _loopback(address[0]):
            tried.append(f"connect {address[0]}")
            raise ConnectionRefusedError("refused by the test: not the loopback")
        return connect(sock, address)

    monkeypatch.setattr(socket, "getaddrinfo", guarded_resolve)
    monkeypatch.setattr(socket.socket, "connect", guarded_connect)
    return tried


@pytest.fixture(autouse=True)
def _keys(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EVALGATE_BASELINE_API_KEY", BASE_KEY)
    monkeypatch.setenv("EVALGATE_CANDIDATE_API_KEY", CAND_KEY)


def leaks(folder: Path, *texts: str) -> list[str]:
    """Files under ``folder`` holding any of ``texts``."""
    return [
        str(p) for p in folder.rglob("*") if p.is_file() and any(t.encode() in p.read_bytes() for t in texts)
    ]


# -- the doubles ---------------------------------------------------------------------------------------


@dataclass
class Gateway:
    """A fake smg: lists ``listed`` in ``GET /workers``, forwards each scoring request to ``to`` (the
    first listed worker by default; chat requests to ``chat_to`` when set) and names in
    ``x-smg-routed-worker-id`` the worker ``names`` (default: where it forwarded), or echoes the
    request's ``Authorization`` there (``echo_auth``)."""

    listed: list[str]
    to: str = ""
    names: str | None = None
    chat_to: str = ""
    echo_auth: bool = False
    url: str = ""
    seen: list[str] = field(default_factory=list)


def gateway_app(g: Gateway) -> web.Application:
    async def workers(_: web.Request) -> web.Response:
        entries = [
            {"url": u, "worker_type": "regular", "model_id": "stub", "status": "ready", "is_healthy": True}
            for u in g.listed
        ]
        return web.json_response({"workers": entries, "total": len(entries), "stats": {}})

    async def scoring(request: web.Request) -> web.Response:
        body = await request.read()
        g.seen.append(request.path)
        chat = request.path == "/v1/chat/completions" and g.chat_to
        target = g.chat_to if chat else g.to or g.listed[0]
        auth = request.headers.get("Authorization", "")
        async with (
            aiohttp.ClientSession() as session,
            session.post(
                target + request.path,
                data=body,
                headers={"Authorization": auth, "Content-Type": "application/json"},
            ) as resp,
        ):
            data, status = await resp.read(), resp.status
        named = auth if g.echo_auth else (target if chat or g.names is None else g.names)
        return web.Response(
            body=data,
            status=status,
            content_type="application/json",
            headers={"x-smg-routed-worker-id": named},
        )

    app = web.Application()
    app.router.add_get("/workers", workers)
    app.router.add_post("/v1/completions", scoring)
    app.router.add_post("/v1/chat/completions", scoring)
    return app


def numerics_app(h: Hostile, logprob: float) -> web.Application:
    """The stub with a model's shape of forced-token answers: each forced token at ``logprob`` and
    the top ``n_probs`` alternatives asked for (the stub alone lists only the forced token). Two
    ``logprob`` values are two arms' numerics: their answers, and every check but the probe, alike."""

    @web.middleware
    async def topk(request: web.Request, handler: Any) -> web.StreamResponse:
        resp = await handler(request)  # it records the body it read: the last one is this request's
        body = h.seen[-1][1] if request.path == "/v1/completions" and h.seen else {}
        if "grammar" not in body or not isinstance(resp, web.Response) or not resp.body:
            return resp
        data = json.loads(bytes(resp.body))
        for choice in data["choices"]:
            for entry in (choice.get("logprobs") or {}).get("content") or []:
                others = [{"id": 2_000_000 + j, "logprob": -6.0 - j} for j in range(int(body["n_probs"]) - 1)]
                entry["logprob"] = logprob
                entry["top_logprobs"] = [{"id": entry["id"], "logprob": logprob}, *others]
        return web.json_response(data)

    app = hostile_app(h)
    app.middlewares.append(topk)
    return app


@dataclass
class Fleet:
    stub: Callable[..., Hostile]
    shifted: Callable[..., Hostile]
    gateway: Callable[..., Gateway]


@pytest.fixture
def fleet() -> Iterator[Fleet]:
    with (
        serving(Hostile, lambda h: numerics_app(h, -1.0)) as stub,
        serving(Hostile, lambda h: numerics_app(h, -2.0)) as shifted,
        serving(Gateway, gateway_app) as gateway,
    ):
        yield Fleet(stub, shifted, gateway)


def run(base: str, cand: str, tmp_path: Path, capsys: Any, *flags: str) -> tuple[int, str, Path]:
    out = tmp_path / "run"
    exam_dir = tmp_path / f"exam{len(list(tmp_path.glob('exam*')))}"
    code, printed = compare(base, cand, out, capsys, "--suites", exam(exam_dir, "yes"), *flags)
    return code, printed, out


# -- 1. the listing names only workers the user allowed -----------------------------------------------


@pytest.mark.parametrize("foreign", ["http://192.0.2.44:80", "http://worker.example.invalid:8080"])
def test_a_worker_on_another_host_is_refused_before_any_connection(
    foreign: str, fleet: Fleet, no_leaving: list[str], tmp_path: Path, capsys: Any
) -> None:
    mine = fleet.stub("good", answer="yes")
    base = fleet.gateway([fleet.stub("good", answer="yes").url])
    cand = fleet.gateway([mine.url, foreign])
    code, printed, out = run(base.url, cand.url, tmp_path, capsys)
    assert code == 2, printed
    assert foreign in printed and "[gateway] allow_workers" in printed and "candidate" in printed
    assert no_leaving == []  # never resolved, never connected: the key went nowhere
    assert not mine.seen  # refused before any worker of the listing was contacted
    assert not list(out.glob("items/*.jsonl"))
    assert not leaks(tmp_path, BASE_KEY, CAND_KEY) and CAND_KEY not in printed


@pytest.mark.parametrize(
    ("spelled", "why"),
    [
        ("http://user:{key}@127.0.0.1:{port}", "credentials"),
        ("http://127.0.0.1:{port}/{key}", "API key"),
        ("http://127.0.0.1:99999", "port"),
        ("http://127.0.0.1:{port}/" + "x" * 300, "longer than 200"),
    ],
)
def test_a_listed_url_evalgate_could_not_use_as_written_is_refused(
    spelled: str, why: str, fleet: Fleet, no_leaving: list[str], tmp_path: Path, capsys: Any
) -> None:
    worker = fleet.stub("good")
    listed = spelled.format(key=CAND_KEY, port=worker.url.rsplit(":", 1)[1])
    base = fleet.gateway([fleet.stub("good").url])
    code, printed, _ = run(base.url, fleet.gateway([listed]).url, tmp_path, capsys)
    assert code == 2, printed
    assert why in printed and CAND_KEY not in printed
    assert not worker.seen and no_leaving == []
    assert not leaks(tmp_path, BASE_KEY, CAND_KEY)


def test_allow_workers_names_the_other_hosts(fleet: Fleet, no_leaving: list[str], tmp_path: Path) -> None:
    """``localhost`` is another host than the gateway's ``127.0.0.1`` until the user says so."""
    worker = fleet.stub("good")
    port = int(worker.url.rsplit(":", 1)[1])
    gateway = fleet.gateway([f"http://localhost:{port}"])
    urls = {"baseline": [gateway.url], "candidate": ["http://127.0.0.1:9"]}
    with pytest.raises(ConfigError, match=r"allow_workers") as err:
        ExternalEngine(urls).attach_info("baseline")
    assert err.value.exit_code == 2 and f'"localhost:{port}"' in err.value.fix and not worker.seen
    with pytest.raises(ConfigError, match="neither the gateway's"):
        ExternalEngine(urls, allow_workers=["localhost:1"]).attach_info("baseline")
    assert not worker.seen
    for allowed in (["localhost"], [f"LOCALHOST:{port}"], ["10.0.0.5", f"localhost:{port}"]):
        info = ExternalEngine(urls, allow_workers=allowed).attach_info("baseline")
        assert [w["url"] for w in info["gateway"]["workers"]] == [f"http://localhost:{port}"]
    assert no_leaving == []


@pytest.mark.parametrize("bad", ["http://h:1", "h:port", "user@h", "h/x", ""])
def test_allow_workers_refuses_what_is_not_a_host(bad: str) -> None:
    with pytest.raises(ConfigError, match=r"\[gateway\] allow_workers has") as err:
        ExternalEngine({"baseline": ["http://h:1"], "candidate": ["http://h:2"]}, allow_workers=[bad])
    assert err.value.exit_code == 2


def test_allow_workers_is_a_gateway_setting(tmp_path: Path) -> None:
    path = tmp_path / "evalgate.toml"
    path.write_text('[gateway]\nallow_workers = ["10.0.0.5:30000", "[fd00::5]", "fd00::6"]\n')
    allowed = load_config(path).gateway.allow_workers
    engine = ExternalEngine({"baseline": ["http://h:1"], "candidate": ["http://h:2"]}, allow_workers=allowed)
    assert [(a.host, a.port) for a in engine.allow_workers] == [
        ("10.0.0.5", 30000), ("fd00::5", None), ("fd00::6", None),
    ]  # fmt: skip


# -- 2. the routed-worker header is the server's text ----------------------------------------------------


def test_a_gateway_echoing_the_key_as_its_worker_is_refused_and_stores_no_key(
    fleet: Fleet, no_leaving: list[str], tmp_path: Path, capsys: Any
) -> None:
    base = fleet.gateway([fleet.stub("good", answer="yes").url])
    cand = fleet.gateway([fleet.shifted("good", answer="yes").url], echo_auth=True)
    code, printed, out = run(base.url, cand.url, tmp_path, capsys)
    assert code == 2, printed
    assert "does not list" in printed and "Bearer ***" in printed
    assert CAND_KEY not in printed and not leaks(tmp_path, BASE_KEY, CAND_KEY)
    assert not list(out.glob("items/*.candidate.jsonl")) and no_leaving == []


@contextlib.contextmanager
def _serve_header(value: str | None) -> Iterator[str]:
    """A "gateway" whose every answer names ``value`` as its worker (no header for None)."""

    async def answer(_: web.Request) -> web.Response:
        headers = {"x-smg-routed-worker-id": value} if value is not None else {}
        return web.json_response({"choices": []}, headers=headers)

    app = web.Application()
    app.router.add_post("/v1/completions", answer)
    apps = background_apps()
    try:
        yield next(apps)(app)
    finally:
        apps.close()


def _post(url: str, route: GatewayRoute, key: str = CAND_KEY) -> Any:
    async def go() -> Any:
        retry = RetryPolicy(attempts=1, timeout_s=5)
        async with HttpClient(url, api_key=key, concurrency=1, retry=retry, gateway=route) as client:
            return await client.post("/v1/completions", {"prompt": "p"})

    return asyncio.run(go())


@pytest.mark.parametrize(
    ("header", "stored"),
    [
        ("http://127.0.0.1:7001", "http://127.0.0.1:7001"),
        ("http://127.0.0.1:7001/", "http://127.0.0.1:7001"),
        ("http://127.0.0.1:7001@3", "http://127.0.0.1:7001"),  # smg's data-parallel rank
    ],
)
def test_an_answer_from_a_listed_worker_is_counted_as_that_worker(
    header: str, stored: str, no_leaving: list[str]
) -> None:
    route = GatewayRoute("http://127.0.0.1:7001", "m", listed=frozenset({"http://127.0.0.1:7001"}))
    with _serve_header(header) as url:
        _post(url, route)
    assert route.routed == {stored: 1}


@pytest.mark.parametrize(
    "header",
    [f"Bearer {CAND_KEY}", "http://127.0.0.1:7002", "http://127.0.0.1:7001@x", "x" * 5000, None],
)
def test_an_answer_from_an_unlisted_worker_is_never_counted_and_never_quotes_the_key(
    header: str | None, no_leaving: list[str]
) -> None:
    route = GatewayRoute("http://127.0.0.1:7001", "m", listed=frozenset({"http://127.0.0.1:7001"}))
    with _serve_header(header) as url, pytest.raises(UnlistedWorker, match="does not list") as err:
        _post(url, route)
    assert not route.routed
    assert CAND_KEY not in str(err.value) and len(err.value.worker) <= 80
    assert err.value.exit_code == 3  # an item's error: retried, then recorded, never scored


def test_a_route_without_a_listing_stores_the_header_masked_and_cut(no_leaving: list[str]) -> None:
    route = GatewayRoute("http://127.0.0.1:7001", "m")
    with _serve_header(f"Bearer {CAND_KEY} " + "y" * 500) as url:
        _post(url, route)
    (stored,) = route.routed
    assert CAND_KEY not in stored and stored.startswith("Bearer ***") and len(stored) <= 80


def test_a_listings_text_is_masked_and_cut() -> None:
    data = {
        "workers": [
            {"url": "http://127.0.0.1:1", "model_id": f"m {CAND_KEY}", "status": "ready " + "z" * 500}
        ],
        "stats": {},
    }
    (w,) = parse_workers(data, where="gw", secrets=[CAND_KEY]) or []
    assert CAND_KEY not in w.model_id and "***" in w.model_id and len(w.status) <= 200


# -- 3. what answers, not what is listed -----------------------------------------------------------------


def test_two_gateways_in_front_of_one_worker_are_refused(
    fleet: Fleet, no_leaving: list[str], tmp_path: Path, capsys: Any
) -> None:
    one = fleet.stub("good", answer="yes")
    code, printed, out = run(fleet.gateway([one.url]).url, fleet.gateway([one.url]).url, tmp_path, capsys)
    assert code == 2, printed
    assert "are one server" in printed and one.url in printed and "--same-server-ok" in printed
    assert not list(out.glob("items/*.jsonl")) and no_leaving == []


def test_a_gateway_listing_the_other_arms_server_is_refused(
    fleet: Fleet, no_leaving: list[str], tmp_path: Path, capsys: Any
) -> None:
    base = fleet.stub("good", answer="yes")
    cand = fleet.gateway([base.url + "/"])
    code, printed, _ = run(base.url, cand.url, tmp_path, capsys)
    assert code == 2, printed
    assert "are one server" in printed and no_leaving == []


@pytest.mark.parametrize("names", ["its own worker", "the baseline's"])
def test_a_gateway_forwarding_to_the_baseline_is_refused(
    names: str, fleet: Fleet, no_leaving: list[str], tmp_path: Path, capsys: Any
) -> None:
    """It lists its own worker (other numerics than the baseline's) and forwards to the baseline's
    server: naming its own worker (a lie) or the one that answered (which it does not list)."""
    theirs = fleet.stub("good", answer="yes")
    mine = fleet.shifted("good", answer="yes")
    base = fleet.gateway([theirs.url])
    said = mine.url if names == "its own worker" else theirs.url
    cand = fleet.gateway([mine.url], to=theirs.url, names=said)
    code, printed, out = run(base.url, cand.url, tmp_path, capsys)
    assert code == 2, printed
    cause = "answers a fixed probe unlike the worker it names" if said == mine.url else "does not list"
    assert cause in printed and "candidate" in printed
    assert not list(out.glob("items/*.candidate.jsonl")) and no_leaving == []


def test_items_routed_to_an_unlisted_worker_are_errors_never_scores(
    fleet: Fleet, no_leaving: list[str], tmp_path: Path, capsys: Any
) -> None:
    """Right through the preflight, then every item (chat) from the baseline's server."""
    theirs = fleet.stub("good", answer="yes")
    mine = fleet.stub("good", answer="no")
    cand = fleet.gateway([mine.url], chat_to=theirs.url)
    code, printed, out = run(fleet.gateway([theirs.url]).url, cand.url, tmp_path, capsys)
    assert code == 3, printed
    kept = records(out, "private:exam0", "candidate")
    assert kept and all(r.error and "does not list" in r.error and not r.metrics for r in kept)
    assert all(r.extra.workers is None for r in kept)
    assert no_leaving == []


def test_a_pair_of_honest_gateways_passes_and_records_its_listed_workers(
    fleet: Fleet, no_leaving: list[str], tmp_path: Path, capsys: Any
) -> None:
    """The positive control: other numerics on the candidate, each gateway answering from its own."""
    theirs, mine = fleet.stub("good", answer="yes"), fleet.shifted("good", answer="yes")
    base, cand = fleet.gateway([theirs.url]), fleet.gateway([mine.url])
    code, printed, out = run(base.url, cand.url, tmp_path, capsys)
    assert code == 0, printed
    for arm, worker in (("baseline", theirs.url), ("candidate", mine.url)):
        kept = records(out, "private:exam0", arm)
        assert kept and all(r.extra.workers == [worker] for r in kept)
        manifest = json.loads((out / "manifest.json").read_text())
        gateway = manifest["arms"][arm]["server"]["gateway"]
        assert set(gateway["routed"]) == {worker}
        checks = {c["check"] for c in manifest["arms"][arm]["preflight"]}
        assert "the gateway answers as its workers" in checks
    assert not leaks(tmp_path, BASE_KEY, CAND_KEY) and no_leaving == []


def test_same_server_ok_lets_two_gateways_share_a_worker(
    fleet: Fleet, no_leaving: list[str], tmp_path: Path, capsys: Any
) -> None:
    one = fleet.stub("good", answer="yes")
    base, cand = fleet.gateway([one.url]), fleet.gateway([one.url])
    code, printed, _ = run(base.url, cand.url, tmp_path, capsys, "--same-server-ok")
    assert code == 0, printed  # on purpose: an A/A check of the harness


def test_the_allow_list_reaches_the_attached_engine_from_evalgate_toml() -> None:
    """[gateway] allow_workers is what settle hands the attached engine (not only a constructor argument)."""
    from evalgate.config import EvalgateConfig
    from evalgate.request import CompareRequest
    from evalgate.run.settle import _engine

    cfg = EvalgateConfig.model_validate({"gateway": {"allow_workers": ["worker-a:8000"]}})
    req = CompareRequest(baseline_url=["http://127.0.0.1:1"], candidate_url=["http://127.0.0.1:2"])
    engine, attached = _engine(req, cfg)
    assert attached and "worker-a" in repr(engine.allow_workers)  # type: ignore[attr-defined]


def test_an_infinite_cached_token_count_is_an_invalid_answer_not_a_crash() -> None:
    """#43: `cached_tokens: Infinity` reached int() and crashed through the catch-all (OverflowError)."""
    from evalgate.engines._scoring import completion_observation
    from evalgate.errors import InvalidResponse

    data = {
        "choices": [{"text": "x"}],
        "usage": {"prompt_tokens": 3, "prompt_tokens_details": {"cached_tokens": float("inf")}},
    }
    with pytest.raises(InvalidResponse):
        completion_observation(data, 0.1, "x")


@pytest.mark.parametrize("bad", [-1, 2**53, 2**53 + 1])
def test_a_token_id_that_is_no_vocabulary_index_is_an_item_error(bad: int) -> None:
    """#43: ids 2**53 and 2**53 + 1 (one id in float64) and a negative id reached the drift rows."""
    from evalgate.engines._scoring import check_positions
    from evalgate.errors import InvalidResponse

    top = [(bad, -0.1), (7, -2.5)]
    with pytest.raises(InvalidResponse, match="token id"):
        check_positions([(None, -0.1, top)], [bad if bad >= 0 else 7], "candidate", top_k=2)
