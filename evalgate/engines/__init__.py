"""Engines: how each inference server is launched and scored. Chosen by name, never by scanning."""

from __future__ import annotations

import difflib
from typing import Any

from evalgate.errors import ConfigError

__all__ = ["ENGINES", "get_engine"]

ENGINES = ("llamacpp", "sglang", "vllm")


def get_engine(name: str | None, cfg: Any) -> Any:
    """The engine ``name`` (default: llama.cpp, the CPU engine), configured from ``cfg``."""
    name = name or "llamacpp"
    if name == "llamacpp":
        from evalgate.engines.llamacpp import LlamaCppEngine, LlamaCppSettings

        return LlamaCppEngine(LlamaCppSettings(**cfg.llamacpp.model_dump()))
    if name == "sglang":
        from evalgate.engines.sglang import SGLangEngine, SGLangSettings

        return SGLangEngine(SGLangSettings(**cfg.sglang.settings()))
    if name == "vllm":
        from evalgate.engines.vllm import VLLMEngine, VLLMSettings

        return VLLMEngine(VLLMSettings(**cfg.vllm.settings()))
    near = difflib.get_close_matches(name, ENGINES, n=1)
    hint = f"did you mean {near[0]}? " if near else ""
    raise ConfigError(f"unknown engine {name!r}", fix=f"{hint}known engines: {', '.join(ENGINES)}")
