"""The real smg (PyPI smg 1.13.0, ``evalgate[gateway]``) in front of two fake workers: evalgate's
reading of its ``GET /workers`` is checked against the program itself, not a transcript of it, in
regular mode (started by ``launch_gateway``) and PD mode. Skipped where smg is not installed."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from aiohttp import web

from evalgate.engines._launcher import ServerHandle, free_port, new_api_key, run_process
from evalgate.engines.gateway import GatewayWorker, find_smg, launch_gateway, read_workers
from evalgate.errors import ConfigError
from tests.helpers.background import background_apps

pytestmark = pytest.mark.timeout(60)


@pytest.fixture(scope="module")
def smg() -> Path:
    try:
        return find_smg()
    except ConfigError:
        pytest.skip("smg is not installed (pip install 'evalgate[gateway]'); the real-gateway tests need it")


def _worker_app() -> web.Application:
    """Just enough of an OpenAI-compatible worker for smg to register it (every other path 404)."""

    async def health(_: web.Request) -> web.Response:
        return web.json_response({"status": "ok"})

    async def models(_: web.Request) -> web.Response:
        card = {"id": "fake", "object": "model", "owned_by": "llamacpp"}
        return web.json_response({"object": "list", "data": [card]})

    app = web.Application()
    app.router.add_get("/health", health)
    app.router.add_get("/v1/models", models)
    return app


@pytest.fixture(scope="module")
def workers() -> Iterator[list[str]]:
    """Two fake workers' base URLs on 127.0.0.1."""
    apps = background_apps()
    serve = next(apps)
    try:
        yield [serve(_worker_app()), serve(_worker_app())]
    finally:
        apps.close()


def _listed(url: str, key: str, expected: int) -> Callable[[], bool]:
    def ready() -> bool:
        found = read_workers(url, key, timeout_s=2.0)
        return found is not None and len(found) == expected and all(w.status == "ready" for w in found)

    return ready


def test_launch_gateway_lists_regular_workers(smg: Path, workers: list[str], tmp_path: Path) -> None:
    key = new_api_key()
    handles = {
        u: ServerHandle(f"w{i}", u, key, ["fake"], tmp_path / f"w{i}.log") for i, u in enumerate(workers)
    }
    t0 = time.monotonic()
    with launch_gateway(
        smg,
        handles,
        name="baseline",
        log_dir=tmp_path,
        api_key=key,
        policy="consistent_hashing",
        timeout_s=20,
    ) as (gateway, listed):
        assert time.monotonic() - t0 < 15
        assert sorted(w.url for w in listed) == sorted(workers)
        assert {(w.role, w.status, w.healthy, w.model_id) for w in listed} == {
            ("regular", "ready", True, "fake")
        }
        assert all(w.bootstrap_port is None for w in listed)
        assert gateway.alive() and gateway.name == "baseline-gateway"
        assert key not in " ".join(gateway.command)  # the key is masked in what is recorded

        again = read_workers(gateway.base_url, key)
        assert again is not None and {w.url for w in again} == set(workers)
        assert read_workers(gateway.base_url, None) is None  # 401 without the gateway's key
        assert read_workers(gateway.base_url, "eg-wrong") is None
        assert read_workers(workers[0], key) is None  # a worker is not a gateway (404 on /workers)
    assert not gateway.alive()  # torn down with its process group


def test_pd_listing_has_roles_and_bootstrap_port(smg: Path, workers: list[str], tmp_path: Path) -> None:
    key, port, metrics = new_api_key(), free_port(), free_port()
    prefill, decode = workers
    cmd = [
        str(smg), "launch", "--pd-disaggregation", "--prefill", prefill, "8998", "--decode", decode,
        "--host", "127.0.0.1", "--port", str(port), "--api-key", key,
        "--prometheus-host", "127.0.0.1", "--prometheus-port", str(metrics), "--log-level", "info",
    ]  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    with run_process(
        cmd,
        name="pd-gateway",
        base_url=url,
        api_key=key,
        log_path=tmp_path / "pd-gateway.log",
        ready=_listed(url, key, 2),
        timeout_s=20,
    ):
        listed = read_workers(url, key)
    assert listed is not None
    by_url: dict[str, GatewayWorker] = {w.url: w for w in listed}
    assert set(by_url) == {prefill, decode}
    assert (by_url[prefill].role, by_url[prefill].bootstrap_port) == ("prefill", 8998)
    assert (by_url[decode].role, by_url[decode].bootstrap_port) == ("decode", None)
    assert all(w.status == "ready" and w.healthy for w in listed)
