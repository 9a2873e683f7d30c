"""One redaction rule for every error text evalgate stores or prints.

A server's error body may echo what it was sent (the prompt, the system prompt, the
``Authorization`` header), and a URL may carry ``user:pass@``. Everything that goes into a
record, the manifest, a report or the terminal passes through ``redact`` first: API keys and
other secrets become ``***``, URL credentials become ``***@``, private exam text becomes
``[private]`` (also a fragment of it, and its JSON-escaped form, as an echo would carry it),
and the result is cut to a short excerpt.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterable, Mapping
from typing import Any

__all__ = [
    "BODY_EXCERPT",
    "MASK",
    "PRIVATE",
    "env_secrets",
    "excerpt",
    "payload_texts",
    "redact",
    "redact_url",
]

MASK = "***"
PRIVATE = "[private]"
BODY_EXCERPT = 120
"""Characters of a server's error body kept in an error text."""
FRAGMENT = 12
"""A run of this many characters of a private text, anywhere in an error, is masked."""

_URL_CREDENTIALS = re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://)[^/\s@\"']*@")
_BEARER = re.compile(r"(?i)\b(bearer|basic|token)(\s+)[A-Za-z0-9._~+/=-]{6,}")
_KEY_ENVS = ("EVALGATE_BASELINE_API_KEY", "EVALGATE_CANDIDATE_API_KEY")


def env_secrets(env: Mapping[str, str] | None = None) -> list[str]:
    """The attach-mode API keys of both arms, as set in the environment."""
    env = os.environ if env is None else env
    return [env[k] for k in _KEY_ENVS if env.get(k)]


def redact_url(url: str) -> str:
    """``http://user:pass@host:8000`` -> ``http://***@host:8000`` (anything else unchanged)."""
    return _URL_CREDENTIALS.sub(lambda m: m.group(1) + MASK + "@", url)


def _forms(text: str) -> list[str]:
    """A text as it may come back: as sent, and JSON-escaped (with and without ``ensure_ascii``)."""
    out = [text]
    for ascii_only in (False, True):
        escaped = json.dumps(text, ensure_ascii=ascii_only)[1:-1]
        if escaped not in out:
            out.append(escaped)
    return out


def _mask_whole(text: str, secret: str, mask: str) -> str:
    if len(secret) >= 4:
        return text.replace(secret, mask)
    return re.sub(rf"(?<!\w){re.escape(secret)}(?!\w)", mask, text)  # "B", "42": whole words only


def _mask_fragments(text: str, secret: str, mask: str) -> str:
    """Mask every run of ``FRAGMENT`` or more characters that also occurs in ``secret``."""
    k = FRAGMENT
    if len(secret) < k or len(text) < k:
        return text
    grams = {secret[i : i + k] for i in range(len(secret) - k + 1)}
    hit = [False] * len(text)
    for i in range(len(text) - k + 1):
        if text[i : i + k] in grams:
            for j in range(i, i + k):
                hit[j] = True
    if not any(hit):
        return text
    out, i = [], 0
    while i < len(text):
        if hit[i]:
            while i < len(text) and hit[i]:
                i += 1
            out.append(mask)
        else:
            out.append(text[i])
            i += 1
    return "".join(out)


def redact(
    text: str,
    *,
    secrets: Iterable[str] = (),
    private: Iterable[str] = (),
    limit: int | None = None,
) -> str:
    """``text`` with ``secrets`` (API keys) as ``***``, URL credentials and bearer tokens masked,
    ``private`` texts (and any 12-character fragment of them) as ``[private]``, then cut to
    ``limit`` characters."""
    text = redact_url(_BEARER.sub(lambda m: m.group(1) + m.group(2) + MASK, str(text)))
    for secret in sorted({s for s in secrets if s}, key=len, reverse=True):
        for form in _forms(secret):
            text = _mask_whole(text, form, MASK)
    texts = sorted({p for p in private if p and p.strip()}, key=len, reverse=True)
    for secret in texts:
        for form in _forms(secret):
            text = _mask_whole(text, form, PRIVATE)
    for secret in texts:
        for form in _forms(secret):
            text = _mask_fragments(text, form, PRIVATE)
    return excerpt(text, limit) if limit is not None else text


def excerpt(text: str, limit: int = BODY_EXCERPT) -> str:
    """The first ``limit`` characters, on one line, marked when cut."""
    flat = " ".join(str(text).split())
    return flat if len(flat) <= limit else flat[: max(0, limit - 1)] + "…"


def payload_texts(payload: Any, *, min_len: int = 8) -> list[str]:
    """Every string of ``min_len`` or more characters in a request payload: what an echoing server
    would send back (the prompt, the system prompt), so an error body can be cleaned of it."""
    out: list[str] = []
    stack = [payload]
    while stack:
        value = stack.pop()
        if isinstance(value, str):
            if len(value) >= min_len:
                out.append(value)
        elif isinstance(value, Mapping):
            stack.extend(value.values())
        elif isinstance(value, (list, tuple)):
            stack.extend(value)
    return out
