"""What each server reported it ran (#45): every engine's reader on real log excerpts and info
answers (tests/fixtures/provenance/README.md says where each came from), the contract's default,
and attach mode reading it from an attached server's fingerprint."""

from __future__ import annotations

import json
from pathlib import Path

from evalgate.engines import Engine
from evalgate.engines.fake import FakeEngine
from evalgate.engines.llamacpp._attach import DIALECT as LLAMACPP
from evalgate.engines.llamacpp._provenance import llamacpp_provenance
from evalgate.engines.sglang._attach import DIALECT as SGLANG
from evalgate.engines.sglang._provenance import sglang_provenance
from evalgate.engines.vllm._attach import DIALECT as VLLM
from evalgate.engines.vllm._provenance import vllm_provenance
from evalgate.store.provenance import Provenance

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "provenance"


def text(name: str) -> str:
    return (FIXTURES / name).read_text()


def props(arm: str) -> dict:
    return json.loads(text(f"llamacpp_props_{arm}.json"))


def test_llama_server_reports_its_cache_attention_weights_and_kernels() -> None:
    bf16 = llamacpp_provenance(text("llamacpp_bf16.log"), props("bf16"))
    assert (bf16.kv_cache_dtype, bf16.kv_scales, bf16.weight_format) == ("f16", "none", "F16")
    assert bf16.attention_backend == "flash_attn"  # flash_attn = auto, resolved "Flash Attention enabled"
    assert (bf16.linear_kernel, bf16.speculative, bf16.batch_invariant) == ("ggml CPU", "off", None)
    assert bf16.source == "llama-server log, /props"
    q8 = llamacpp_provenance(text("llamacpp_fp8kv.log"), props("fp8kv"))
    assert (q8.kv_cache_dtype, q8.kv_scales, q8.attention_backend) == ("q8_0", "per-block", "flash_attn")
    int4 = llamacpp_provenance(text("llamacpp_int4.log"), props("int4"))
    assert int4.weight_format == "Q4_0" and int4.linear_kernel.startswith("ggml CPU_REPACK")
    off = llamacpp_provenance(text("llamacpp_fa-off.log"))  # the log alone, -fa off
    assert (off.attention_backend, off.weight_format, off.speculative) == ("no flash_attn", "F16", "off")
    assert off.source == "llama-server log"


def test_llama_server_says_nothing_it_does_not_log() -> None:
    assert llamacpp_provenance("").reported() == {}
    mixed = llamacpp_provenance("llama_kv_cache: size = 1 MiB (...), K (q8_0): 1 MiB, V (f16): 1 MiB")
    assert (mixed.kv_cache_dtype, mixed.kv_scales) == ("K q8_0, V f16", "per-block")


def test_sglang_reports_the_pool_dtype_not_the_auto_flag() -> None:
    info = json.loads(text("sglang_cpu_server_info_bf16.json"))
    assert info["kv_cache_dtype"] == "auto"  # the flag says nothing; the pool's log line does
    found = sglang_provenance(info, text("sglang_cpu_bf16.log"))
    assert found.reported() == {
        "kv_cache_dtype": "float32",
        "kv_scales": "none",
        "attention_backend": "torch_native",
        "weight_format": "float32",
        "batch_invariant": "off",
        "speculative": "off",
    }
    assert found.source == "/server_info, sglang log"


def test_sglang_fp8_scales_and_per_phase_backends() -> None:
    args = {"kv_cache_dtype": "fp8_e4m3", "attention_backend": "fa3", "decode_attention_backend": "flashinfer",
            "quantization": "fp8", "dtype": "bfloat16", "enable_deterministic_inference": True,
            "speculative_algorithm": "EAGLE"}  # fmt: skip
    found = sglang_provenance(args, kv_scales={"scale": "1.0"})
    assert (found.kv_cache_dtype, found.kv_scales) == ("fp8_e4m3", "1.0")
    assert found.attention_backend == "prefill fa3, decode flashinfer"
    assert (found.weight_format, found.batch_invariant, found.speculative) == (
        "bfloat16 (fp8)",
        "on",
        "EAGLE",
    )
    assert sglang_provenance({"kv_cache_dtype": "fp8_e4m3"}).kv_scales is None  # not said: not reported


def test_vllm_reports_its_config_line_and_the_fp8_cache() -> None:
    bf16 = vllm_provenance(text("vllm_cpu_bf16.log"))
    assert (bf16.kv_cache_dtype, bf16.kv_scales, bf16.weight_format) == ("bfloat16", "none", "bfloat16")
    assert (bf16.speculative, bf16.attention_backend, bf16.batch_invariant) == ("off", None, None)
    fp8 = vllm_provenance(text("vllm_cpu_fp8kv.log"), kv_scales={"scale": "1.0", "k_scale": []})
    assert (fp8.kv_cache_dtype, fp8.kv_scales) == ("fp8_e4m3", "1.0")


def test_vllm_gpu_lines_name_the_backend_and_linear_kernel() -> None:
    log = (
        "INFO [cuda.py:507] Using FLASH_ATTN attention backend out of potential backends: ['FLASH_ATTN'].\n"
        "INFO [__init__.py:758] Selected CutlassFP8ScaledMMLinearKernel for Fp8LinearMethod\n"
    )
    found = vllm_provenance(log)
    assert (found.attention_backend, found.linear_kernel) == ("FLASH_ATTN", "CutlassFP8ScaledMMLinearKernel")
    assert found.kv_cache_dtype is None  # no config line: nothing said of the cache


def test_the_contract_default_reports_nothing() -> None:
    """An engine that does not override ``provenance`` reports every fact as None (unknown)."""
    engine = FakeEngine()
    assert Engine.provenance(engine, None) == Provenance()  # type: ignore[arg-type]
    assert "provenance" in vars(Engine)


def test_attached_servers_report_through_their_dialect() -> None:
    sglang_fp = {"version": "0.5.23", "server_args": json.loads(text("sglang_cpu_server_info_int4.json"))}
    assert SGLANG.provenance(sglang_fp).attention_backend == "torch_native"
    llama_fp = {"model_ftype": "Q4_0", "sampling": {"speculative.types": "none"}}
    found = LLAMACPP.provenance(llama_fp)
    assert (found.weight_format, found.speculative, found.source) == ("Q4_0", "off", "/props")
    assert found.label() == "Q4_0 weights"
    assert VLLM.provenance({"version": "0.33.0", "model": "m"}) == Provenance()  # vLLM reports none of it


def test_a_llama_servers_odd_props_are_no_facts_and_no_crash() -> None:
    """/props is the server's word: fields of the wrong type are skipped, the log still speaks."""
    from evalgate.engines.llamacpp._provenance import llamacpp_provenance

    odd = {"default_generation_settings": ["params"], "model_ftype": {"x": 1}}
    got = llamacpp_provenance("print_info: file type   = F16\n", odd)
    assert got.weight_format == "F16" and got.speculative is None
    assert llamacpp_provenance("", {"default_generation_settings": {"params": "none"}}).speculative is None
