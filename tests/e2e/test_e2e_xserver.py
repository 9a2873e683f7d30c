"""The xllamacpp runtime for real (marked e2e): llama.cpp's server from the xllamacpp wheel, started
by evalgate's own launcher behind llama-server's flags, answers like llama-server (health, API
key, logprobs) and logs the lines evalgate reads (KV types and sizes, flash attention, file type).
The flag mapping without a server is tests/engines/test_xserver.py."""

from __future__ import annotations

import importlib.util
import uuid
from pathlib import Path

import httpx
import pytest

from evalgate.config import LlamaCppConfig
from evalgate.engines.api import LaunchSlot
from evalgate.engines.llamacpp import LlamaCppEngine
from evalgate.errors import ServerStartError
from evalgate.variants import parse_variant
from tests.conftest import have_models
from tests.engines.test_launcher import processes_with, spec_with

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(
        importlib.util.find_spec("xllamacpp") is None or importlib.util.find_spec("gguf") is None,
        reason="xllamacpp not installed (pip install '.[cpu-wheel]')",
    ),
    pytest.mark.skipif(not have_models(), reason="run `evalgate setup` first (CI does)"),
]


def engine() -> LlamaCppEngine:
    config = LlamaCppConfig(runtime="xllamacpp", parallel=1, ctx_per_slot=1024, wait_policy="default")
    return LlamaCppEngine(config)


def test_the_shim_serves_like_llama_server_and_logs_what_evalgate_reads(tmp_path: Path) -> None:
    name = f"x-{uuid.uuid4().hex[:8]}"
    eng = engine()
    assert "xllamacpp" in eng.version()
    spec = eng.launch_spec(parse_variant("fp8kv"))
    with eng.launch(spec, LaunchSlot(name, tmp_path)) as h:
        assert httpx.get(f"{h.base_url}/health", timeout=5).status_code == 200
        assert httpx.get(f"{h.base_url}/props", timeout=5).status_code == 401  # the key is required
        auth = {"Authorization": f"Bearer {h.api_key}"}
        body = {"prompt": "The capital of France is", "n_predict": 2, "n_probs": 3, "temperature": 0}
        done = httpx.post(f"{h.base_url}/completion", json=body, headers=auth, timeout=60).json()
        top = done["completion_probabilities"][0]["top_logprobs"]
        assert len(top) == 3 and all(t["logprob"] <= 0 for t in top)
        assert h.info["kv_buffers_mib"].get("K_q8_0")  # the 8-bit KV setting took effect
        assert "AVX2" in h.info["cpu_features"]
        facts = eng.provenance(h)
        assert facts.kv_cache_dtype == "q8_0" and facts.attention_backend == "flash_attn"
        assert facts.weight_format == "F16" and facts.speculative == "off"
        capacity = eng.capacity(h)
        assert capacity and capacity["kv_tokens"] == 1024 and capacity["slots"] == 1
        assert processes_with(f"evalgate-{name}")
    assert processes_with(f"evalgate-{name}") == []  # SIGTERM stops it


def test_an_unknown_flag_fails_the_launch_with_the_fix(tmp_path: Path) -> None:
    eng = engine()
    model = eng.launch_spec(parse_variant("bf16")).model
    with (
        pytest.raises(ServerStartError) as err,
        eng.launch(spec_with(model, ("--mlock", None)), LaunchSlot("x", tmp_path)),
    ):
        pass
    assert "--mlock" in err.value.fix and "pip install 'evalgate[cpu]'" in err.value.detail
