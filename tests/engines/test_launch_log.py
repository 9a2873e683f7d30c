"""An arm launched twice in one run (a resume, the baseline relaunched for the drift reads) appends
to one log file; what is read of a launch (its pool, its scales, its pressure) is its own part."""

from __future__ import annotations

import sys
import time
from pathlib import Path
from types import SimpleNamespace

from evalgate.engines._launcher import LaunchSlot, launch_server


def _launch(log_dir: Path, line: str):
    code = f"import time; print({line!r}, flush=True); time.sleep(60)"
    engine = SimpleNamespace(diagnose=lambda log: None, diagnose_signal=lambda sig, log: None)
    return launch_server(
        engine,  # type: ignore[arg-type]
        lambda port, key: [sys.executable, "-c", code],
        LaunchSlot("baseline", log_dir),
        ready=lambda url, key: True,
        env={},
        timeout_s=30,
    )


def _until(handle, text: str) -> None:
    deadline = time.monotonic() + 20
    while text not in handle.own_log() and time.monotonic() < deadline:
        time.sleep(0.05)


def test_a_second_launch_reads_only_its_own_lines(tmp_path: Path) -> None:
    with _launch(tmp_path, "CPU KV cache size: 46,592 tokens") as first:
        _until(first, "tokens")
    with _launch(tmp_path, "CPU KV cache size: 46,592 tokens (again)") as second:
        _until(second, "again")
        assert second.log_path == first.log_path and second.log_start > 0
        assert second.own_log().count("CPU KV cache size") == 1 and "again" in second.own_log()
    assert first.own_log().count("CPU KV cache size") == 2  # the first's view runs to the file's end
