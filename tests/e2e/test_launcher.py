"""The launcher's contract on the real llama-server binary (marked e2e): failures name the cause,
quote the command with the key masked, show the log tail, and leave no process behind. The
diagnoses that need no real server are tests/engines/test_launcher.py."""

from __future__ import annotations

import socket
import uuid
from pathlib import Path

import httpx
import pytest

from evalgate.engines.api import LaunchSlot
from evalgate.engines.llamacpp import LlamaCppEngine, find_binary
from evalgate.errors import ServerStartError
from evalgate.variants import parse_variant
from tests.conftest import needs_models, needs_server
from tests.helpers.launcher import never_ready, processes_with, spec_with

pytestmark = pytest.mark.e2e


@needs_models
def test_bad_flag_names_the_flag_and_masks_the_key(tmp_path: Path) -> None:
    name = f"t-{uuid.uuid4().hex[:8]}"
    model = LlamaCppEngine().launch_spec(parse_variant("bf16")).model
    with (
        pytest.raises(ServerStartError) as err,
        LlamaCppEngine().launch(
            spec_with(model, ("--definitely-not-a-flag", "1")), LaunchSlot(name, tmp_path)
        ),
    ):
        pass
    text = err.value.render()
    assert "exited during startup" in text and "--definitely-not-a-flag" in text
    assert "--api-key '***'" in text and "eg-" not in text
    assert "log tail" in text
    assert processes_with(f"evalgate-{name}") == []


@needs_server
def test_port_in_use_is_refused_before_launch(tmp_path: Path) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        with (
            pytest.raises(ServerStartError, match=f"port {port} on 127.0.0.1 is already in use"),
            LlamaCppEngine().launch(spec_with("/nonexistent.gguf"), LaunchSlot("x", tmp_path, port=port)),
        ):
            pass


@needs_models
def test_server_that_cannot_bind_is_diagnosed(tmp_path: Path) -> None:
    """Bypass the pre-check (a port taken between reservation and bind): the log is diagnosed."""
    model = LlamaCppEngine().launch_spec(parse_variant("bf16")).model
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        cmd = [str(find_binary()), "-m", model, "--host", "127.0.0.1", "--port", str(port), "-c", "512"]
        from evalgate.engines.llamacpp import diagnose

        err = never_ready(cmd, tmp_path / "x.log", timeout_s=60, diagnose=diagnose)
    assert "port is already in use" in err.fix


@needs_server
def test_process_that_dies_early_shows_log_tail(tmp_path: Path) -> None:
    name = f"t-{uuid.uuid4().hex[:8]}"
    with (
        pytest.raises(ServerStartError) as err,
        LlamaCppEngine().launch(spec_with(str(tmp_path / "missing.gguf")), LaunchSlot(name, tmp_path)),
    ):
        pass
    assert "exited during startup" in str(err.value)
    assert "missing.gguf" in err.value.detail
    assert "model file could not be loaded" in err.value.fix
    assert processes_with(f"evalgate-{name}") == []


@needs_models
def test_launch_serves_on_loopback_with_key_and_cleans_up(tmp_path: Path) -> None:
    name = f"t-{uuid.uuid4().hex[:8]}"
    engine = LlamaCppEngine()
    spec = engine.launch_spec(parse_variant("fp8kv"))
    with engine.launch(spec, LaunchSlot(name, tmp_path)) as h:
        assert h.base_url.startswith("http://127.0.0.1:") and h.alive()
        assert httpx.get(f"{h.base_url}/v1/models", timeout=5).status_code == 401  # the key is required
        ok = httpx.get(f"{h.base_url}/v1/models", headers={"Authorization": f"Bearer {h.api_key}"}, timeout=5)
        assert ok.status_code == 200
        assert h.info["kv_buffers_mib"].get("K_q8_0")  # the 8-bit KV setting took effect
        pids = processes_with(f"evalgate-{name}")
        assert pids
    assert processes_with(f"evalgate-{name}") == []
