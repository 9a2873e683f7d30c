"""Fixtures two e2e modules share, made once per session: the llama-server behind the SGLang shim
(test_e2e_sglang_shim.py, test_e2e_chat.py) and the check that SGLang's request models import.
As module fixtures imported into each module they ran once per module: two servers, two imports."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from evalgate.engines import ServerHandle
from evalgate.engines.api import LaunchSlot
from evalgate.engines.llamacpp import LlamaCppEngine
from evalgate.variants import Variant

HELPERS = Path(__file__).resolve().parents[1] / "helpers"


@pytest.fixture(scope="session")
def sglang_models() -> None:
    """The shim validates with SGLang's own request models; they import in a child (torch and all)."""
    code = "import sglang_shim_protocol as s; s.load_sglang(s.sglang_path())"
    proc = subprocess.run([sys.executable, "-c", code], cwd=HELPERS, capture_output=True, text=True)
    if proc.returncode != 0:
        pytest.skip(
            f"SGLang's request models do not import (`evalgate setup --parsers`): {proc.stderr[-300:]}"
        )


@pytest.fixture(scope="session")
def upstream(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerHandle]:
    """One llama-server (F16 weights) behind the shim. llama-server refuses every slot action,
    erase included, without --slot-save-path, and the shim's /flush_cache erases the slots."""
    engine = LlamaCppEngine()
    slots = tmp_path_factory.mktemp("slots")
    spec = engine.launch_spec(Variant("bf16", args=(("--slot-save-path", str(slots)),)))
    with engine.launch(spec, LaunchSlot("upstream", tmp_path_factory.mktemp("llama"))) as handle:
        yield handle
