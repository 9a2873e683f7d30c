"""Seeds derived from names, so every seeded choice (item subsets, few-shot examples, the
sequential order) is the same in every process and independent of which other suites run."""

from __future__ import annotations

import hashlib

__all__ = ["stable_seed"]


def stable_seed(*parts: object) -> int:
    """A 32-bit seed from strings and ints, stable across processes (unlike ``hash``)."""
    digest = hashlib.sha256("\x1f".join(map(str, parts)).encode()).digest()
    return int.from_bytes(digest[:4], "little")
