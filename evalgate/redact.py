"""One redaction rule for every error text evalgate stores or prints.

A server's error body may echo what it was sent (the prompt, the system prompt, the
``Authorization`` header), and a URL may carry ``user:pass@``. Everything that goes into a
record, the manifest, a report or the terminal passes through ``redact`` first: API keys and
other secrets become ``***``, URL credentials become ``***@``, private exam text becomes
``[private]`` (also a fragment of it, and its JSON-escaped form, as an echo would carry it),
and the result is cut to a short excerpt.

Settings (lm-eval's ``model_args``, a server's reported args, a variant's environment) are masked
by what their key names, through ``is_secret_key``: a secret's name (``api_key``, ``hf_token``,
``password``), never a name that merely contains one (``tokenizer``, ``max_tokens``,
``add_bos_token``), so a tokenizer difference between the arms stays visible.
"""

from __future__ import annotations

import hashlib
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
    "is_secret_key",
    "mask_args",
    "mask_settings",
    "payload_texts",
    "recorded_settings",
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

_SECRET_WORDS = frozenset({"secret", "secrets", "password", "passwd", "credential", "credentials"})
"""A word that makes any name a secret's (``client_secret``, ``ssl_keyfile_password``)."""
_SECRET_LAST = frozenset({"key", "apikey", "token", "authtoken", "accesstoken", "authorization"})
"""A last word that makes a name a secret's (``api_key``, ``hf_token``, ``HF_TOKEN``)."""
_VOCABULARY = frozenset(
    "bos eos pad unk sep cls mask stop start end eot eom eod sot special image audio video vision "
    "think tool fim prefix suffix middle decoder".split()
)
"""A word before ``token`` that names a vocabulary token, not a credential (``add_bos_token``)."""
_WORD_SPLIT = re.compile(r"[^a-z0-9]+")
_CAMEL = re.compile(r"([a-z0-9])([A-Z])")
_ARG = re.compile(r"(^|,)(\s*)([^=,]+?)(\s*=\s*)([^,]*)")
"""One ``key=value`` of a comma-separated argument string (lm-eval's ``model_args``)."""


def env_secrets(env: Mapping[str, str] | None = None) -> list[str]:
    """The attach-mode API keys of both arms, as set in the environment."""
    env = os.environ if env is None else env
    return [env[k] for k in _KEY_ENVS if env.get(k)]


def redact_url(url: str) -> str:
    """``http://user:pass@host:8000`` -> ``http://***@host:8000`` (anything else unchanged)."""
    return _URL_CREDENTIALS.sub(lambda m: m.group(1) + MASK + "@", url)


def is_secret_key(name: str) -> bool:
    """Whether a setting named ``name`` holds a secret: its last word is key or token (a whole
    word: ``token``, ``hf_token``, ``access_token``, ``api_key``, ``apiKey``), unless a vocabulary
    token is meant (``add_bos_token``, ``pad_token``), or any word is secret, password, passwd or
    credential(s). ``tokenizer``, ``tokenizer_backend``, ``max_tokens``, ``ssl_keyfile`` are not."""
    words = [w for w in _WORD_SPLIT.split(_CAMEL.sub(r"\1_\2", str(name)).lower()) if w]
    if not words:
        return False
    if any(w in _SECRET_WORDS for w in words):
        return True
    if words[-1] not in _SECRET_LAST:
        return False
    return not (words[-1] == "token" and len(words) > 1 and words[-2] in _VOCABULARY)


def recorded_settings(pairs: Any) -> list[tuple[str, Any]]:
    """``(name, value)`` launch settings or environment as a manifest may hold them: the value of a
    secret name (``is_secret_key``; a flag's dashes read as underscores) becomes ``sha256:`` and
    the first 16 hex digits of its digest, so no secret is written, and a resume still sees that
    it changed (both sides are recorded the same way)."""
    out = []
    for name, value in pairs:
        if value is not None and is_secret_key(str(name).lstrip("-").replace("-", "_")):
            value = "sha256:" + hashlib.sha256(str(value).encode("utf-8", "surrogatepass")).hexdigest()[:16]
        out.append((name, value))
    return out


def mask_args(args: str) -> str:
    """``k=v,k2=v2`` with the value of every secret key (``is_secret_key``) as ``***`` and URL
    credentials masked; the other values are kept as written."""

    def one(m: re.Match[str]) -> str:
        value = MASK if is_secret_key(m.group(3)) else m.group(5)
        return m.group(1) + m.group(2) + m.group(3) + m.group(4) + value

    return redact_url(_ARG.sub(one, str(args)))


def mask_settings(value: Any) -> Any:
    """A copy of a settings mapping (nested mappings and lists too) with the value of every
    secret key (``is_secret_key``) as ``***`` and URL credentials masked in every string."""
    if isinstance(value, str):
        return redact_url(value)
    if isinstance(value, Mapping):
        return {k: MASK if is_secret_key(str(k)) else mask_settings(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [mask_settings(v) for v in value]
    return value


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
