"""A full KV pool on real SGLang 0.5.23 on the CPU (marked sglang_cpu and e2e; #54): with a pool of
200 tokens and the scheduler told to reserve little (``[sglang] max_total_tokens`` and
``schedule_conservativeness``, SGLang's own tests use 0.05), six chat answers of 100 tokens
overfill it, SGLang retracts a running request, and ``Engine.pressure`` reads that from its log.
About 40 s after launch here."""

from __future__ import annotations

import asyncio
from pathlib import Path

import httpx
import pytest

from evalgate.config import SGLangConfig
from evalgate.engines.api import LaunchSlot
from evalgate.engines.sglang._cpu import SGLangCPUEngine
from evalgate.variants import parse_variant
from tests.conftest import needs_models
from tests.e2e.test_e2e_sglang_cpu import needs_sglang_cpu

pytestmark = [pytest.mark.e2e, pytest.mark.sglang_cpu, needs_models, needs_sglang_cpu]


def test_a_small_pool_retracts_and_the_log_says_so(tmp_path: Path) -> None:
    config = SGLangConfig(
        device="cpu", ready_timeout_s=300, max_total_tokens=200, schedule_conservativeness=0.05
    )
    engine = SGLangCPUEngine(config)
    spec = engine.launch_spec(parse_variant("bf16"))
    assert ("--max-total-tokens", "200") in spec.args and ("--schedule-conservativeness", "0.05") in spec.args
    with engine.launch(spec, LaunchSlot("pressed", tmp_path)) as handle:
        assert engine.capacity(handle)["kv_tokens"] == 200  # type: ignore[index]
        assert engine.pressure(handle)["events"] == 0  # type: ignore[index]

        async def answers() -> list[int]:
            headers = {"Authorization": f"Bearer {handle.api_key}"}
            async with httpx.AsyncClient(timeout=600, headers=headers) as client:

                async def one(i: int) -> int:
                    body = {"model": "default", "max_tokens": 100, "temperature": 0,
                            "messages": [{"role": "user", "content": f"Write a long story about a dragon named number {i}."}]}  # fmt: skip
                    resp = await client.post(f"{handle.base_url}/v1/chat/completions", json=body)
                    resp.raise_for_status()
                    return int(resp.json()["usage"]["completion_tokens"])

                return list(await asyncio.gather(*(one(i) for i in range(6))))

        assert asyncio.run(answers()) == [100] * 6  # every answer completes: a retracted one is recomputed
        pressure = engine.pressure(handle)
    assert pressure is not None and pressure["kind"] == "retractions"
    assert pressure["events"] >= 1 and pressure["requests"] >= 1 and pressure["peak_usage"] > 0.9, pressure
