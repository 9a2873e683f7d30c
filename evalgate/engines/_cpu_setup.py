"""What the two CPU engines' setups share (``evalgate setup --sglang-cpu`` and ``--vllm-cpu``):
the install folder and its venv made and every step run and reported one line each
(``run_steps``), one setup command run with its output tail on failure (``run_step``), the
engine's server imported in its venv (``venv_import_check``), a GGUF converted to a
folder once per GGUF (``convert_once``), the default model's Hugging Face twins of its GGUFs
(``checkpoint_dir``, which both engines serve) and llama.cpp's quantizer that makes those GGUFs.
Both engine packages import it; neither imports the other (``tests/test_imports.py``)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from evalgate.engines.gguf import DEFAULT_MODEL, file_sha256
from evalgate.errors import ConfigError, InfraError

__all__ = [
    "CPU_WEIGHTS",
    "Step",
    "checkpoint_dir",
    "convert_once",
    "llama_quantize",
    "run_step",
    "run_steps",
    "venv_import_check",
]

CPU_WEIGHTS = {"bf16": "F16", "int4": "Q4_0"}
"""Weights precision -> the GGUF (``evalgate.engines.gguf.GGUF_TYPES``) whose Hugging Face twin serves it."""


Step = tuple[str, Callable[[], str]]
"""One setup step: its name, and the call that does it and returns one line of what it did (or kept)."""


def checkpoint_dir(root: Path, weights: str) -> Path:
    """The Hugging Face twin of the default model's GGUF for ``weights`` (``CPU_WEIGHTS``)."""
    return root / f"{DEFAULT_MODEL}.{CPU_WEIGHTS[weights]}-hf"


def llama_quantize() -> Path | None:
    """llama.cpp's ``llama-quantize``, which makes the GGUFs the twins are converted from; None
    where only the xllamacpp runtime is installed (the gguf package then writes the same files)."""
    from evalgate.engines import llamacpp  # only a setup loads the llama.cpp engine

    try:
        return llamacpp.find_binary("llama-quantize")
    except ConfigError:
        if llamacpp.resolve_runtime("auto") == "llama-server":  # neither installed: names both extras
            raise
        return None


def run_steps(
    label: str,
    root: Path,
    python: Path,
    in_order: Sequence[Step],
    side_by_side: Sequence[Step] = (),
    *,
    say: Callable[[str], None],
) -> None:
    """Make the install folder ``root`` and its venv (whose interpreter is ``python``), then run
    each step and say ``<label> [n/total] name: what (seconds)``, the venv the first:
    ``in_order`` one after another, then ``side_by_side`` at the same time (children of the venv's
    python), their lines still in step order; the first failure raises once all have ended."""
    root.mkdir(parents=True, exist_ok=True)
    steps = [("venv", lambda: _venv(root, python, label)), *in_order]
    total = len(steps) + len(side_by_side)
    for n, (name, step) in enumerate(steps, 1):
        what, seconds = _timed(step)
        say(f"{label} [{n}/{total}] {name}: {what} ({seconds:.0f} s)")
    if not side_by_side:
        return
    with ThreadPoolExecutor(max_workers=len(side_by_side)) as pool:
        futures = [pool.submit(_timed, step) for _, step in side_by_side]
        for n, ((name, _), future) in enumerate(zip(side_by_side, futures, strict=True), len(steps) + 1):
            what, seconds = future.result()  # in step order; the first failure raises once all ended
            say(f"{label} [{n}/{total}] {name}: {what} ({seconds:.0f} s)")


def _timed(step: Callable[[], str]) -> tuple[str, float]:
    start = time.monotonic()
    what = step()
    return what, time.monotonic() - start


def run_step(cmd: list[str], what: str, fix: str, *, timeout: float = 3600) -> str:
    """One setup command, its output on success, an InfraError with its tail otherwise."""
    # in the venv's folder and with PYTHONSAFEPATH: run from evalgate's checkout, `python -c`
    # would put its kernels/ folder first on sys.path, where transformers' probe for Hugging
    # Face's `kernels` package imports it
    env = {**os.environ, "PYTHONSAFEPATH": "1"}
    cwd = Path(cmd[0]).parents[2] if cmd[0].endswith("/venv/bin/python") else None
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env, cwd=cwd)
    except subprocess.TimeoutExpired as exc:
        raise InfraError(f"{what} took over {timeout:.0f} s", fix=fix) from exc
    except OSError as exc:
        raise InfraError(f"{what} could not start: {exc}", fix=fix) from exc
    if proc.returncode != 0:
        tail = (proc.stderr or proc.stdout)[-3000:]
        raise InfraError(f"{what} failed (exit {proc.returncode})", fix=fix, detail=tail)
    return proc.stdout


def _venv(root: Path, python: Path, label: str) -> str:
    """``root/venv`` made by this interpreter's venv module, unless its ``python`` is there already."""
    venv = root / "venv"
    if python.exists():
        return f"{venv} (kept)"
    run_step(
        [sys.executable, "-m", "venv", str(venv)],
        f"creating the {label} venv",
        "check that Python's venv module is installed (Debian: apt-get install python3-venv)",
    )
    return str(venv)


def venv_import_check(python: Path, code: str, *, package: str, server: str, fix: str) -> str:
    """Run ``code`` (imports of the engine's ``server``, then a print of ``package``'s version) in
    the venv's ``python``: "<package> <the version it printed last> imports"."""
    out = run_step([str(python), "-c", code], f"importing {server} in its venv", fix, timeout=600)
    return f"{package} {out.strip().splitlines()[-1] if out.strip() else '?'} imports"


def convert_once(gguf: Path, out: Path, command: Callable[[Path], list[str]], *, what: str, fix: str) -> bool:
    """Make ``out`` from ``gguf`` by running ``command(tmp)`` (a script that writes the folder ``tmp``),
    unless ``out``'s stamp (``evalgate-source.json``: the GGUF's name and sha256) says it already
    was; the folder appears whole or not at all. True when it converted, False when it kept ``out``."""
    source = {"gguf": gguf.name, "sha256": file_sha256(gguf)}
    stamp = out / "evalgate-source.json"
    if stamp.exists() and json.loads(stamp.read_text()) == source:
        return False
    tmp = out.with_name(out.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    run_step(command(tmp), what, fix)
    (tmp / "evalgate-source.json").write_text(json.dumps(source, indent=2) + "\n")
    shutil.rmtree(out, ignore_errors=True)
    tmp.rename(out)
    return True
