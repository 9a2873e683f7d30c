"""What the three CPU engines (llama.cpp, and SGLang's and vLLM's CPU engines) answer alike where
the ``Engine`` defaults suit a GPU: a smoke run's item counts and generation cap, and a request
timeout for CPU decoding. Each engine names ``CPUEngineDefaults`` before its base class."""

from __future__ import annotations

from collections.abc import Mapping

from evalgate.engines.api import CPU_SMOKE_ITEMS

__all__ = ["CPU_SMOKE_GEN_CAP", "CPUEngineDefaults"]

CPU_SMOKE_GEN_CAP = 256
"""Generated tokens per item in a CPU engine's smoke run when --max-gen-tokens is not given: a CPU
cannot afford MMLU-Pro's 2,048 CoT tokens per item; both arms get the same cap, and the manifest
and report say so (gsm8k's own limit is 256 already)."""


class CPUEngineDefaults:
    """The CPU answers to three ``Engine`` calls; named before the engine's base class, so they win."""

    def default_gen_cap(self, preset: str) -> int | None:
        return CPU_SMOKE_GEN_CAP if preset == "smoke" else None

    def default_items(self, preset: str) -> Mapping[str, int]:
        return CPU_SMOKE_ITEMS if preset == "smoke" else {}

    def request_timeout_s(self) -> float:
        """Ten minutes: a CPU decodes a few tokens a second per sequence (SGLang's one thread ~14
        tokens/s, a 256-token answer in a batch of 16 taking minutes), and a 5-shot GSM8K generation
        beside three others took up to 108 s on 2 quiet cores on llama.cpp, twice that beside a busy
        neighbour (benchmarks/cpu_contention.py). The server process itself is watched, so a dead
        server is still caught at once."""
        return 600.0
