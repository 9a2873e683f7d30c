"""SGLang's own argument parser, for the tests that check every command evalgate builds with it.

``evalgate setup --parsers`` installs the SGLang evalgate's flags are checked against
(``TESTED_VERSION``) without its dependencies (it imports on a CPU) into the cache.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from evalgate.engines.sglang._diagnose import TESTED_VERSION
from evalgate.errors import InfraError
from evalgate.gguf import cache_dir

__all__ = ["PARSER_PACKAGES", "install_parsers", "parser_dir"]

# what ``sglang.srt.server_args`` needs on a CPU besides torch (measured: 258 MB in all)
PARSER_PACKAGES = (
    f"sglang=={TESTED_VERSION}",
    *"orjson psutil pybase64 pillow starlette msgspec pyzmq ipython traitlets".split(),
)


def parser_dir() -> Path:
    return cache_dir() / "parsers" / f"sglang-{TESTED_VERSION}"


def install_parsers() -> Path:
    target = parser_dir()
    if (target / "sglang").is_dir():
        return target
    tmp = target.with_name(target.name + ".tmp")
    cmd = [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(tmp), *PARSER_PACKAGES]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise InfraError(
            f"could not install SGLang {TESTED_VERSION}'s parser: pip exited {proc.returncode}",
            fix="check the network or the package index, or run `evalgate setup` without --parsers "
            "(the parser test then checks flags against the recorded option list)",
            detail=proc.stderr[-2000:],
        )
    tmp.rename(target)
    return target
