"""KV capacity parsers (each engine package's) on real llama.cpp logs and on SGLang / vLLM log
fixtures, and the candidate-over-baseline ratio."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from evalgate.engines.llamacpp import kv_buffer_sizes, llamacpp_capacity
from evalgate.engines.sglang import server_info_capacity as sglang_server_info_capacity
from evalgate.engines.sglang import sglang_capacity
from evalgate.engines.vllm import vllm_capacity
from evalgate.store.capacity import capacity_ratio

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "capacity"


def read(name: str) -> str:
    return (FIXTURES / name).read_text(encoding="utf-8")


def test_llamacpp_real_log_f16() -> None:
    cap = llamacpp_capacity(read("llamacpp_f16.log"))
    assert cap is not None
    assert cap["kv_tokens"] == 16384 and cap["kv_mib"] == 360.0 and cap["kv_types"] == "K f16, V f16"
    assert cap["weights_mib"] == 256.63 and cap["slots"] == 4 and cap["pool_sized_by_memory"] is False


def test_llamacpp_real_log_q4_0_weights_keep_the_kv_cache() -> None:
    base, cand = llamacpp_capacity(read("llamacpp_f16.log")), llamacpp_capacity(read("llamacpp_q4_0.log"))
    assert base and cand and cand["kv_types"] == "K f16, V f16" and cand["kv_mib"] == base["kv_mib"]
    assert cand["weights_mib"] < base["weights_mib"] / 2
    ratio = capacity_ratio(base, cand)
    assert ratio["ratio"] == 1.0 and "per MiB" in ratio["basis"]  # INT4 weights buy no KV room here
    assert ratio["weights_mib_ratio"] is not None and ratio["weights_mib_ratio"] < 0.5


def test_llamacpp_real_log_8bit_kv_nearly_doubles_tokens_per_mib() -> None:
    base, cand = llamacpp_capacity(read("llamacpp_f16.log")), llamacpp_capacity(read("llamacpp_q8_0kv.log"))
    assert cand and cand["kv_types"] == "K q8_0, V q8_0" and cand["kv_mib"] == 191.25
    ratio = capacity_ratio(base, cand)
    assert ratio["ratio"] == pytest.approx(360 / 191.25, abs=1e-3) and ratio["kv_tokens_ratio"] == 1.0
    assert ratio["weights_mib_ratio"] == 1.0  # same F16 weights


def test_llamacpp_without_n_ctx_counts_cells_per_sequence() -> None:
    line = "llama_kv_cache: size =  90.00 MiB (  1024 cells,  30 layers,  4/4 seqs), K (f16): 45.00 MiB, V (f16): 45.00 MiB"
    assert llamacpp_capacity(line)["kv_tokens"] == 4096  # type: ignore[index]
    unified = line + "\nllama_context: kv_unified = true"
    assert llamacpp_capacity(unified)["kv_tokens"] == 1024  # type: ignore[index]


def test_sglang_log_bf16_and_fp8kv() -> None:
    base, cand = sglang_capacity(read("sglang_bf16.log")), sglang_capacity(read("sglang_fp8kv.log"))
    assert base and cand
    assert base["kv_tokens"] == 427616 and base["kv_mib"] == pytest.approx(52.2 * 1024, abs=1)
    assert cand["kv_tokens"] == 855232 and cand["kv_types"] == "fp8_e4m3" and base["kv_types"] == "auto"
    assert base["max_running_requests"] == 4097 and base["pool_sized_by_memory"]
    ratio = capacity_ratio(base, cand)
    assert ratio["ratio"] == 2.0 and ratio["basis"].startswith("KV pool tokens")


def test_sglang_log_sums_data_parallel_ranks() -> None:
    cap = sglang_capacity(read("sglang_dp2.log"))
    assert cap and cap["kv_tokens"] == 838000 and cap["kv_mib"] == pytest.approx((51.27 + 51.03) * 1024)


def test_sglang_server_info() -> None:
    cap = sglang_server_info_capacity(json.loads(read("sglang_server_info.json")))
    assert (
        cap
        and cap["kv_tokens"] == 855232
        and cap["kv_types"] == "fp8_e4m3"
        and cap["source"].endswith("/server_info")
    )
    per_dp = {"internal_states": [{"max_total_num_tokens": 10}, {"max_total_num_tokens": 12}]}
    assert sglang_server_info_capacity(per_dp)["kv_tokens"] == 22  # type: ignore[index]
    assert sglang_server_info_capacity({"model_path": "x"}) is None


def test_vllm_v1_logs_with_and_without_process_prefix() -> None:
    base, cand = vllm_capacity(read("vllm_bf16.log")), vllm_capacity(read("vllm_fp8kv.log"))
    assert base and cand
    assert (
        base["kv_tokens"] == 420656
        and base["kv_mib"] == pytest.approx(51.35 * 1024)
        and base["kv_types"] == "auto"
    )
    assert cand["kv_tokens"] == 841312 and cand["kv_types"] == "fp8_e4m3"
    assert base["max_concurrency"] == 3.21 and base["max_concurrency_at_tokens"] == 131072
    assert capacity_ratio(base, cand)["ratio"] == 2.0


def test_vllm_v0_blocks_times_block_size() -> None:
    cap = vllm_capacity(read("vllm_v0.log"))
    assert cap and cap["kv_tokens"] == 26291 * 16 and "blocks" in cap["source"]


def test_vllm_sums_engine_cores_not_repeats() -> None:
    log = "\n".join(
        [
            "(EngineCore_DP0 pid=1) INFO [kv_cache_utils.py:1] GPU KV cache size: 100,000 tokens",
            "(EngineCore_DP1 pid=2) INFO [kv_cache_utils.py:1] GPU KV cache size: 90,000 tokens",
            "(EngineCore_DP0 pid=1) INFO [kv_cache_utils.py:1] GPU KV cache size: 100,000 tokens",
        ]
    )
    assert vllm_capacity(log)["kv_tokens"] == 190000  # type: ignore[index]


PARSERS = {"llamacpp": llamacpp_capacity, "sglang": sglang_capacity, "vllm": vllm_capacity}


@pytest.mark.parametrize(
    ("name", "engine"),
    [
        ("llamacpp_f16.log", "llamacpp"),
        ("sglang_bf16.log", "sglang"),
        ("vllm_bf16.log", "vllm"),
        ("vllm_v0.log", "vllm"),
    ],
)
def test_each_engine_reads_its_own_log_and_no_other(name: str, engine: str) -> None:
    found = {e: parse(read(name)) for e, parse in PARSERS.items()}
    assert found[engine] and found[engine]["engine"] == engine  # type: ignore[index]
    assert all(cap is None for e, cap in found.items() if e != engine)


def test_kv_buffers_come_from_the_same_line_as_the_capacity() -> None:
    log = read("llamacpp_q8_0kv.log")
    assert kv_buffer_sizes(log) == {"total": 191.25, "K_q8_0": 95.62, "V_q8_0": 95.62}
    assert llamacpp_capacity(log)["kv_mib"] == kv_buffer_sizes(log)["total"]  # type: ignore[index]
    assert kv_buffer_sizes("server started") == {}


def test_nothing_reported_gives_none_and_no_ratio() -> None:
    assert all(parse("server started\nlistening") is None for parse in PARSERS.values())
    assert capacity_ratio(None, {"kv_tokens": 1})["ratio"] is None
    assert capacity_ratio({"kv_tokens": 0}, {"kv_tokens": 5})["ratio"] is None


def test_vllm_cpu_pool_is_named_as_the_explicit_kv_space_not_free_memory() -> None:
    """#45: on vLLM's CPU backend the pool is VLLM_CPU_KVCACHE_SPACE (its log's "Explicitly set"),
    so the capacity line must not say it was sized from free memory."""
    log = (
        "(EngineCore_DP0 pid=1) INFO Explicitly set (1.0/20.34) GiB for KV cache\n"
        "(EngineCore_DP0 pid=1) INFO CPU KV cache size: 46,592 tokens\n"
    )
    cpu = vllm_capacity(log)
    assert cpu is not None and cpu["pool_memory"] == "explicit (VLLM_CPU_KVCACHE_SPACE)"
    fp8 = {**cpu, "kv_tokens": 93_184}
    ratio = capacity_ratio(cpu, fp8)
    assert ratio["ratio"] == 2.0 and "VLLM_CPU_KVCACHE_SPACE" in ratio["basis"]
    assert "free memory" not in ratio["basis"]
