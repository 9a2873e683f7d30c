"""``evalgate setup``: fetch and derive the embedded default model once (CI runs it before tests)."""

from __future__ import annotations

import argparse

from evalgate.engines.llamacpp import binary_version, find_binary
from evalgate.models import GGUF_TYPES, derived_gguf, file_sha256

__all__ = ["add_parser", "run"]


def add_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("setup", help="prepare the CPU engine's default model variants (F16, Q8_0, Q4_0)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    server = find_binary()
    print(f"llama-server {binary_version(server)} at {server}")
    for weights in GGUF_TYPES:
        path = derived_gguf(weights, find_binary("llama-quantize"))
        print(f"{weights:5} {path}  sha256 {file_sha256(path)[:16]}")
    return 0
