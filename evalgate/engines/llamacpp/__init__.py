"""llama.cpp's ``llama-server``, the embedded CPU engine: launch (``_engine``), scoring through
forced-token grammars (``_scorer``), failure diagnosis (``_diagnose``), the KV cache from its log
(``_capacity``), attach mode's reading of a running server (``_attach``), its ``/props``
(``_props``) and llama-server's flags in front of the server the xllamacpp wheel embeds
(``_xserver``, the ``xllamacpp`` runtime)."""

from evalgate.engines.llamacpp._attach import DIALECT
from evalgate.engines.llamacpp._capacity import kv_buffer_sizes, llamacpp_capacity
from evalgate.engines.llamacpp._diagnose import PORTABLE_CMAKE_ARGS, cpu_features, diagnose, diagnose_signal
from evalgate.engines.llamacpp._engine import (
    QUANT_KEYS,
    TOOLS_TEMPLATE,
    LlamaCppEngine,
    binary_version,
    find_binary,
    resolve_runtime,
    runtime_of,
    runtime_version,
)
from evalgate.engines.llamacpp._props import PROPS, total_slots
from evalgate.engines.llamacpp._scorer import LlamaCppScorer

__all__ = [
    "DIALECT",
    "PORTABLE_CMAKE_ARGS",
    "PROPS",
    "QUANT_KEYS",
    "TOOLS_TEMPLATE",
    "LlamaCppEngine",
    "LlamaCppScorer",
    "binary_version",
    "cpu_features",
    "diagnose",
    "diagnose_signal",
    "find_binary",
    "kv_buffer_sizes",
    "llamacpp_capacity",
    "resolve_runtime",
    "runtime_of",
    "runtime_version",
    "total_slots",
]
