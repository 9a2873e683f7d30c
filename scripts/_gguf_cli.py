"""What the GGUF converters (``gguf_to_hf.py``, ``gguf_to_w4a16.py``) share: the error that carries
its fix, the missing-packages check, the command line (optional ``SRC.gguf`` and ``OUT_DIR``), the
self-check's failure, and the run that prints either the error and its fix or the files written.

scripts/ is no package: each converter puts this folder on ``sys.path`` (``python -I`` leaves it
off) and imports this module by name. It needs only the standard library, so it loads in an
engine's venv as well as in evalgate's."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

__all__ = ["CHECK_FAILED", "ScriptError", "converter_parser", "fail_check", "out_beside", "require", "run"]

CHECK_FAILED = 3
"""Exit code when the written checkpoint disagrees with what it was made from (2: bad input)."""
SHOWN_PROBLEMS = 5


class ScriptError(Exception):
    """A cause and its fix; ``run`` prints both and exits with ``code``."""

    def __init__(self, cause: str, fix: str, code: int = 2) -> None:
        super().__init__(cause)
        self.fix = fix
        self.code = code


def require(packages: Sequence[str], fix: str) -> None:
    """Fail early, with the install line, when a package is missing (before any slow work)."""
    missing = []
    for name in packages:
        try:
            __import__(name)
        except ImportError:
            missing.append(name)
    if missing:
        raise ScriptError(f"{', '.join(missing)} not importable: the conversion needs them", fix)


def converter_parser(
    description: str, epilog: str, *, src_help: str, out_help: str
) -> argparse.ArgumentParser:
    """The converters' command line: ``[SRC.gguf [OUT_DIR]]``, each with an evalgate default."""
    p = argparse.ArgumentParser(description=description, epilog=epilog)
    p.add_argument("src", nargs="?", type=Path, help=src_help)
    p.add_argument("out", nargs="?", type=Path, help=out_help)
    return p


def out_beside(src: Path, suffix: str) -> Path:
    """The default output folder: ``<gguf without .gguf><suffix>`` beside the GGUF."""
    return src.with_name(src.name.removesuffix(".gguf") + suffix)


def fail_check(problems: Sequence[str], what: str, fix: str) -> None:
    """Raise exit code 3 when the read-back check found problems (the first few are named)."""
    if not problems:
        return
    named = "; ".join(problems[:SHOWN_PROBLEMS])
    more = len(problems) - SHOWN_PROBLEMS
    raise ScriptError(
        f"{what}: {named}" + (f" (and {more} more)" if more > 0 else ""), fix, code=CHECK_FAILED
    )


def run(command: Callable[[argparse.Namespace], Path], args: argparse.Namespace) -> int:
    """Run ``command``; print its error and fix (its exit code), or the files it wrote and the folder (0)."""
    try:
        out = command(args)
    except ScriptError as exc:
        print(f"error: {exc}\nfix: {exc.fix}", file=sys.stderr)
        return exc.code
    for path in sorted(p for p in out.iterdir() if p.is_file()):
        print(f"  {path.stat().st_size:>12,d}  {path}")
    print(out)
    return 0
