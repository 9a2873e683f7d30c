"""What the launcher tests share, with and without a real llama-server (tests/engines/test_launcher.py,
tests/e2e/test_launcher.py): a llama.cpp launch spec, the processes left behind, and a start whose
readiness never comes."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

import pytest

from evalgate.engines import run_process
from evalgate.engines.llamacpp import LlamaCppEngine
from evalgate.errors import ServerStartError
from evalgate.variants import LaunchSpec

__all__ = ["never_ready", "processes_with", "spec_with"]


def processes_with(marker: str) -> list[int]:
    """The pids whose command line contains ``marker`` (what a launch must not leave behind)."""
    pids = []
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                if marker.encode() in (proc / "cmdline").read_bytes():
                    pids.append(int(proc.name))
            except OSError:
                continue
    return pids


def spec_with(model: str, *extra: tuple[str, str | None]) -> LaunchSpec:
    """A small llama.cpp launch of ``model`` (2k context, one slot) plus ``extra`` flags."""
    base = LlamaCppEngine().config
    args = (("-c", "2048"), ("-np", "1"), ("-t", str(base.threads)), *extra)
    return LaunchSpec("llamacpp", model, args, (), frozenset())


def never_ready(
    cmd: Sequence[str],
    log_path: Path,
    *,
    timeout_s: float,
    diagnose: Callable[[str], str | None] | None = None,
) -> ServerStartError:
    """Start ``cmd`` with ``run_process`` behind a readiness check that never holds (no URL, no key)
    and return the ServerStartError it must raise."""
    with (
        pytest.raises(ServerStartError) as err,
        run_process(
            cmd,
            name=log_path.stem,
            base_url="",
            api_key="",
            log_path=log_path,
            ready=lambda: False,
            timeout_s=timeout_s,
            diagnose=diagnose,
        ),
    ):
        pass
    return err.value
