"""Reading an attached server back: its engine, its settings, and whether two of them compare.

evalgate did not start these servers, so their settings come from their own endpoints
(``/v1/models`` plus each engine's own, which its package's ``AttachDialect`` names and reads).
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import httpx

from evalgate.arms import original
from evalgate.engines import llamacpp, sglang, vllm
from evalgate.engines.api import AttachDialect
from evalgate.engines.attach._urls import normalize_url
from evalgate.engines.client import MAX_ANSWER_BYTES
from evalgate.errors import ConfigError, ServerStartError
from evalgate.redact import BODY_EXCERPT, redact, redact_url

DIALECTS: dict[str, AttachDialect] = {d.name: d for d in (llamacpp.DIALECT, sglang.DIALECT, vllm.DIALECT)}
PROTOCOLS = tuple(DIALECTS)

# Differ between replicas of one deployment, so never compared (within an arm or across the pair),
# with each engine's own (AttachDialect.replica_keys).
PER_HOST = frozenset({"host", "port"})
# May differ between the arms: the checkpoint and its quantization, the KV dtype, kernel backends
# (_KERNEL_BACKEND), and served names, with each engine's own (AttachDialect.quant_keys).
# Tokenizers are compared by fingerprint at preflight.
PAIR_IGNORED = frozenset(
    "model models model_path tokenizer_path served_model_name revision quantization kv_cache_dtype".split()
)
_KERNEL_BACKEND = re.compile(r"(attention|gemm|moe).*_backend$")


def api_key_for(arm: str, env: Mapping[str, str] | None = None) -> str | None:
    """``EVALGATE_<ARM>_API_KEY``; a repeat arm (--aa) is its original's servers, so it uses that key."""
    env = os.environ if env is None else env
    return env.get(_key_env(arm)) or None


def _key_env(arm: str) -> str:
    return f"EVALGATE_{original(arm).upper()}_API_KEY"


def require_two_instances(base_info: Mapping[str, Any], cand_info: Mapping[str, Any]) -> None:
    """Refuse (exit 2) arms whose URLs differ but reach one running server, as its engine reports
    it (``AttachDialect.instance``: llama-server's random media marker, SGLang's random seed with
    every server arg): a proxy's port, a DNS alias, another address of the host. vLLM reports
    nothing of the kind, so there only the URLs tell (``require_two_servers``)."""
    seen: dict[str, str] = {}
    for fp in _servers(base_info):
        key = dialect_of(fp).instance(fp)
        if key is not None:
            seen[key] = str(fp["url"])
    for fp in _servers(cand_info):
        key = dialect_of(fp).instance(fp)
        if key is not None and key in seen:
            raise ConfigError(
                f"--baseline-url {redact_url(seen[key])} and --candidate-url {redact_url(str(fp['url']))} "
                f"reach one {fp['protocol']} server (both report the same instance), so the pair compares "
                "that server with itself and would pass whatever the candidate is",
                fix="point --candidate-url at the candidate's own server; to check the harness against one "
                "server on purpose (an A/A run), add --same-server-ok",
            )


class _Probe:
    """GETs against one URL; answers None for 'not this endpoint', raises for anything else."""

    def __init__(self, url: str, api_key: str | None, key_env: str, timeout_s: float) -> None:
        self.url, self.key_sent, self.key_env = redact_url(url), bool(api_key), key_env
        self._key = api_key or ""
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self.http = httpx.Client(base_url=url, headers=headers, timeout=httpx.Timeout(timeout_s, connect=5.0))

    def get(self, path: str) -> Any:
        try:
            with self.http.stream("GET", path) as resp:
                body = self._read(resp, path)
        except httpx.ConnectError as exc:
            raise ServerStartError(
                f"cannot connect to {self.url} ({exc or 'connection refused'})",
                fix="check that the server is running and listens on that host and port "
                "(a remote server must listen on 0.0.0.0, not 127.0.0.1)",
            ) from exc
        except httpx.HTTPError as exc:
            raise ServerStartError(
                f"{self.url} did not answer GET {path} ({type(exc).__name__}: {exc})",
                fix="check the URL and that the server is not overloaded or still loading its model",
            ) from exc
        if resp.status_code in (401, 403):
            cause = "rejected the API key in" if self.key_sent else "requires an API key, and none was set in"
            raise ConfigError(
                f"{self.url} {cause} {self.key_env} (HTTP {resp.status_code} on {path})",
                fix=f"export {self.key_env} with the key the server was started with (its --api-key)",
            )
        if resp.status_code >= 500:
            raise ServerStartError(
                f"{self.url} failed GET {path} (HTTP {resp.status_code}: "
                f"{redact(body.decode('utf-8', 'replace'), secrets=[self._key], limit=BODY_EXCERPT)})",
                fix="wait until it has loaded its model (/health answers 200), else read the server's log",
            )
        try:  # a redirect (never followed) or a 4xx: not this endpoint
            return json.loads(body) if resp.status_code < 300 else None
        except (ValueError, RecursionError):
            return None

    def _read(self, resp: httpx.Response, path: str) -> bytes:
        """The body up to ``MAX_ANSWER_BYTES`` (the scorers' cap); more is refused, not read."""
        size = resp.headers.get("content-length", "")
        body = bytearray()
        if not (size.isdigit() and int(size) > MAX_ANSWER_BYTES):
            for chunk in resp.iter_bytes():
                body += chunk
                if len(body) > MAX_ANSWER_BYTES:
                    break
            else:
                return bytes(body)
        raise ServerStartError(
            f"{self.url} answered GET {path} with a body of {size or 'over ' + str(MAX_ANSWER_BYTES)} bytes, "
            f"past the cap of {MAX_ANSWER_BYTES} bytes on one answer",
            fix="check the URL: it is not an inference server's API, or something sends endless data",
        )


def fingerprint(
    url: str,
    *,
    api_key: str | None,
    protocol: str = "auto",
    key_env: str = "the API key variable",
    timeout_s: float = 10.0,
) -> dict[str, Any]:
    """Check that ``url`` answers and read back what it serves (never the key)."""
    url = normalize_url(url)
    probe = _Probe(url, api_key, key_env, timeout_s)
    try:
        models = probe.get("/v1/models")
        if not isinstance(models, dict) or not isinstance(models.get("data"), list):
            raise ConfigError(
                f"{redact_url(url)} does not serve the OpenAI API (GET /v1/models gave no model list)",
                fix="give the server's root URL (http://HOST:PORT), the one whose /v1/models lists the model",
            )
        cards = [m for m in models["data"] if isinstance(m, dict)]
        dialect, data = _detect(probe, protocol, cards)
    finally:
        probe.http.close()
    fp: dict[str, Any] = {
        "url": url,
        "protocol": dialect.name,
        "models": sorted(str(m.get("id")) for m in cards),
    }
    fp |= dialect.fingerprint(data, cards)
    return _masked(fp, api_key) if api_key else fp


def _masked(value: Any, secret: str) -> Any:
    """A server may echo its key inside other fields (its launch command): never record it."""
    if isinstance(value, str):
        return value.replace(secret, "***")
    if isinstance(value, dict):
        return {k: _masked(v, secret) for k, v in value.items()}
    return [_masked(v, secret) for v in value] if isinstance(value, list) else value


def _detect(
    probe: _Probe, protocol: str, cards: list[dict[str, Any]]
) -> tuple[AttachDialect, dict[str, Any]]:
    """The engine whose own endpoint answers (each dialect reads and checks its own), trying the
    engine the model cards name (``owned_by``) first."""
    owned = {str(c.get("owned_by")) for c in cards} & set(PROTOCOLS)
    for name in [protocol] if protocol != "auto" else dict.fromkeys([*sorted(owned), *PROTOCOLS]):
        data = DIALECTS[name].read(probe.get)
        if data is not None:
            return DIALECTS[name], data
    if protocol != "auto":
        raise ConfigError(
            f"{probe.url} does not answer {DIALECTS[protocol].endpoint}, so it is not a {protocol} server",
            fix="pass --protocol auto, or the engine that really serves this URL",
        )
    endpoints = ", ".join(d.endpoint for d in DIALECTS.values())
    raise ConfigError(
        f"cannot tell which engine serves {probe.url}: none of {endpoints} answered",
        fix=f"pass --protocol with one of {', '.join(PROTOCOLS)}",
    )


def dialect_of(fp: Mapping[str, Any]) -> AttachDialect:
    return DIALECTS[str(fp.get("protocol"))]


def _flat(fp: Mapping[str, Any]) -> dict[str, Any]:
    """Every recorded setting of one server as flat comparable values, per-host keys left out."""
    dialect = dialect_of(fp)
    out: dict[str, Any] = {k: fp.get(k) for k in ("protocol", "version", "models")}
    out |= dialect.settings(fp)
    return {
        k: json.dumps(v, sort_keys=True) if isinstance(v, dict | list) else v
        for k, v in out.items()
        if k not in PER_HOST and k not in dialect.replica_keys
    }


def _servers(info: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """The per-URL fingerprints of an arm's ``handle.info``, or ``info`` itself if it is one; an
    arm behind a gateway adds each worker's (engines/gateway)."""
    out = list(info["servers"].values()) if "servers" in info else [info]
    gateway = info.get("gateway")
    if isinstance(gateway, dict):
        out += [
            w["fingerprint"] for w in gateway.get("workers") or () if isinstance(w.get("fingerprint"), dict)
        ]
    return out


def attached_settings(info: Mapping[str, Any]) -> dict[str, Any]:
    """The settings of an attached arm that must equal the other arm's (quantization left out)."""
    fp = _servers(info)[0]
    ignored = PAIR_IGNORED | dialect_of(fp).quant_keys
    return {k: v for k, v in _flat(fp).items() if k not in ignored and not _KERNEL_BACKEND.search(k)}


def check_attached_pair(
    base_info: Mapping[str, Any], cand_info: Mapping[str, Any], *, allow: Iterable[str] = ()
) -> list[tuple[str, Any, Any]]:
    """(key, baseline, candidate) for each setting that differs beyond quantization; [] if fair."""
    a, b, allowed = attached_settings(base_info), attached_settings(cand_info), set(allow)
    missing = "<unset>"
    return [
        (k, a.get(k, missing), b.get(k, missing))
        for k in sorted(set(a) | set(b))
        if k not in allowed and a.get(k, missing) != b.get(k, missing)
    ]


def require_attached_pair(
    base_info: Mapping[str, Any], cand_info: Mapping[str, Any], *, allow: Iterable[str] = ()
) -> None:
    """Refuse (exit 2, with the diff) an attached pair that differs beyond quantization."""
    diffs = check_attached_pair(base_info, cand_info, allow=allow)
    if diffs:
        raise ConfigError(
            f"the attached servers differ in more than quantization ({len(diffs)} setting(s)), so a "
            "difference in answers could not be blamed on quantization",
            fix="restart one side with the other's settings, or pass --allow-diff KEY for each "
            "(recorded in the report)",
            detail="differences:\n"
            + "\n".join(f"  {k}: baseline={x!r} candidate={y!r}" for k, x, y in diffs),
        )


def deployment_changes(recorded: Mapping[str, Any], now: Mapping[str, Any]) -> list[tuple[str, Any, Any]]:
    """(key, recorded, now) for each setting in which an arm's servers now differ from those a run
    recorded (``compare --resume``): engine, version, models and settings; URLs, hosts and per-start
    ids (``replica_keys``) may change, as between replicas."""
    a, b = _flat(_servers(recorded)[0]), _flat(_servers(now)[0])
    missing = "<unset>"
    keys = sorted(k for k in {*a, *b} if a.get(k, missing) != b.get(k, missing))
    return [(k, a.get(k, missing), b.get(k, missing)) for k in keys]


def _require_one_deployment(
    arm: str, fps: Sequence[Mapping[str, Any]], *, allow: Iterable[str] = (), behind: str | None = None
) -> None:
    """All URLs of one arm must be replicas: otherwise items would be scored by different models.
    ``allow`` (--allow-diff) names settings that may differ, as it does between the arms.
    ``behind``: the gateway whose workers ``fps`` are (its listing named them, not the user)."""
    allowed = set(allow)
    first = _flat(fps[0])
    for fp in fps[1:]:
        other = _flat(fp)
        keys = sorted(k for k in set(first) | set(other) if k not in allowed and first.get(k) != other.get(k))
        if keys:
            raise ConfigError(
                f"the {arm}'s {'worker' if behind else 'URL'} {fp['url']}"
                + (f" (behind the gateway {redact_url(behind)})" if behind else "")
                + f" does not serve the same model and settings as {fps[0]['url']} "
                f"(they differ in {', '.join(keys[:8])})",
                fix=(
                    f"restart the worker {fp['url']} with the settings of the rest (behind a gateway all "
                    "workers of one role must be identical)"
                    if behind
                    else f"attach only replicas of one deployment to the {arm}; drop the odd URL"
                )
                + ", or pass --allow-diff KEY for a setting that may differ (recorded in the report)",
                detail="\n".join(f"  {k}: {first.get(k)!r} vs {other.get(k)!r}" for k in keys[:20]),
            )
