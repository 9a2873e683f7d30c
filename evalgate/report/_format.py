"""Number and text formatting shared by every renderer, so HTML, Markdown and JUnit agree digit
for digit, and text from models or users can never break the document it is written into.
"""

from __future__ import annotations

import json
import re
from typing import Any

__all__ = ["ci", "clean", "compact", "mde", "p", "pct", "points", "score", "tail"]

# Code points that HTML5 parsers flag and XML 1.0 forbids (C0/C1 controls except tab and
# newline, lone surrogates from JSON "\ud800" escapes, and the noncharacters).
_BAD = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\ud800-\udfff\ufdd0-\ufdef\ufffe\uffff]")


def clean(text: str) -> str:
    """Text that is safe to embed anywhere: line ends normalised, bad code points made visible."""
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    return _BAD.sub(lambda m: f"\\x{ord(m.group()):02x}" if ord(m.group()) < 0x100 else "\ufffd", text)


def compact(value: Any) -> str:
    """One-line display of any JSON value (extracted answers, targets, tool calls)."""
    if value is None:
        return ""
    if isinstance(value, str):
        return clean(value)
    return clean(json.dumps(value, ensure_ascii=False, sort_keys=True, default=str))


def tail(text: str, limit: int) -> tuple[str, int]:
    """The last ``limit`` characters (where a few-shot prompt asks its question) and how many were cut."""
    if len(text) <= limit:
        return text, 0
    return text[-limit:], len(text) - limit


def score(x: float) -> str:
    return f"{x:.3f}"


def points(x: float) -> str:
    """A difference of proportions in percentage points, signed."""
    return f"{x * 100:+.1f} pt"


def ci(low: float, high: float) -> str:
    return f"[{low * 100:+.1f}, {high * 100:+.1f}] pt"


def pct(x: float) -> str:
    return f"{x * 100:.1f}%"


def mde(x: float) -> str:
    return f"{x * 100:.1f} pt"


def p(x: float | None) -> str:
    return "—" if x is None else f"{x:.3g}"
