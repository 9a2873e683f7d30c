"""Which workers an attached gateway may send evalgate to.

A gateway's ``GET /workers`` listing is the server's word, not the user's, and evalgate contacts
every worker it lists directly, with the arm's API key (fingerprints, the probe, the tokenizer's
calls). So a listed worker is contacted only on the gateway's own host, spelled as the user spelled
it (lower case; ``localhost``, ``127.0.0.1`` and ``::1`` are three hosts here), or on a host the
user names in ``[gateway] allow_workers`` (``host`` for any port, ``host:port`` for one). Anything
else, and any URL evalgate could not contact as written (another scheme, credentials, no host, a
port that is none, spaces or control characters, an API key inside it, past ``MAX_WORKER_URL``),
is refused before any connection to any worker (exit 2, naming the worker and the setting).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from urllib.parse import urlsplit

from evalgate.engines.gateway import GatewayWorker
from evalgate.errors import ConfigError
from evalgate.redact import redact, redact_url

__all__ = ["ALLOW_SETTING", "MAX_WORKER_URL", "AllowedHost", "parse_allowed", "require_allowed_workers"]

ALLOW_SETTING = "[gateway] allow_workers"
MAX_WORKER_URL = 200
"""Characters of a listed worker URL at most: a longer one is no worker evalgate contacts."""
_SHOWN = 120
"""Characters of a listed URL an error quotes (masked first)."""


@dataclass(frozen=True)
class AllowedHost:
    """One entry of ``[gateway] allow_workers``: a host, on one port or (None) any."""

    host: str
    port: int | None = None

    def admits(self, host: str, port: int) -> bool:
        return self.host == host and self.port in (None, port)


def parse_allowed(entries: Iterable[str]) -> tuple[AllowedHost, ...]:
    """``[gateway] allow_workers`` as hosts: ``host``, ``host:port``, ``[v6]``, ``[v6]:port`` or a
    bare IPv6 address; anything else is refused (exit 2, naming the entry)."""
    out = []
    for entry in entries:
        text = str(entry).strip().lower()
        bare_v6 = text.count(":") > 1 and not text.startswith("[")
        try:  # a bracketed host that is no IPv6 address, or a port that is none: ValueError
            parts = urlsplit("//" + (f"[{text}]" if bare_v6 else text))
            port = parts.port
        except ValueError:
            parts, port = urlsplit(""), None
        if not parts.hostname or parts.username is not None or parts.path or parts.query:
            raise ConfigError(
                f"{ALLOW_SETTING} has {entry!r}, which is not a host or host:port",
                fix='name each worker host as the gateway lists it, e.g. "10.0.0.5", "10.0.0.5:30000", '
                '"[fd00::5]:30000" or "worker-1.internal"',
            )
        out.append(AllowedHost(parts.hostname, port))
    return tuple(out)


def _unusable(url: str, secrets: Sequence[str]) -> str | None:
    """Why evalgate would not contact ``url`` as written, whoever allowed its host; None if usable."""
    if len(url) > MAX_WORKER_URL:
        return f"a URL longer than {MAX_WORKER_URL} characters"
    if any(c.isspace() or not c.isprintable() for c in url):
        return "a URL with spaces or control characters"
    if redact(url, secrets=secrets) != url:
        return "a URL that holds an API key or credentials"
    parts = urlsplit(url)
    if parts.scheme.lower() not in ("http", "https"):
        return "not an http(s) URL"
    if parts.username is not None or parts.password is not None:
        return "a URL with credentials (user:pass@)"
    if not parts.hostname:
        return "a URL without a host"
    try:
        port = parts.port
    except ValueError:
        port = -1
    return "a URL whose port is not a port" if port is not None and not 0 < port < 65536 else None


def require_allowed_workers(
    arm: str,
    gateway_url: str,
    workers: Sequence[GatewayWorker],
    allowed: Sequence[AllowedHost],
    *,
    secrets: Sequence[str] = (),
) -> None:
    """Refuse (exit 2) a listing that names a worker evalgate may not contact: a URL it cannot
    use as written, or a host that is neither the gateway's nor in ``allowed``. Called before any
    connection to any listed worker, so nothing (the key least of all) reaches one."""
    where = redact_url(gateway_url)
    own = (urlsplit(gateway_url).hostname or "").lower()
    for w in workers:
        shown = redact(w.url, secrets=secrets, limit=_SHOWN)
        problem = _unusable(w.url, secrets)
        if problem is not None:
            raise ConfigError(
                f"the {arm}'s gateway {where} lists the worker {shown!r}, {problem}; evalgate contacts no "
                "worker on a listing's word that it could not reach as written",
                fix="list each worker by its plain http(s)://HOST:PORT in the gateway (smg's --worker-urls); "
                "no setting allows such a URL",
            )
        parts = urlsplit(w.url)
        host = (parts.hostname or "").lower()
        port = parts.port or (443 if parts.scheme.lower() == "https" else 80)
        if host == own or any(a.admits(host, port) for a in allowed):
            continue
        named = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
        raise ConfigError(
            f"the {arm}'s gateway {where} lists the worker {shown}, whose host {host} is neither the "
            f"gateway's ({own}) nor in {ALLOW_SETTING}: evalgate would connect there with the {arm}'s API "
            "key on the gateway's word alone, so it contacted no worker",
            fix=f'if that worker is the {arm}\'s own, add "{named}" (or "{host}" for any port) to '
            f"{ALLOW_SETTING} in evalgate.toml; otherwise check what the gateway routes to (its GET /workers "
            "names a server you did not)",
        )
