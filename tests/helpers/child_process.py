"""Run a Python snippet in a child interpreter with extra import paths, JSON in and JSON out: how
the parser tests use SGLang and vLLM installs kept out of this process."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Mapping
from typing import Any

__all__ = ["run_json"]


def run_json(code: str, job: Any, *, pythonpath: str, env: Mapping[str, str] | None = None) -> dict[str, Any]:
    """``code`` reads ``job`` as JSON on stdin and prints its result as the last stdout line."""
    full = {**os.environ, **(env or {})}
    full["PYTHONPATH"] = os.pathsep.join(p for p in (pythonpath, os.environ.get("PYTHONPATH")) if p)
    proc = subprocess.run(
        [sys.executable, "-c", code],
        input=json.dumps(job),
        capture_output=True,
        text=True,
        env=full,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return dict(json.loads(proc.stdout.strip().splitlines()[-1]))
