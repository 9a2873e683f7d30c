"""Engines: how each inference server is launched and scored. Chosen by name, never by scanning.

The contract is ``api`` (``Engine``, ``Scorer``); each engine is one package holding its launch,
scorer, diagnosis and capacity code: ``llamacpp``, ``sglang``, ``vllm``, and ``attach`` for
servers that are already running. ``fake`` is the loop's scripted test double. An engine takes
its section of evalgate.toml as it is (``LlamaCppConfig``, ``SGLangConfig``, ``VLLMConfig``).
"""

from __future__ import annotations

import difflib
from typing import TYPE_CHECKING

from evalgate.engines._launcher import ServerHandle, free_port, run_process
from evalgate.engines.api import Engine, Scorer
from evalgate.errors import ConfigError

if TYPE_CHECKING:
    from evalgate.config import EvalgateConfig

__all__ = ["ENGINES", "Engine", "Scorer", "ServerHandle", "free_port", "get_engine", "run_process"]

ENGINES = ("llamacpp", "sglang", "vllm")
"""The engines ``--engine`` launches (attach mode is chosen by giving URLs instead)."""


def get_engine(name: str | None, cfg: EvalgateConfig) -> Engine:
    """The engine ``name`` (default: llama.cpp, the CPU engine), configured from ``cfg``."""
    name = name or "llamacpp"
    if name == "llamacpp":
        from evalgate.engines.llamacpp import LlamaCppEngine

        return LlamaCppEngine(cfg.llamacpp)
    if name == "sglang":
        from evalgate.engines.sglang import SGLangEngine

        if cfg.sglang.device == "cpu":  # real SGLang on the CPU: engines/sglang/_cpu.py
            from evalgate.engines.sglang._cpu import SGLangCPUEngine

            return SGLangCPUEngine(cfg.sglang)
        return SGLangEngine(cfg.sglang)
    if name == "vllm":
        from evalgate.engines.vllm import VLLMEngine

        return VLLMEngine(cfg.vllm)
    if name == "fake":  # not listed: the scripted test double, with its default script
        from evalgate.engines.fake import FakeEngine

        return FakeEngine()
    near = difflib.get_close_matches(name, ENGINES, n=1)
    hint = f"did you mean {near[0]}? " if near else ""
    raise ConfigError(f"unknown engine {name!r}", fix=f"{hint}known engines: {', '.join(ENGINES)}")
