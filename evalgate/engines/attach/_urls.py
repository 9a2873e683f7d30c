"""Whether two URLs reach one server: by their spelling (``server_identity``) and by the
addresses their hosts resolve to, so a pair whose servers report no instance of their own
(vLLM) is still refused when both arms are one server under two spellings."""

from __future__ import annotations

import ipaddress
import socket
import threading
import time
from collections.abc import Iterable, Sequence
from urllib.parse import SplitResult, unquote, urlsplit

from evalgate.errors import ConfigError
from evalgate.redact import redact_url

__all__ = ["normalize_url", "require_two_servers", "server_identity", "shared_server"]


def normalize_url(url: str) -> str:
    """``http://h:p`` without a trailing ``/`` or ``/v1``: scorers add the API paths themselves."""
    url = url.strip().rstrip("/")
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise ConfigError(f"{url!r} is not a server URL", fix="give it as http://HOST:PORT (comma-separated)")
    return url[: -len("/v1")] if url.endswith("/v1") else url


_LOOPBACK = {"localhost", "localhost.localdomain", "ip6-localhost", "ip6-loopback"}
_RESOLVE_S = 5.0
"""Seconds the host names of a pair may take to resolve; a name not resolved by then is compared
by its spelling alone (its fingerprint probe reports a host that cannot be reached)."""


def _host(host: str) -> str:
    """A host as one spelling: lower case, no trailing dot, an IPv4-mapped IPv6 address as its
    IPv4, and every loopback or wildcard name or address (localhost, 127.x, ::1, 0.0.0.0) as one."""
    host = host.lower().rstrip(".")
    try:
        ip = ipaddress.ip_address(host.split("%")[0])
    except ValueError:
        return "loopback" if host in _LOOPBACK else host
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return "loopback" if ip.is_loopback or ip.is_unspecified else str(ip)


def _path(path: str) -> str:
    """A URL path with its dot segments removed (RFC 3986 5.2.4: ``/x/..`` is ``/``), encoded dots
    and repeated ``/`` read as the server's router reads them, without a trailing ``/`` or ``/v1``."""
    segments: list[str] = []
    for seg in unquote(path).split("/"):
        if seg == "..":
            if segments:
                segments.pop()
        elif seg not in ("", "."):
            segments.append(seg)
    out = "/" + "/".join(segments) if segments else ""
    return out[: -len("/v1")] if out.endswith("/v1") else out


def _port(scheme: str, parts: SplitResult) -> int:
    try:
        return parts.port or (443 if scheme == "https" else 80)
    except ValueError:
        return -1


def server_identity(url: str) -> str:
    """What tells two URLs apart as servers by their spelling: scheme and host case, the default
    port, dot segments and a trailing ``/`` or ``/v1`` in the path, credentials, an IPv4-mapped
    IPv6 address, and the loopback's names (localhost, 127.x, ::1) do not."""
    parts = urlsplit(normalize_url(url))
    scheme = parts.scheme.lower()
    return f"{scheme}://{_host(parts.hostname or '')}:{_port(scheme, parts)}{_path(parts.path)}"


def _addresses(url: str) -> tuple[set[str], bool]:
    """Where ``url`` connects, ``address:port/path`` for each address its host resolves to (the
    loopback as one; empty when it does not resolve), and whether its host is spelled as an
    address or a loopback name (True) rather than a DNS name."""
    parts = urlsplit(normalize_url(url))
    scheme = parts.scheme.lower()
    port, path, host = _port(scheme, parts), _path(parts.path), parts.hostname or ""
    if port < 0 or not host:
        return set(), False
    try:
        literal = _host(host) == "loopback" or bool(
            socket.getaddrinfo(host, port, flags=socket.AI_NUMERICHOST)
        )
    except (OSError, UnicodeError, ValueError):
        literal = False
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (OSError, UnicodeError, ValueError):
        return set(), literal
    return {f"{_host(str(info[4][0]))}:{port}{path}" for info in infos}, literal


def _resolved(urls: Iterable[str]) -> dict[str, tuple[set[str], bool]]:
    """``_addresses`` of each URL, looked up at once within ``_RESOLVE_S`` on daemon threads (a
    slow DNS neither holds the run nor its exit: a URL not resolved by then has no address)."""
    todo = list(dict.fromkeys(urls))
    found: dict[str, tuple[set[str], bool]] = {}
    threads = [
        threading.Thread(target=lambda u=u: found.setdefault(u, _addresses(u)), daemon=True) for u in todo
    ]
    for t in threads:
        t.start()
    deadline = time.monotonic() + _RESOLVE_S
    for t in threads:
        t.join(max(0.0, deadline - time.monotonic()))
    return {u: found.get(u, (set(), False)) for u in todo}


def require_two_servers(baseline: Sequence[str], candidate: Sequence[str]) -> None:
    """Refuse (exit 2) a pair where both arms reach the same server: it agrees with itself, so it
    would pass whatever the candidate is (``shared_server``)."""
    shared = shared_server(baseline, candidate)
    if shared:
        b, c = shared
        raise ConfigError(
            f"--baseline-url {redact_url(b)} and --candidate-url {redact_url(c)} are the same server, so the "
            "pair compares that server with itself and would pass whatever the candidate is",
            fix="point --candidate-url at the candidate's own server; to check the harness against one "
            "server on purpose (an A/A run), add --same-server-ok",
        )


def shared_server(baseline: Sequence[str], candidate: Sequence[str]) -> tuple[str, str] | None:
    """The first (baseline URL, candidate URL) that reach one server, else None. One server is one
    spelling (``server_identity``), or one address, port and path (``_addresses``) where either URL
    names its host by address or as the loopback, so this holds where the server reports no
    instance (``require_two_instances``)."""
    base = {server_identity(u): u for u in baseline}
    shared = [(base[server_identity(u)], u) for u in candidate if server_identity(u) in base]
    if not shared:  # two DNS names on one address may be virtual hosts of an ingress: not refused
        where = _resolved([*baseline, *candidate])
        shared = [
            (b, c)
            for c in candidate
            for b in baseline
            if where[b][0] & where[c][0] and (where[b][1] or where[c][1])
        ]
    return shared[0] if shared else None
