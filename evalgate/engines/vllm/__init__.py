"""vLLM, a GPU engine (and on the CPU, ``_cpu``, installed by ``_cpu_install``): launch (``_engine``), scoring through echoed prompt logprobs (``_scorer``),
failure diagnosis (``_diagnose``), its KV pool from its log (``_capacity``) and attach mode's
reading of a running server (``_attach``)."""

from evalgate.engines.vllm._attach import DIALECT
from evalgate.engines.vllm._capacity import vllm_capacity
from evalgate.engines.vllm._cpu import VLLMCPUEngine
from evalgate.engines.vllm._cpu_install import install_vllm_cpu
from evalgate.engines.vllm._diagnose import TESTED_VERSION, diagnose
from evalgate.engines.vllm._engine import KV_DTYPES, QUANT_KEYS, VLLMEngine, wait_for_group_exit
from evalgate.engines.vllm._scorer import VLLMScorer, loglikelihood_payload, read_continuation_logprobs

__all__ = [
    "DIALECT",
    "KV_DTYPES",
    "QUANT_KEYS",
    "TESTED_VERSION",
    "VLLMCPUEngine",
    "VLLMEngine",
    "VLLMScorer",
    "diagnose",
    "install_vllm_cpu",
    "loglikelihood_payload",
    "read_continuation_logprobs",
    "vllm_capacity",
    "wait_for_group_exit",
]
