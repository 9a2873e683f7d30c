"""How hard a server's KV pool was pressed while it served, read from its own log.

A full pool is where an FP8 KV cache earns its keep and where its failures live: SGLang retracts
running requests ("KV cache pool is full. Retract requests. #retracted_reqs: N, ...", a warning
of its scheduler) and vLLM preempts them (its periodic stats line, "Preemptions: N" for that
interval, beside "KV cache usage: X%"), and both recompute what they dropped. A run that never
filled the pool never ran that path. The formats are those of SGLang 0.5.23's
``scheduler.py`` / ``pool_stats_observer.py`` and vLLM's ``v1/metrics/loggers.py``
(tests/engines/test_pressure.py holds lines of each, and the real servers' logs).
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterable
from dataclasses import dataclass

__all__ = ["PoolPressure", "sglang_pressure", "vllm_pressure"]

_RETRACT = re.compile(r"KV cache pool is full\. Retract requests\. #retracted_reqs: (\d+)")
_SGLANG_USAGE = re.compile(r"(swa |full )?token usage: ([0-9]*\.?[0-9]+)")
_PREEMPT = re.compile(r"Preemptions: (\d+)")
_VLLM_USAGE = re.compile(r"KV cache usage: ([0-9]*\.?[0-9]+)%")


@dataclass(frozen=True)
class PoolPressure:
    """What one server's log says of its KV pool while it served."""

    kind: str
    """retractions (SGLang) or preemptions (vLLM)."""
    events: int
    """Log lines that reported some: SGLang's retract warnings, vLLM's stats lines with preemptions."""
    requests: int
    """Requests retracted or preempted, summed over those lines."""
    peak_usage: float | None
    """The highest share of the pool in use any stats line reported (0-1), or None if none did."""

    def to_dict(self) -> dict[str, object]:
        return dataclasses.asdict(self)


def sglang_pressure(lines: Iterable[str]) -> PoolPressure:
    """SGLang: its retract warnings, and the highest (full-attention) token usage of its batch lines.
    ``lines``: the log line by line (a long run's log is read as a stream, never whole)."""
    events = requests = 0
    peak: float | None = None
    for line in lines:
        for n in _RETRACT.findall(line):
            events, requests = events + 1, requests + int(n)
        for kind, v in _SGLANG_USAGE.findall(line):
            if kind != "swa ":
                peak = _higher(peak, float(v))
    return PoolPressure("retractions", events, requests, peak)


def vllm_pressure(lines: Iterable[str]) -> PoolPressure:
    """vLLM: its stats lines' preemptions (each line counts its own interval) and KV cache usage."""
    events = requests = 0
    peak: float | None = None
    for line in lines:
        for n in _PREEMPT.findall(line):
            events, requests = events + (int(n) > 0), requests + int(n)
        for v in _VLLM_USAGE.findall(line):
            peak = _higher(peak, float(v) / 100)
    return PoolPressure("preemptions", events, requests, peak)


def _higher(peak: float | None, value: float) -> float:
    return value if peak is None else max(peak, value)
