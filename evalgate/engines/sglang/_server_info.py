"""SGLang's ``/server_info``: the settings that took effect and the KV pool, read in one place.

The endpoint is ``/get_server_info`` before SGLang 0.5.15; ``read_server_info`` is the one place
that knows both names, whatever HTTP client the caller has (the launcher, the scorer, attach
mode's probe and the throughput sweep all come through it).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import httpx

from evalgate.engines.api import Get
from evalgate.engines.sglang._capacity import server_info_capacity, total_tokens
from evalgate.redact import is_secret_key

__all__ = [
    "SERVER_INFO_PATHS",
    "fetch_server_info",
    "get_server_info",
    "parse_server_info",
    "read_server_info",
    "server_limits",
]

SERVER_INFO_PATHS = ("/server_info", "/get_server_info")
"""Tried in this order: the name since SGLang 0.5.15, then the older one."""


def read_server_info(get: Get, *, needs: str | None = None) -> dict[str, Any] | None:
    """The first of ``SERVER_INFO_PATHS`` that answers a JSON object (holding ``needs``, if
    given) through ``get``, which returns a path's JSON or None; None when neither does."""
    for path in SERVER_INFO_PATHS:
        data = get(path)
        if isinstance(data, dict) and (needs is None or needs in data):
            return data
    return None


def get_server_info(
    base_url: str, api_key: str | None, *, timeout_s: float = 30.0
) -> tuple[dict | None, str]:
    """(the raw server info of ``base_url``, or None and why): ``read_server_info`` over httpx."""
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    why: list[str] = []

    def get(path: str) -> Any:
        try:
            resp = httpx.get(base_url.rstrip("/") + path, headers=headers, timeout=timeout_s)
        except httpx.HTTPError as exc:
            why.append(f"{path}: {type(exc).__name__}")
            return None
        if resp.status_code != 200:
            why.append(f"{path}: HTTP {resp.status_code}")
            return None
        try:
            return resp.json()
        except ValueError:
            why.append(f"{path}: not JSON")
            return None

    return read_server_info(get), "; ".join(why)


def fetch_server_info(base_url: str, api_key: str) -> dict[str, Any]:
    """What a launch records in the arm's info: ``parse_server_info``, or ``server_info_error``."""
    raw, why = get_server_info(base_url, api_key)
    return parse_server_info(raw, [api_key]) if raw is not None else {"server_info_error": why}


def server_limits(base_url: str, api_key: str | None) -> dict[str, Any]:
    """For a load sweep of any server: SGLang's request limit (``slots``) and KV ``capacity``;
    both None when the URL is not an SGLang server."""
    raw, _ = get_server_info(base_url, api_key, timeout_s=10.0)
    running = (raw or {}).get("max_running_requests")
    return {"slots": int(running) if running else None, "capacity": server_info_capacity(raw or {})}


_KEPT = (
    "version",
    "model_path",
    "dtype",
    "kv_cache_dtype",
    "quantization",
    "quantization_param_path",
    "tp_size",
    "dp_size",
    "context_length",
    "max_req_input_len",
    "mem_fraction_static",
    "max_running_requests",
    "chunked_prefill_size",
    "attention_backend",
    "sampling_backend",
    "random_seed",
    "tool_call_parser",
    "reasoning_parser",
    "chat_template",
)


def parse_server_info(raw: Mapping[str, Any], secrets: Sequence[str] = ()) -> dict[str, Any]:
    """What evalgate records from ``/server_info``: settings that took effect and the KV pool.

    The raw response echoes ``api_key`` and the launch command, so only named fields are kept
    and any secret is masked in them."""
    out: dict[str, Any] = {k: raw[k] for k in _KEPT if raw.get(k) is not None}
    states = [s for s in raw.get("internal_states") or [] if isinstance(s, Mapping)]
    tokens = total_tokens(raw)
    if tokens is not None:
        out["max_total_num_tokens"] = tokens
    memory = [dict(s["memory_usage"]) for s in states if isinstance(s.get("memory_usage"), Mapping)]
    if memory:
        out["memory_usage_gb"] = memory if len(memory) > 1 else memory[0]
    capacity = server_info_capacity(raw)
    if capacity is not None:
        out["capacity"] = capacity
    return _masked(out, [s for s in secrets if s])


def _masked(value: Any, secrets: Sequence[str]) -> Any:
    if isinstance(value, str):
        for s in secrets:
            value = value.replace(s, "***")
        return value
    if isinstance(value, Mapping):
        return {k: _masked(v, secrets) for k, v in value.items() if not is_secret_key(k)}
    if isinstance(value, list):
        return [_masked(v, secrets) for v in value]
    return value
