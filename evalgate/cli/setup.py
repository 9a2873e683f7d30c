"""``evalgate setup``: fetch and derive the embedded default model once (CI runs it before tests).

``--parsers`` also installs the pinned SGLang without its dependencies (it imports on a CPU),
so the tests parse every SGLang command evalgate builds with SGLang's own argument parser.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

from evalgate.engines.llamacpp import binary_version, find_binary
from evalgate.errors import InfraError
from evalgate.gguf import GGUF_TYPES, cache_dir, derived_gguf, file_sha256

__all__ = ["SGLANG_PARSER_PACKAGES", "SGLANG_VERSION", "add_parser", "parser_dir", "run"]

SGLANG_VERSION = "0.5.23"
# what ``sglang.srt.server_args`` needs on a CPU besides torch (measured: 258 MB in all)
SGLANG_PARSER_PACKAGES = (
    f"sglang=={SGLANG_VERSION}",
    *"orjson psutil pybase64 pillow starlette msgspec pyzmq ipython traitlets".split(),
)


def add_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("setup", help="prepare the CPU engine's default model variants (F16, Q8_0, Q4_0)")
    p.add_argument(
        "--parsers",
        action="store_true",
        help=f"also install SGLang {SGLANG_VERSION} without dependencies into the cache, for the "
        "tests that parse evalgate's SGLang commands with SGLang's own parser",
    )
    p.set_defaults(func=run)


def parser_dir() -> Path:
    return cache_dir() / "parsers" / f"sglang-{SGLANG_VERSION}"


def install_parsers() -> Path:
    target = parser_dir()
    if (target / "sglang").is_dir():
        return target
    tmp = target.with_name(target.name + ".tmp")
    cmd = [
        sys.executable,
        "-m",
        "pip",
        "install",
        "-q",
        "--no-deps",
        "--target",
        str(tmp),
        *SGLANG_PARSER_PACKAGES,
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise InfraError(
            f"could not install SGLang {SGLANG_VERSION}'s parser: pip exited {proc.returncode}",
            fix="check the network or the package index, or run `evalgate setup` without --parsers "
            "(the parser test then checks flags against the recorded option list)",
            detail=proc.stderr[-2000:],
        )
    tmp.rename(target)
    return target


def run(args: argparse.Namespace) -> int:
    server = find_binary()
    print(f"llama-server {binary_version(server)} at {server}")
    for weights in GGUF_TYPES:
        path = derived_gguf(weights, find_binary("llama-quantize"))
        print(f"{weights:5} {path}  sha256 {file_sha256(path)[:16]}")
    if getattr(args, "parsers", False):
        try:
            print(f"sglang parser {install_parsers()}")
        except InfraError as exc:  # optional: the tests fall back to the recorded option list
            print(f"warning: {exc.render()}", file=sys.stderr)
    return 0
