"""Reading a server's log, the same way for every engine: a diagnosis table of rules (pattern ->
one-line cause and fix, first match wins) and the per-process values of a startup line."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import NamedTuple

__all__ = ["GIB_TO_MIB", "Rule", "diagnose_log", "lines_from", "number", "per_tag", "read_from"]

GIB_TO_MIB = 1024.0  # SGLang's "GB" and vLLM's "GiB" are both 2**30 bytes


class Rule(NamedTuple):
    """One row of an engine's diagnosis table; specific causes go before generic ones."""

    pattern: str
    """Searched in the whole log (``(?i)`` in the pattern for case-insensitive)."""
    message: Callable[[re.Match[str], str], str]
    """(the match, the whole log) -> the cause and the fix, in one line."""


def diagnose_log(rules: Sequence[Rule], log: str) -> str | None:
    """The message of the first rule whose pattern occurs in ``log``, or None."""
    for rule in rules:
        m = re.search(rule.pattern, log)
        if m:
            return rule.message(m, log)
    return None


def number(text: str) -> float:
    """``1,234.5`` -> 1234.5."""
    return float(text.replace(",", ""))


def per_tag(pattern: str, log: str, tag: str) -> dict[str, float]:
    """Last value of ``pattern`` per process tag (DP rank, worker), so restarts are not double-counted."""
    out: dict[str, float] = {}
    for line in log.splitlines():
        m = re.search(pattern, line)
        if m:
            t = re.search(tag, line)
            out[t.group(0) if t else ""] = number(m.group(1))
    return out


def lines_from(path: Path, start: int = 0) -> Iterator[str]:
    """A log's lines from byte ``start`` on, one at a time (a long run's log is never held whole);
    nothing if it cannot be read."""
    try:
        with open(path, "rb") as f:
            f.seek(start)
            for raw in f:
                yield raw.decode("utf-8", errors="replace")
    except OSError:
        return


def read_from(path: Path, start: int = 0) -> str:
    """A log from byte ``start`` on (one launch's part of a file several launches appended to);
    "" if it cannot be read."""
    try:
        with open(path, "rb") as f:
            return f.read()[start:].decode("utf-8", errors="replace")
    except OSError:
        return ""
