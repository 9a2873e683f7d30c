"""Attach mode on one real llama-server started outside evalgate (marked e2e): the sharded scorer
over two URLs of the same server scores ARC like a direct llama.cpp scorer, item by item.

The scripted test doubles of each engine's API are in tests/engines/test_engine_external.py."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import httpx
import pytest

from evalgate.engines.api import LaunchSlot
from evalgate.engines.attach import ExternalEngine, preflight_all
from evalgate.variants import parse_variant
from tests.conftest import needs_models

pytestmark = [pytest.mark.e2e, needs_models]


def test_sharded_arc_logliks_equal_direct_llamacpp(
    data_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from evalgate.engines import free_port, run_process
    from evalgate.engines.llamacpp import LlamaCppEngine, LlamaCppScorer, find_binary
    from evalgate.suites import SuiteOptions, default_registry

    model = LlamaCppEngine().launch_spec(parse_variant("bf16")).model
    port, key = free_port(), "attach-e2e-key"
    cmd = [str(find_binary()), "-m", model, "--host", "127.0.0.1", "--port", str(port), "--api-key", key]
    cmd += ["-c", "4096", "-np", "2", "-t", "2", "--no-webui", "--jinja"]
    url = f"http://127.0.0.1:{port}"

    def ready() -> bool:
        try:
            return httpx.get(url + "/health", timeout=2).status_code == 200
        except httpx.HTTPError:
            return False

    options = SuiteOptions(data_dir=data_dir)
    suite = default_registry().get("arc_easy")
    items = suite.load(options, 6)
    monkeypatch.setenv("EVALGATE_BASELINE_API_KEY", key)
    with run_process(
        cmd, name="outside", base_url=url, api_key=key, log_path=tmp_path / "s.log", ready=ready
    ):
        engine = ExternalEngine({"baseline": [url, f"http://localhost:{port}"], "candidate": [url]})
        spec = engine.launch_spec(parse_variant("bf16"))
        with engine.launch(spec, LaunchSlot("baseline", tmp_path)) as handle:
            assert handle.info["protocol"] == "llamacpp" and key not in json.dumps(handle.info)
            fp = handle.info["servers"][url]
            assert fp["total_slots"] == 2 and fp["n_ctx_per_slot"] in (2048, 4096)

            async def go() -> tuple[list[Any], list[Any]]:
                sharded = engine.scorer(handle)
                direct = LlamaCppScorer(handle, concurrency=2)
                try:
                    report = await preflight_all(sharded, server="baseline")
                    assert {c["url"] for c in report.checks} == set(sharded.urls)
                    ours = [(await suite.run(it, sharded, options)).response for it in items]
                    theirs = [(await suite.run(it, direct, options)).response for it in items]
                    return ours, theirs
                finally:
                    await sharded.aclose()
                    await direct.aclose()

            ours, theirs = asyncio.run(go())
    for a, b in zip(ours, theirs, strict=True):
        assert len(a) == len(b) >= 3 and all(abs(x[0] - y[0]) <= 0.02 for x, y in zip(a, b, strict=True)), (
            a,
            b,
        )
