"""Attach to servers that are already running (a staging cluster behind sgl-router, llama-servers
someone else started): nothing is launched, and nothing is taken on trust.

evalgate did not start these servers, so it cannot read their settings from a command line. It
reads them back instead (``/v1/models`` plus each engine's own endpoint, ``_fingerprint``),
refuses an arm whose URLs serve different things, and refuses a pair that differs beyond
quantization as it would for launched servers (``check_pair``). Items are sharded stickily over
an arm's URLs (``_sharded``).
"""

from __future__ import annotations

import contextlib
import socket
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from evalgate.arms import original
from evalgate.engines._launcher import LaunchSlot, ServerHandle
from evalgate.engines.api import Engine
from evalgate.engines.attach._allowed import parse_allowed, require_allowed_workers
from evalgate.engines.attach._fingerprint import (
    PROTOCOLS,
    _key_env,
    _require_one_deployment,
    _servers,
    api_key_for,
    dialect_of,
    fingerprint,
    require_attached_pair,
    require_two_instances,
)
from evalgate.engines.attach._sharded import ShardedScorer
from evalgate.engines.attach._urls import normalize_url, shared_server
from evalgate.engines.gateway import GatewayScorer, GatewayWorker, read_workers
from evalgate.errors import ConfigError
from evalgate.redact import env_secrets, redact_url
from evalgate.store.provenance import Provenance
from evalgate.variants import LaunchSpec, Variant

__all__ = ["AttachedHandle", "ExternalEngine"]


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


class ExternalEngine(Engine):
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
        allow_diff: Iterable[str] = (),
        same_server_ok: bool = False,
        worker_kld_tolerance: float = 1e-5,
        allow_workers: Iterable[str] = (),
    ) -> None:
        if protocol not in ("auto", *PROTOCOLS):
            raise ConfigError(
                f"unknown protocol {protocol!r}", fix=f"use auto or one of {', '.join(PROTOCOLS)}"
            )
        self.urls = {arm: [normalize_url(u) for u in us] for arm, us in urls.items()}
        for arm in ("baseline", "candidate"):
            if not self.urls.get(arm):
                raise ConfigError(f"no URL given for the {arm}", fix=f"pass --{arm}-url http://HOST:PORT")
            if api_key_for(arm) and any(urlsplit(u).username is not None for u in self.urls[arm]):
                raise ConfigError(
                    f"the {arm} has both {_key_env(arm)} and credentials in its URL, and a request can carry "
                    "only one of them",
                    fix=f"drop the user:pass@ from --{arm}-url, or unset {_key_env(arm)}",
                )
        self.protocol = protocol
        self.concurrency = concurrency
        """Requests in flight per URL; None: llama-server's slots, or 32 for SGLang and vLLM."""
        self.timeout_s = timeout_s
        self.deterministic = deterministic
        """One request at a time per URL and, on llama-server, no prompt cache (see --deterministic)."""
        self.allow_diff = frozenset(allow_diff)
        """Settings allowed to differ (--allow-diff): between the arms, and between one arm's URLs."""
        self.same_server_ok = same_server_ok
        """--same-server-ok: both arms may reach one running server (an A/A check of the harness)."""
        self.worker_kld_tolerance = worker_kld_tolerance
        """How far an attached gateway's workers may answer the fixed probe apart ([gateway])."""
        self.allow_workers = parse_allowed(allow_workers)
        """Hosts besides the gateway's own whose workers a listing may name ([gateway] allow_workers)."""
        self._info: dict[str, dict[str, Any]] = {}

    def urls_for(self, arm: str) -> list[str]:
        return self.urls.get(arm) or self.urls[original(arm)]  # a repeat (--aa): its original's servers

    def attach_info(self, arm: str) -> dict[str, Any]:
        """Check every URL of ``arm`` answers and serves one deployment; the arm's ``handle.info``."""
        urls = self.urls_for(arm)
        key = api_key_for(arm)
        env = _key_env(arm)
        listings = {u: read_workers(u, key, timeout_s=self.timeout_s) for u in dict.fromkeys(urls)}
        gateways = [u for u, workers in listings.items() if workers is not None]
        if gateways:
            if len(listings) > 1:
                raise ConfigError(
                    f"the {arm} URLs include the gateway {redact_url(gateways[0])} among other URLs",
                    fix=f"give the {arm} one gateway URL (it routes to its workers), or only servers' URLs",
                )
            info = self._gateway_info(arm, gateways[0], listings[gateways[0]] or [], key, env)
            self._info[arm] = info
            return info
        fps = [
            fingerprint(u, api_key=key, protocol=self.protocol, key_env=env, timeout_s=self.timeout_s)
            for u in dict.fromkeys(urls)
        ]
        _require_one_deployment(arm, fps, allow=self.allow_diff)
        protocol = fps[0]["protocol"]
        info = {"attached": True, "protocol": protocol, "urls": urls, "servers": {f["url"]: f for f in fps}}
        self._info[arm] = info
        return info

    def _gateway_info(
        self, arm: str, url: str, workers: list[GatewayWorker], key: str | None, env: str
    ) -> dict[str, Any]:
        """An arm that is one smg gateway: every worker it lists checked to be one the user allowed
        (before any is contacted), then fingerprinted directly, the workers of each role required
        identical (exit 2 naming the odd one), all traffic through the gateway (``scorer``)."""
        where = redact_url(url)
        if not workers:
            raise ConfigError(
                f"the gateway {where} lists no workers", fix="register the arm's workers with it"
            )
        require_allowed_workers(arm, url, workers, self.allow_workers, secrets=[key or "", *env_secrets()])
        down = [w for w in workers if w.status != "ready" or not w.healthy]
        if down:
            raise ConfigError(
                f"the gateway {where} lists the {arm} worker {down[0].url} as {down[0].status or 'unhealthy'}, so "
                "items routed to it would fail or wait",
                fix="wait until every worker is ready in the gateway's GET /workers, or remove the odd one",
            )
        fps = {
            w.url: fingerprint(
                w.url, api_key=key, protocol=self.protocol, key_env=env, timeout_s=self.timeout_s
            )
            for w in workers
        }
        for role in dict.fromkeys(w.role for w in workers):
            _require_one_deployment(
                arm, [fps[w.url] for w in workers if w.role == role], allow=self.allow_diff, behind=url
            )
        # the tokenizer's calls (smg does not proxy them) go to a worker that holds the whole prompt
        direct = next((w for w in workers if w.role in ("regular", "prefill")), workers[0])
        first = fps[direct.url]
        gateway = {
            "url": url,
            "attached": True,
            "policy": "the gateway's own (smg does not report it); evalgate sends each item's routing key",
            "direct_url": direct.url,
            "model": direct.model_id,
            "workers": [{**w.as_dict(), "fingerprint": fps[w.url]} for w in workers],
        }
        return {
            "attached": True,
            "protocol": first["protocol"],
            "urls": [url],
            "servers": {url: {**first, "url": url}},
            "gateway": gateway,
        }

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
    def launch(self, spec: LaunchSpec, slot: LaunchSlot) -> Iterator[AttachedHandle]:
        """Start nothing: check the arm's URLs and yield a handle; nothing to stop on exit."""
        name, log_dir = slot.name, slot.log_dir
        info = self.attach_info(name)
        urls = info["urls"]
        log_path = log_dir / f"{name}.log"
        log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(log_path, "a", encoding="utf-8") as log:
            for fp in info["servers"].values():
                log.write(
                    f"attached {redact_url(fp['url'])}: {fp['protocol']} {fp.get('version')} "
                    f"models={fp['models']}\n"
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

    def provenance(self, handle: ServerHandle) -> Provenance:
        """What the arm's servers report they run (behind a gateway: its workers), read from their
        fingerprints by their engine's dialect; the first that reports anything (an arm's servers
        are checked to be one deployment). A vLLM server reports none of it: unknown."""
        gateway = handle.info.get("gateway")
        if isinstance(gateway, dict):
            fps = [w["fingerprint"] for w in gateway["workers"]]
        else:
            fps = [handle.info["servers"][str(u)] for u in handle.info["urls"]]
        for fp in fps:
            found = dialect_of(fp).provenance(fp)
            if found.reported():
                return found
        return Provenance()

    def scorer(self, handle: ServerHandle, *, seed: int = 0) -> ShardedScorer | GatewayScorer:
        gateway = handle.info.get("gateway")
        if isinstance(gateway, dict):
            return self._gateway_scorer(handle, gateway, seed=seed)
        servers = handle.info["servers"]
        urls = [str(u) for u in handle.info["urls"]]
        scorers = []
        for url in urls:
            fp = servers[url]
            shard = AttachedHandle(**{**vars(handle), "name": f"{handle.name} ({url})", "base_url": url})
            shard.info, shard.urls, shard.protocol = fp, [url], fp["protocol"]
            make = dialect_of(fp).scorer
            scorers.append(
                make(shard, concurrency=self._concurrency(fp), seed=seed, deterministic=self.deterministic)
            )
        return ShardedScorer(scorers, urls)

    def _gateway_scorer(self, handle: ServerHandle, gateway: dict[str, Any], *, seed: int) -> GatewayScorer:
        """Through the gateway, with a direct scorer per worker for the probe and cache flushes."""

        def scorer_for(base_url: str, fp: dict[str, Any], info: dict[str, Any], name: str) -> Any:
            shard = AttachedHandle(**{**vars(handle), "name": name, "base_url": base_url})
            shard.info, shard.urls, shard.protocol = info, [base_url], fp["protocol"]
            make = dialect_of(fp).scorer
            return make(shard, concurrency=self._concurrency(fp), seed=seed, deterministic=self.deterministic)

        workers = gateway["workers"]
        first = handle.info["servers"][handle.base_url]
        through = scorer_for(handle.base_url, first, {**first, "gateway": gateway}, handle.name)
        direct = {
            w["url"]: scorer_for(w["url"], w["fingerprint"], w["fingerprint"], f"{handle.name} ({w['url']})")
            for w in workers
        }
        roles = {w["url"]: w["role"] for w in workers}
        return GatewayScorer(through, direct, roles=roles, tolerance=self.worker_kld_tolerance)

    def check_pair(self, *, allow: Iterable[str] = ()) -> None:
        """Refuse (exit 2, with the diff) attached arms whose read-back settings differ beyond
        quantization: the LaunchSpecs of attached arms hold no settings to compare."""
        self.allow_diff = self.allow_diff | frozenset(allow)
        base, cand = self.attach_info("baseline"), self.attach_info("candidate")
        if not self.same_server_ok:  # one server behind two URLs (a proxy port): no pair either
            require_two_instances(base, cand)
            _require_own_workers(base, cand)
        require_attached_pair(base, cand, allow=self.allow_diff)
        roles = [_roles(base), _roles(cand)]
        if roles[0] and roles[1]:  # two gateways: worker by worker, role by role (PD pools too)
            if set(roles[0]) != set(roles[1]):
                raise ConfigError(
                    f"the baseline's gateway has {sorted(roles[0])} workers and the candidate's {sorted(roles[1])}",
                    fix="serve both arms the same way (both prefill/decode pools, or both regular workers)",
                )
            for role, fp in roles[0].items():
                require_attached_pair(
                    {"servers": {"b": fp}}, {"servers": {"c": roles[1][role]}}, allow=self.allow_diff
                )

    def launch_command(self, spec: LaunchSpec, *, name: str, port: int, api_key: str) -> list[str]:
        """Nothing is launched: the arm's URLs (credentials masked), read back at run time."""
        return ["attach", f"--protocol={self.protocol}", *(redact_url(u) for u in self.urls_for(name))]

    def require_tool_parser(self, arm: str, spec: LaunchSpec) -> None:
        """Attached SGLang reports its ``tool_call_parser``: refuse an arm without one. vLLM reports
        no settings, so its arms are left to the suite's preflight (one call must come back parsed)."""
        for fp in _servers(self.attach_info(arm)):
            if fp.get("protocol") == "sglang" and not (fp.get("server_args") or {}).get("tool_call_parser"):
                raise ConfigError(
                    f"the tool_calls suite needs a tool-call parser, and the attached {arm} server "
                    f"{redact_url(str(fp.get('url')))} runs SGLang without --tool-call-parser: it would return "
                    "no tool_calls on either arm, and the pair would pass whatever the candidate does",
                    fix="restart both arms' servers with --tool-call-parser (this model's parser, e.g. llama3, "
                    "qwen25), or drop the tool_calls suite",
                )

    def _concurrency(self, fp: Mapping[str, Any]) -> int:
        if self.deterministic:
            return 1
        return self.concurrency or dialect_of(fp).concurrency(fp)


def _endpoints(info: dict[str, Any]) -> dict[str, str]:
    """Where an arm's answers come from, each as an error names it: a gateway's listed workers (its
    client refuses an answer from any other, engines/client.py), else the arm's URLs."""
    gateway = info.get("gateway")
    if not isinstance(gateway, dict):
        return {str(u): f"URL {redact_url(str(u))}" for u in info["urls"]}
    behind = redact_url(str(gateway.get("url")))
    return {str(w["url"]): f"worker {w['url']} (listed by the gateway {behind})" for w in gateway["workers"]}


def _require_own_workers(base: dict[str, Any], cand: dict[str, Any]) -> None:
    """Refuse (exit 2) two arms one of whose workers is the other's (two gateways in front of one
    worker, or a gateway listing the other arm's server): it would answer for both, and the pair
    would pass whatever the candidate is. Plain URLs were compared before anything started."""
    if not (isinstance(base.get("gateway"), dict) or isinstance(cand.get("gateway"), dict)):
        return
    b, c = _endpoints(base), _endpoints(cand)
    found = shared_server(list(b), list(c))
    if found is not None:
        raise ConfigError(
            f"the baseline's {b[found[0]]} and the candidate's {c[found[1]]} are one server, so it would "
            "answer for both arms and the pair would pass whatever the candidate is",
            fix="give each arm its own workers (one gateway per arm, over disjoint --worker-urls); to check "
            "the harness against one server on purpose (an A/A run), add --same-server-ok",
        )


def _roles(info: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """An arm behind a gateway: the first worker's fingerprint of each role; {} for other arms."""
    gateway = info.get("gateway")
    out: dict[str, dict[str, Any]] = {}
    for w in gateway.get("workers") or () if isinstance(gateway, dict) else ():
        out.setdefault(str(w.get("role")), w["fingerprint"])
    return out
