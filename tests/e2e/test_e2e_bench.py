"""`evalgate bench` on the real llama-server (marked e2e): a two-level sweep on both arms, with the
8-bit KV candidate's capacity read from its log. The sweep's bounds are tested against a scripted
stub in tests/throughput/test_throughput.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from evalgate.cli import main
from evalgate.config import LlamaCppConfig
from tests.conftest import needs_models

pytestmark = [pytest.mark.e2e, needs_models]


def test_e2e_bench_on_llama_server(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "bench"
    argv = ["bench", "--baseline", "bf16", "--candidate", "fp8kv", "--levels", "1,2", "--input-len", "16"]
    code = main([*argv, "--output-len", "8", "--requests-per-level", "4", "--out", str(out)])
    assert code == 0
    doc = json.loads((out / "throughput.json").read_text())
    cfg = LlamaCppConfig()  # the defaults both arms launch with
    for arm in ("baseline", "candidate"):
        data = doc["arms"][arm]
        # level 1 must complete; a busy machine may push level 2 past the queue timeout ("limit")
        assert data["slots"] == cfg.parallel and data["levels"][0]["status"] == "ok"
        assert all(r["status"] in ("ok", "limit") for r in data["levels"])
        ok = [r for r in data["levels"] if r["status"] == "ok"]
        assert all(r["ok"] >= 1 and r["output_tokens"] >= 8 * r["ok"] and r["output_tok_s"] > 0 for r in ok)
        assert (
            data["capacity"]["kv_tokens"] == cfg.parallel * cfg.ctx_per_slot
            and data["capacity"]["kv_mib"] > 0
        )
    assert doc["capacity"]["candidate"]["kv_types"] == "K q8_0, V q8_0"
    assert doc["capacity"]["ratio"] > 1.5  # 8-bit KV: about twice the tokens per MiB
    assert doc["levels"][0]["ratio"] is not None
    assert "output tok/s by concurrency" in capsys.readouterr().out
