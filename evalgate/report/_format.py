"""Number and text formatting shared by every renderer, so HTML, Markdown and JUnit agree digit
for digit, and text from models or users can never break the document it is written into, nor
read differently from what it holds (bidirectional controls are shown, not obeyed).
"""

from __future__ import annotations

import json
import re
from typing import Any

__all__ = [
    "BIDI",
    "ci",
    "clean",
    "compact",
    "mde",
    "not_judged",
    "p",
    "pct",
    "points",
    "score",
    "show_bidi",
    "tail",
]

# Code points that HTML5 parsers flag and XML 1.0 forbids (C0/C1 controls except tab and
# newline, lone surrogates from JSON "\ud800" escapes, and the noncharacters).
_BAD = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\ud800-\udfff\ufdd0-\ufdef\ufffe\uffff]")
# Bidirectional controls: embeddings and overrides (U+202A-U+202E), isolates (U+2066-U+2069) and
# the marks (U+200E, U+200F, U+061C). Obeyed, they make a reviewer read text in another order
# than it is stored ("Trojan Source", CVE-2021-42574): a reversed answer, a hidden suffix.
BIDI = re.compile("[\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def show_bidi(text: str) -> str:
    """Each bidirectional control as its visible escape (``\\u202e``), so it reads as stored."""
    return BIDI.sub(lambda m: f"\\u{ord(m.group()):04x}", text)


def clean(text: str) -> str:
    """Text that is safe to embed anywhere: line ends normalised, bad code points and
    bidirectional controls made visible."""
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    text = _BAD.sub(lambda m: f"\\x{ord(m.group()):02x}" if ord(m.group()) < 0x100 else "\ufffd", text)
    return show_bidi(text)


def compact(value: Any) -> str:
    """One-line display of any JSON value (extracted answers, targets, tool calls)."""
    if value is None:
        return ""
    if isinstance(value, str):
        return clean(value)
    return clean(json.dumps(value, ensure_ascii=False, sort_keys=True, default=str))


def not_judged(suite: str, reason: str) -> str:
    """``gsm8k was not judged: <why>``, in full (the gate's reasons start with the suite's name)."""
    return f"{suite} was not judged: {reason.removeprefix(f'{suite}: ')}"


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
