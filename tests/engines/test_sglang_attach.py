"""Issue #18, point 1: attach mode against /server_info as SGLang 0.5.23 answers it.

Two launches of the same settings on two hosts differ in ``startup_time`` and ``launch_command``
(http_server.py ``server_info``, utils/common.py ``build_server_info``), in ``kv_events`` (the
publisher's host and port) and the scheduler's ``status``; the pair check and the replica check
must not read those as settings. ``--allow-diff`` now reaches an arm's URLs too.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from evalgate.engines.attach import ExternalEngine, check_attached_pair, fingerprint
from evalgate.errors import ConfigError
from tests.engines.test_engine_external import SGLANG_INFO, Double, _app
from tests.helpers.background import serving


def host_info(host: str, port: int, *, startup: float, **over: Any) -> dict[str, Any]:
    """SGLang 0.5.23's /server_info of one launch on ``host``: the same settings, its own timings."""
    info = copy.deepcopy(SGLANG_INFO)
    info.update(
        host=host,
        port=port,
        version="0.5.23",
        status="ready",
        startup_time={"load_weight": startup, "kv_cache_allocation": 0.4, "scheduler_e2e": startup + 3},
        launch_command=f"/opt/venv-{host}/bin/python -m sglang.launch_server --model-path Org/Model-BF16 "
        f"--host {host} --port {port} --admin-api-key ADMIN-SECRET-{host}",
        kv_events={"publisher": "zmq", "endpoint_host": host, "endpoint_port_base": 5557 + port % 7},
        kv_event_sources=None,
        frontend="python",
    )
    info.update(over)
    return info


@pytest.fixture
def serve() -> Iterator[Callable[..., Double]]:
    with serving(Double, _app) as start:
        yield start


def test_per_launch_keys_do_not_fail_the_pair_check(serve: Callable[..., Double]) -> None:
    base = fingerprint(
        serve("sglang", server_info=host_info("10.0.0.1", 30000, startup=12.5)).url, api_key=None
    )
    fp8 = host_info("10.0.0.2", 30010, startup=14.1, kv_cache_dtype="fp8_e4m3")
    cand = fingerprint(serve("sglang", server_info=fp8).url, api_key=None)
    assert check_attached_pair(base, cand) == []
    other = host_info("10.0.0.2", 30010, startup=14.1, context_length=4096)
    diffs = check_attached_pair(base, fingerprint(serve("sglang", server_info=other).url, api_key=None))
    assert [d[0] for d in diffs] == ["context_length"]  # a real setting still counts


def test_the_launch_command_is_never_recorded(serve: Callable[..., Double]) -> None:
    """It is the raw argv: an --admin-api-key evalgate was never given would land in the manifest."""
    fp = fingerprint(serve("sglang", server_info=host_info("h", 30000, startup=1.0)).url, api_key=None)
    assert "ADMIN-SECRET" not in json.dumps(fp) and "launch_command" not in fp["server_args"]


def test_replicas_on_two_hosts_form_one_arm(serve: Callable[..., Double]) -> None:
    a = serve("sglang", server_info=host_info("10.0.0.1", 30000, startup=12.5))
    b = serve("sglang", server_info=host_info("10.0.0.2", 30000, startup=13.0, random_seed=99))
    info = ExternalEngine({"baseline": [a.url, b.url], "candidate": [a.url]}).attach_info("baseline")
    assert set(info["servers"]) == {a.url, b.url}


def test_allow_diff_reaches_the_urls_of_one_arm(serve: Callable[..., Double]) -> None:
    a = serve("sglang", server_info=host_info("10.0.0.1", 30000, startup=1.0))
    b = serve("sglang", server_info=host_info("10.0.0.2", 30000, startup=1.0, chunked_prefill_size=4096))
    c = serve("sglang", server_info=host_info("10.0.0.3", 30000, startup=1.0, kv_cache_dtype="fp8_e4m3"))
    urls = {"baseline": [a.url, b.url], "candidate": [c.url]}
    with pytest.raises(ConfigError) as err:
        ExternalEngine(urls).attach_info("baseline")
    assert "chunked_prefill_size" in str(err.value) and "--allow-diff" in err.value.fix
    engine = ExternalEngine(urls, allow_diff=["chunked_prefill_size"])
    assert set(engine.attach_info("baseline")["servers"]) == {a.url, b.url}
    engine.check_pair(allow=["chunked_prefill_size"])  # the candidate differs from a.url's too
    late = ExternalEngine(urls)  # the plan passes --allow-diff to check_pair, which comes first
    late.check_pair(allow=["chunked_prefill_size"])
