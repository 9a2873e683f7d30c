"""An arm as N workers behind one smg gateway: ``[llamacpp] workers = N`` (or ``[sglang]``,
``[vllm]``) wraps the engine in ``GatewayEngine``, which starts each arm's N workers as the engine
starts one server (loopback, the arm's one random key, own process group, log tails on failure),
then smg in front of them, and tears all of it down together. All scoring traffic goes through
the gateway; the calls smg does not proxy (the tokenizer's) go to the first worker, the workers
being checked identical first (``GatewayScorer.check_workers``).
"""

from __future__ import annotations

import contextlib
import signal
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from evalgate.config import GatewayConfig
from evalgate.engines._launcher import LaunchSlot, ServerHandle, WorkerSlot, new_api_key
from evalgate.engines.api import Engine
from evalgate.engines.gateway._scorer import GatewayScorer
from evalgate.engines.gateway._smg import find_smg, gateway_command, launch_gateway, smg_version
from evalgate.errors import ServerDied
from evalgate.store.provenance import Provenance
from evalgate.variants import LaunchSpec

__all__ = ["GatewayEngine", "GatewayHandle", "gateway_policy"]


def gateway_policy(configured: str, *, deterministic: bool, resume: bool) -> str:
    """smg's --policy: as configured, else (auto) consistent_hashing by the item's key, in every
    mode. Not smg's default cache_aware: that policy parses each body as OpenAI text to route by
    its prefix and refuses the token-id prompts evalgate scores with (smg 1.13.0 answers HTTP 400
    "prompt: data did not match any variant of untagged enum StringOrArray"), while
    consistent_hashing with --disable-retries forwards the body as sent. Keying by the item keeps
    what cache_aware is for: a question's choices share one worker's prefix cache. ``deterministic``
    and ``resume`` need that key too (a rerun sends an item to the same worker)."""
    del deterministic, resume  # the same policy serves both; kept so callers say what they run
    return "consistent_hashing" if configured == "auto" else configured


@dataclass
class GatewayHandle(ServerHandle):
    """The arm as its clients see it (the gateway), with its workers: alive while all of them are."""

    workers: list[ServerHandle] = field(default_factory=list)

    def alive(self) -> bool:
        return super().alive() and all(w.alive() for w in self.workers)

    def died(self, context: str = "") -> ServerDied:
        """The dead worker's own error (its command and log tail), else the gateway's."""
        for worker in self.workers:
            if not worker.alive():
                return worker.died(context)
        return super().died(context)


class GatewayEngine(Engine):
    """``inner`` launched as ``workers`` servers per arm behind one smg each."""

    def __init__(self, inner: Engine, *, workers: int, config: GatewayConfig, deterministic: bool) -> None:
        self.inner, self.workers, self.config = inner, workers, config
        self.name = inner.name
        self.deterministic = deterministic
        self.resume = False
        """Set for ``compare --resume``: with policy auto, items are then routed by their key."""

    @property
    def policy(self) -> str:
        return gateway_policy(self.config.policy, deterministic=self.deterministic, resume=self.resume)

    def version(self) -> str:
        return f"{self.inner.version()}; {smg_version(find_smg(self.config.smg))}"

    def launch_spec(self, variant: Any) -> LaunchSpec:
        return self.inner.launch_spec(variant)

    @contextlib.contextmanager
    def launch(self, spec: LaunchSpec, slot: LaunchSlot) -> Iterator[GatewayHandle]:
        name, log_dir = slot.name, slot.log_dir
        program = find_smg(self.config.smg)  # not installed: say so before a worker starts
        key = new_api_key()
        with contextlib.ExitStack() as stack:
            handles: dict[str, ServerHandle] = {}
            for i in range(self.workers):
                launch = self.inner.launch(
                    spec, LaunchSlot(name, log_dir, worker=WorkerSlot(i, self.workers, key))
                )
                worker = stack.enter_context(launch)
                handles[worker.base_url] = worker
            gateway, listed = stack.enter_context(
                launch_gateway(
                    program,
                    handles,
                    name=name,
                    log_dir=log_dir,
                    api_key=key,
                    policy=self.policy,
                    timeout_s=self.config.ready_timeout_s,
                )
            )
            first = next(iter(handles.values()))
            roles = {w.url: w for w in listed}
            info = dict(first.info)  # the engine's own facts (KV buffers, capacity) of one worker
            info["gateway"] = {
                "url": gateway.base_url,
                "program": smg_version(program),
                "policy": self.policy,
                "retries": "off (--disable-retries): a failed request is retried by evalgate, on the same key",
                "launched": True,
                "direct_url": first.base_url,
                "model": roles[first.base_url].model_id if first.base_url in roles else "",
                "workers": [
                    {
                        **(roles[url].as_dict() if url in roles else {"url": url}),
                        "name": h.name,
                        "command": h.command,
                        "log": h.log_path.name,
                        "info": h.info,
                    }
                    for url, h in handles.items()
                ],
            }
            yield GatewayHandle(
                name,
                gateway.base_url,
                key,
                gateway.command,
                gateway.log_path,
                gateway.process,
                info=info,
                diagnose=gateway.diagnose,
                diagnose_signal=gateway.diagnose_signal,
                workers=list(handles.values()),
            )

    def provenance(self, handle: ServerHandle) -> Provenance:
        """What the arm's first worker reports it runs (the workers share one launch spec)."""
        workers = handle.workers if isinstance(handle, GatewayHandle) else []
        return self.inner.provenance(workers[0]) if workers else Provenance()

    def scorer(self, handle: ServerHandle, *, seed: int = 0) -> GatewayScorer:
        workers = handle.workers if isinstance(handle, GatewayHandle) else []
        direct = {w.base_url: self.inner.scorer(w, seed=seed) for w in workers}
        roles = {str(w["url"]): str(w.get("role") or "regular") for w in handle.info["gateway"]["workers"]}  # type: ignore[index]
        return GatewayScorer(
            self.inner.scorer(handle, seed=seed),
            direct,
            roles=roles,
            tolerance=self.config.worker_kld_tolerance,
        )

    @property
    def concurrent_arms(self) -> bool:
        return self.inner.concurrent_arms

    def capacity(self, handle: ServerHandle) -> dict[str, Any] | None:
        """One worker's KV pool, and how many such workers the arm has."""
        workers = handle.workers if isinstance(handle, GatewayHandle) else []
        found = self.inner.capacity(workers[0]) if workers else None
        return {**found, "workers": len(workers)} if found else None

    def diagnose(self, log: str) -> str | None:
        return self.inner.diagnose(log)

    def diagnose_signal(self, sig: signal.Signals, log: str) -> str | None:
        return self.inner.diagnose_signal(sig, log)

    def settle_host(self, *, previous_env: Sequence[tuple[str, str]] | None = None) -> dict[str, Any] | None:
        return self.inner.settle_host(previous_env=previous_env)

    def check_pair(self, *, allow: Iterable[str] = ()) -> None:
        self.inner.check_pair(allow=allow)

    def launch_command(self, spec: LaunchSpec, *, name: str, port: int, api_key: str) -> list[str]:
        """One worker's command (all N are alike, each on its own port) and then smg's."""
        worker = self.inner.launch_command(spec, name=name, port=port, api_key=api_key)
        urls = [f"http://127.0.0.1:<port{i}>" for i in range(self.workers)]
        program = Path(self.config.smg or "smg")
        smg = gateway_command(program, urls, port=port, metrics_port=0, api_key=api_key, policy=self.policy)
        return [*worker, f"# x{self.workers} workers, then:", *smg]

    def describe(self, spec: LaunchSpec) -> str | None:
        return self.inner.describe(spec)

    def plan_notes(self, spec: LaunchSpec) -> list[str]:
        return [
            *self.inner.plan_notes(spec),
            f"{self.workers} workers per arm behind smg (policy {self.policy}, no retries on another worker); "
            "each worker is checked to answer a fixed probe alike before scoring",
        ]

    def require_tool_parser(self, arm: str, spec: LaunchSpec) -> None:
        self.inner.require_tool_parser(arm, spec)

    def slot_context(self, spec: LaunchSpec) -> int | None:
        return self.inner.slot_context(spec)

    def default_gen_cap(self, preset: str) -> int | None:
        return self.inner.default_gen_cap(preset)

    def default_items(self, preset: str) -> Mapping[str, int]:
        return self.inner.default_items(preset)

    def resuming(self) -> None:
        self.resume = True

    def request_timeout_s(self) -> float:
        return self.inner.request_timeout_s()

    def __repr__(self) -> str:
        return f"GatewayEngine({self.inner.name} x{self.workers}, policy {self.policy})"
