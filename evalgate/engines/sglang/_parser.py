"""SGLang's own argument parser, for the tests that check every command evalgate builds with it.

``evalgate setup --parsers`` installs the SGLang evalgate's flags are checked against
(``TESTED_VERSION``) without its dependencies (it imports on a CPU) into the cache.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from evalgate.engines.gguf import cache_dir
from evalgate.engines.sglang._diagnose import TESTED_VERSION
from evalgate.errors import InfraError

__all__ = ["PARSER_PACKAGES", "install_parsers", "parser_dir"]

# what ``sglang.srt.server_args`` needs on a CPU besides torch (measured: 258 MB in all), and
# SGLang's OpenAI request models (``sglang/srt/entrypoints/openai/protocol.py`` imports
# ``openai.types``; SGLang 0.5.23 pins openai==2.8.0), which tests/helpers/sglang_shim.py validates with
PARSER_PACKAGES = (
    f"sglang=={TESTED_VERSION}",
    *"orjson psutil pybase64 pillow starlette msgspec pyzmq ipython traitlets".split(),
    *"openai==2.8.0 distro jiter sniffio".split(),
)


def parser_dir() -> Path:
    return cache_dir() / "parsers" / f"sglang-{TESTED_VERSION}"


def _missing(target: Path) -> list[str]:
    """The packages of PARSER_PACKAGES without a ``.dist-info`` in ``target``."""
    names = {p.name.split("-")[0].lower().replace("_", "-") for p in target.glob("*.dist-info")}
    return [p for p in PARSER_PACKAGES if p.split("==")[0].lower().replace("_", "-") not in names]


def install_parsers() -> Path:
    """Install PARSER_PACKAGES into ``parser_dir()``; an install from before a package was added
    gets only what it lacks."""
    target = parser_dir()
    if (target / "sglang").is_dir():
        missing = _missing(target)
        if missing:
            _pip(["--target", str(target), "--upgrade", *missing])
        return target
    tmp = target.with_name(target.name + ".tmp")
    _pip(["--target", str(tmp), *PARSER_PACKAGES])
    tmp.rename(target)
    return target


def _pip(args: list[str]) -> None:
    cmd = [sys.executable, "-m", "pip", "install", "-q", "--no-deps", *args]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise InfraError(
            f"could not install SGLang {TESTED_VERSION}'s parser: pip exited {proc.returncode}",
            fix="check the network or the package index, or run `evalgate setup` without --parsers "
            "(the parser test then checks flags against the recorded option list)",
            detail=proc.stderr[-2000:],
        )
