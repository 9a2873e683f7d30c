"""Reading an attached server back: its engine, its settings, and whether two of them compare.

evalgate did not start these servers, so their settings come from their own endpoints
(``/v1/models`` plus ``/props``, ``/server_info`` or ``/version``); see ``external.py``.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any
from urllib.parse import urlsplit

import httpx

from evalgate.errors import ConfigError, ServerStartError

PROTOCOLS = ("llamacpp", "sglang", "vllm")

# Differ between replicas of one deployment, so never compared (within an arm or across the pair):
# addresses, GPU ids, the KV pool measured from free memory at startup, and ``random_seed``
# (SGLang draws one when unset; evalgate seeds each request).
PER_HOST = frozenset(
    "host port nccl_port dist_init_addr base_gpu_id gpu_id_step node_rank random_seed"
    " max_total_num_tokens max_req_input_len".split()
)
# May differ between the arms: the checkpoint and its quantization, the KV dtype, kernel backends
# (_KERNEL_BACKEND), and served names. Tokenizers are compared by fingerprint at preflight.
PAIR_IGNORED = frozenset(
    "model models model_path tokenizer_path served_model_name revision quantization"
    " quantization_param_path kv_cache_dtype mem_fraction_static".split()
)
_KERNEL_BACKEND = re.compile(r"(attention|gemm|moe).*_backend$")
_SECRET = re.compile(r"api_key|secret|password|(^|_)token$", re.IGNORECASE)


def api_key_for(arm: str, env: Mapping[str, str] | None = None) -> str | None:
    """``EVALGATE_<ARM>_API_KEY``; the A/A arm is the baseline's servers, so it uses that key."""
    env = os.environ if env is None else env
    return env.get(_key_env(arm)) or None


def _key_env(arm: str) -> str:
    return f"EVALGATE_{('baseline' if arm == 'aa' else arm).upper()}_API_KEY"


def normalize_url(url: str) -> str:
    """``http://h:p`` without a trailing ``/`` or ``/v1``: scorers add the API paths themselves."""
    url = url.strip().rstrip("/")
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise ConfigError(f"{url!r} is not a server URL", fix="give it as http://HOST:PORT (comma-separated)")
    return url[: -len("/v1")] if url.endswith("/v1") else url


class _Probe:
    """GETs against one URL; answers None for 'not this endpoint', raises for anything else."""

    def __init__(self, url: str, api_key: str | None, key_env: str, timeout_s: float) -> None:
        self.url, self.key_sent, self.key_env = url, bool(api_key), key_env
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self.http = httpx.Client(base_url=url, headers=headers, timeout=httpx.Timeout(timeout_s, connect=5.0))

    def get(self, path: str) -> Any:
        try:
            resp = self.http.get(path)
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
                f"{self.url} failed GET {path} (HTTP {resp.status_code}: {resp.text[:200]})",
                fix="wait until it has loaded its model (/health answers 200), else read the server's log",
            )
        try:
            return resp.json() if resp.status_code < 400 else None
        except ValueError:
            return None


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
                f"{url} does not serve the OpenAI API (GET /v1/models gave no model list)",
                fix="give the server's root URL (http://HOST:PORT), the one whose /v1/models lists the model",
            )
        cards = [m for m in models["data"] if isinstance(m, dict)]
        found, data = _detect(probe, protocol, cards)
    finally:
        probe.http.close()
    fp: dict[str, Any] = {"url": url, "protocol": found, "models": sorted(str(m.get("id")) for m in cards)}
    if found == "llamacpp":
        general = data.get("default_generation_settings") or {}
        template = str(data.get("chat_template") or "")
        fp |= {
            "version": data.get("build_info"),
            "model_path": data.get("model_path"),
            "n_ctx_per_slot": general.get("n_ctx"),
            "total_slots": data.get("total_slots"),
            "chat_template_sha256": hashlib.sha256(template.encode()).hexdigest()[:16],
            "sampling": general.get("params") or {},
        }
    elif found == "sglang":
        args = {k: v for k, v in data.items() if k != "internal_states" and not _SECRET.search(k)}
        states = data.get("internal_states") or [{}]
        pools = [st.get("max_total_num_tokens") if isinstance(st, dict) else None for st in states]
        if args.get("max_total_num_tokens") is None and all(pools):  # newer SGLang: one per DP rank
            args["max_total_num_tokens"] = sum(int(p) for p in pools)
        fp |= {"version": args.pop("version", None), "server_args": args}
    else:  # vLLM reports its settings only through the model card
        card = cards[0] if cards else {}
        fp |= {"version": data.get("version"), "model": card.get("root")}
        fp["max_model_len"] = card.get("max_model_len")
    return _masked(fp, api_key) if api_key else fp


def _masked(value: Any, secret: str) -> Any:
    """A server may echo its key inside other fields (its launch command): never record it."""
    if isinstance(value, str):
        return value.replace(secret, "***")
    if isinstance(value, dict):
        return {k: _masked(v, secret) for k, v in value.items()}
    return [_masked(v, secret) for v in value] if isinstance(value, list) else value


def _detect(probe: _Probe, protocol: str, cards: list[dict[str, Any]]) -> tuple[str, dict[str, Any]]:
    """SGLang answers /server_info (older: /get_server_info), llama-server /props, vLLM /version.

    vLLM's dev mode also has /server_info, so SGLang is told by its ``model_path`` server arg."""
    checks = {
        "sglang": lambda: (
            _dict_with(probe.get("/server_info"), "model_path")
            or _dict_with(probe.get("/get_server_info"), "model_path")
        ),
        "llamacpp": lambda: _dict_with(probe.get("/props"), "total_slots", "default_generation_settings"),
        "vllm": lambda: _dict_with(probe.get("/version"), "version"),
    }
    owned = {str(c.get("owned_by")) for c in cards} & set(PROTOCOLS)
    for name in [protocol] if protocol != "auto" else dict.fromkeys([*sorted(owned), *PROTOCOLS]):
        data = checks[name]()
        if data is not None:
            return name, data
    if protocol != "auto":
        where = {"sglang": "/server_info", "llamacpp": "/props", "vllm": "/version"}[protocol]
        raise ConfigError(
            f"{probe.url} does not answer {where}, so it is not a {protocol} server",
            fix="pass --protocol auto, or the engine that really serves this URL",
        )
    raise ConfigError(
        f"cannot tell which engine serves {probe.url}: none of /server_info, /props, /version answered",
        fix=f"pass --protocol with one of {', '.join(PROTOCOLS)}",
    )


def _dict_with(data: Any, *keys: str) -> dict[str, Any] | None:
    return data if isinstance(data, dict) and any(k in data for k in keys) else None


def _flat(fp: Mapping[str, Any]) -> dict[str, Any]:
    """Every recorded setting of one server as flat comparable values, per-host keys left out."""
    out: dict[str, Any] = {k: fp.get(k) for k in ("protocol", "version", "models")}
    if fp.get("protocol") == "llamacpp":
        for key in ("model_path", "n_ctx_per_slot", "total_slots", "chat_template_sha256"):
            out[key] = fp.get(key)
        out |= {f"sampling.{k}": v for k, v in (fp.get("sampling") or {}).items()}
    elif fp.get("protocol") == "sglang":
        out |= dict(fp.get("server_args") or {})
    else:
        out |= {"model": fp.get("model"), "max_model_len": fp.get("max_model_len")}
    return {
        k: json.dumps(v, sort_keys=True) if isinstance(v, dict | list) else v
        for k, v in out.items()
        if k not in PER_HOST
    }


def _servers(info: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """The per-URL fingerprints of an arm's ``handle.info``, or ``info`` itself if it is one."""
    return list(info["servers"].values()) if "servers" in info else [info]


def attached_settings(info: Mapping[str, Any]) -> dict[str, Any]:
    """The settings of an attached arm that must equal the other arm's (quantization left out)."""
    flat = _flat(_servers(info)[0])
    return {k: v for k, v in flat.items() if k not in PAIR_IGNORED and not _KERNEL_BACKEND.search(k)}


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


def _require_one_deployment(arm: str, fps: Sequence[Mapping[str, Any]]) -> None:
    """All URLs of one arm must be replicas: otherwise items would be scored by different models."""
    first = _flat(fps[0])
    for fp in fps[1:]:
        other = _flat(fp)
        keys = sorted(k for k in set(first) | set(other) if first.get(k) != other.get(k))
        if keys:
            raise ConfigError(
                f"the {arm} URLs {fps[0]['url']} and {fp['url']} do not serve the same model and settings "
                f"(they differ in {', '.join(keys[:8])})",
                fix=f"attach only replicas of one deployment to the {arm}; drop the odd URL",
                detail="\n".join(f"  {k}: {first.get(k)!r} vs {other.get(k)!r}" for k in keys[:20]),
            )
