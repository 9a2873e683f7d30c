"""Attach to servers that are already running (a staging cluster behind sgl-router, llama-servers
someone else started): nothing is launched, and nothing is taken on trust.

evalgate did not start these servers, so it cannot read their settings from a command line. It
reads them back instead (``/v1/models`` plus ``/props``, ``/server_info`` or ``/version``),
refuses an arm whose URLs serve different things, and gives the caller the comparable settings
so a pair that differs beyond quantization is refused as it would be for launched servers.
Items are sharded stickily over an arm's URLs: the choices of one question share a context, so
they go to one server (its prompt cache stays warm), and the assignment is reproducible.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import importlib
import json
import os
import re
import socket
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx

from evalgate.engines.base import ServerHandle
from evalgate.errors import ConfigError, PreflightError, ServerStartError
from evalgate.preflight import PreflightReport, preflight
from evalgate.variants import LaunchSpec, Variant

__all__ = [
    "PROTOCOLS",
    "AttachedHandle",
    "ExternalEngine",
    "ShardedScorer",
    "api_key_for",
    "attached_settings",
    "check_attached_pair",
    "fingerprint",
    "normalize_url",
    "preflight_all",
    "require_attached_pair",
    "shard_index",
]

PROTOCOLS = ("llamacpp", "sglang", "vllm")
# Scorers of the GPU engines, imported only when an arm needs one (their modules may be absent).
SCORERS = {
    "sglang": ("evalgate.engines.sglang", "SGLangScorer"),
    "vllm": ("evalgate.engines.vllm", "VLLMScorer"),
}
DEFAULT_GPU_CONCURRENCY = 32
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


def shard_index(key: str, n: int) -> int:
    """Stable across processes and runs (unlike ``hash``), so a rerun sends each item to the same URL."""
    digest = hashlib.sha256(key.encode("utf-8", "surrogatepass")).digest()
    return int.from_bytes(digest[:8], "big") % n


class ShardedScorer:
    """One scorer per URL; every call about the same prompt goes to the same URL."""

    def __init__(self, scorers: Sequence[Any], urls: Sequence[str]) -> None:
        if not scorers or len(scorers) != len(urls):
            raise ValueError("one scorer per URL")
        self.scorers, self.urls = list(scorers), list(urls)
        self.concurrency = sum(int(getattr(s, "concurrency", 1)) for s in self.scorers)

    def shard_of(self, key: str) -> int:
        return shard_index(key, len(self.scorers))

    def _on(self, key: str) -> Any:
        return self.scorers[self.shard_of(key)]

    async def loglikelihood(self, context: str, continuation: str) -> tuple[float, bool, int]:
        # keyed by context alone: all choices of a question land on one server's prompt cache
        return await self._on(context).loglikelihood(context, continuation)

    async def loglikelihood_many(
        self, context: str, continuations: Sequence[str]
    ) -> list[tuple[float, bool, int]]:
        """A question's choices in one call where the shard batches them (SGLang), else one by one."""
        shard = self._on(context)
        if hasattr(shard, "loglikelihood_many"):
            return await shard.loglikelihood_many(context, continuations)
        return list(await asyncio.gather(*(shard.loglikelihood(context, c) for c in continuations)))

    async def generate(
        self, prompt: str, *, max_tokens: int, stop: list[str], temperature: float = 0.0, seed: int = 0
    ) -> dict[str, Any]:
        return await self._on(prompt).generate(
            prompt, max_tokens=max_tokens, stop=stop, temperature=temperature, seed=seed
        )

    async def chat(self, payload: dict[str, Any]) -> dict[str, Any]:
        return await self._on(_messages_key(payload.get("messages"))).chat(payload)

    async def render_chat(self, messages: list[dict[str, Any]]) -> str:
        return await self._on(_messages_key(messages)).render_chat(messages)

    async def tokenize(self, text: str) -> list[int]:
        return await self._on(text).tokenize(text)

    async def detokenize(self, tokens: list[int]) -> str:
        return await self._on(repr(tokens)).detokenize(tokens)

    async def aclose(self) -> None:
        await asyncio.gather(*(s.aclose() for s in self.scorers))


def _messages_key(messages: Any) -> str:
    return json.dumps(messages, sort_keys=True, ensure_ascii=False, default=str)


async def preflight_all(scorer: Any, *, server: str, chat: bool = True) -> PreflightReport:
    """Preflight every URL (each can be misconfigured on its own) and require one tokenizer."""
    if not isinstance(scorer, ShardedScorer):
        return await preflight(scorer, server=server, chat=chat)
    reports = await asyncio.gather(
        *(
            preflight(s, server=f"{server} ({url})", chat=chat)
            for s, url in zip(scorer.scorers, scorer.urls, strict=True)
        )
    )
    prints = {url: r.tokenizer_fingerprint for url, r in zip(scorer.urls, reports, strict=True)}
    if len(set(prints.values())) > 1:
        raise PreflightError(
            f"the {server} URLs tokenize differently ({prints}), so an item's prompt depends on its URL",
            fix=f"attach only replicas of one deployment to the {server}; drop the odd URL",
        )
    merged = PreflightReport(tokenizer_fingerprint=reports[0].tokenizer_fingerprint)
    for url, report in zip(scorer.urls, reports, strict=True):
        merged.checks += [{**c, "url": url} for c in report.checks]
    return merged


@dataclass
class AttachedHandle(ServerHandle):
    """A server evalgate did not start: alive while its port accepts connections."""

    urls: list[str] = field(default_factory=list)
    protocol: str = ""

    def alive(self) -> bool:
        parts = urlsplit(self.base_url)
        port = parts.port or (443 if parts.scheme == "https" else 80)
        try:
            with socket.create_connection((parts.hostname or "127.0.0.1", port), timeout=2.0):
                return True
        except OSError:
            return False


def _scorer_class(protocol: str) -> Any:
    if protocol == "llamacpp":
        from evalgate.engines.llamacpp import LlamaCppScorer

        return LlamaCppScorer
    module, name = SCORERS[protocol]
    try:
        return getattr(importlib.import_module(module), name)
    except (ModuleNotFoundError, AttributeError) as exc:
        if isinstance(exc, ModuleNotFoundError) and exc.name != module:
            raise
        raise ConfigError(
            f"attaching to a {protocol} server needs {module}.{name}, which this evalgate does not have",
            fix="attach to llama-server URLs, or upgrade evalgate",
        ) from exc


class ExternalEngine:
    """Servers that are already running, given as URLs per arm; launching only checks them."""

    name = "external"

    def __init__(
        self,
        urls: Mapping[str, Sequence[str]],
        *,
        protocol: str = "auto",
        concurrency: int | None = None,
        timeout_s: float = 10.0,
        deterministic: bool = False,
    ) -> None:
        if protocol not in ("auto", *PROTOCOLS):
            raise ConfigError(
                f"unknown protocol {protocol!r}", fix=f"use auto or one of {', '.join(PROTOCOLS)}"
            )
        self.urls = {arm: [normalize_url(u) for u in us] for arm, us in urls.items()}
        for arm in ("baseline", "candidate"):
            if not self.urls.get(arm):
                raise ConfigError(f"no URL given for the {arm}", fix=f"pass --{arm}-url http://HOST:PORT")
        self.protocol = protocol
        self.concurrency = concurrency
        """Requests in flight per URL; None: llama-server's slots, or 32 for SGLang and vLLM."""
        self.timeout_s = timeout_s
        self.deterministic = deterministic
        """One request at a time per URL and, on llama-server, no prompt cache (see --deterministic)."""
        self._info: dict[str, dict[str, Any]] = {}

    def urls_for(self, arm: str) -> list[str]:
        return self.urls.get(arm) or self.urls["baseline"]  # aa: the baseline's servers again

    def attach_info(self, arm: str) -> dict[str, Any]:
        """Check every URL of ``arm`` answers and serves one deployment; the arm's ``handle.info``."""
        urls = self.urls_for(arm)
        key = api_key_for(arm)
        env = _key_env(arm)
        fps = [
            fingerprint(u, api_key=key, protocol=self.protocol, key_env=env, timeout_s=self.timeout_s)
            for u in dict.fromkeys(urls)
        ]
        _require_one_deployment(arm, fps)
        protocol = fps[0]["protocol"]
        _scorer_class(protocol)  # an unsupported protocol fails before any item runs
        info = {"attached": True, "protocol": protocol, "urls": urls, "servers": {f["url"]: f for f in fps}}
        self._info[arm] = info
        return info

    def version(self) -> str:
        infos = [self._info.get(a) or self.attach_info(a) for a in ("baseline", "candidate")]
        found = [f"{i['protocol']} {_servers(i)[0].get('version') or '?'}" for i in infos]
        return found[0] if found[0] == found[1] else f"baseline: {found[0]}; candidate: {found[1]}"

    def launch_spec(self, variant: Variant) -> LaunchSpec:
        if variant.args or variant.env:
            raise ConfigError(
                f"variant {variant.name!r} sets engine flags or env, but evalgate does not start attached servers",
                fix="start the servers with those settings yourself, and drop args/env from the variant",
            )
        # The URLs are not settings: the comparable ones are read back at attach (attached_settings).
        args: tuple[tuple[str, str | None], ...] = (("--attach", None), ("--protocol", self.protocol))
        return LaunchSpec(self.name, variant.model or f"attached:{variant.name}", args, (), frozenset())

    @contextlib.contextmanager
    def launch(self, spec: LaunchSpec, *, name: str, log_dir: Path) -> Iterator[AttachedHandle]:
        """Start nothing: check the arm's URLs and yield a handle; nothing to stop on exit."""
        info = self.attach_info(name)
        urls = info["urls"]
        log_path = log_dir / f"{name}.log"
        log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(log_path, "a", encoding="utf-8") as log:
            for fp in info["servers"].values():
                log.write(
                    f"attached {fp['url']}: {fp['protocol']} {fp.get('version')} models={fp['models']}\n"
                )
        yield AttachedHandle(
            name,
            urls[0],
            api_key_for(name) or "",
            ["attach", f"--protocol={self.protocol}", *urls],
            log_path,
            info=info,
            urls=list(urls),
            protocol=info["protocol"],
        )

    def scorer(self, handle: ServerHandle, *, seed: int = 0) -> ShardedScorer:
        servers = handle.info["servers"]
        urls = [str(u) for u in handle.info["urls"]]
        scorers = []
        for url in urls:
            fp = servers[url]
            shard = AttachedHandle(**{**vars(handle), "name": f"{handle.name} ({url})", "base_url": url})
            shard.info, shard.urls, shard.protocol = fp, [url], fp["protocol"]
            extra = {"cache_prompt": False} if self.deterministic and fp["protocol"] == "llamacpp" else {}
            scorers.append(
                _scorer_class(fp["protocol"])(shard, concurrency=self._concurrency(fp), seed=seed, **extra)
            )
        return ShardedScorer(scorers, urls)

    def _concurrency(self, fp: Mapping[str, Any]) -> int:
        if self.deterministic:
            return 1
        if self.concurrency:
            return self.concurrency
        if fp["protocol"] == "llamacpp":
            return int(fp.get("total_slots") or 4)
        limit = (fp.get("server_args") or {}).get("max_running_requests")
        return min(int(limit or DEFAULT_GPU_CONCURRENCY), 256)
