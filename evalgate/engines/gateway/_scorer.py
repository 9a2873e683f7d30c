"""Scoring an arm through its gateway: every call carries its item's routing key, and the arm's
workers are checked to answer alike before anything is scored.

A gateway hides its workers: an arm that mixes a BF16 and an FP8-KV worker would pass every check
made through it, with each item scored by whichever worker smg picked. So each worker is asked
directly, once, to teacher-force the same fixed text (``PROBE_TEXT``), and an arm whose workers'
distributions differ by more than ``[gateway] worker_kld_tolerance`` is refused, naming the worker.
That sees what no setting reports: llama-server does not say its KV type anywhere it can be read.

A gateway is then checked by what answers through it, not by its listing: the same probe is sent
through the gateway, and its answer must be that of the worker smg names for it (or, where none
is named, of some listed worker). A gateway that forwards to a server it does not list (the other
arm's) is refused, exit 2; so is one that names a worker it does not list, here and for every
item after (``GatewayRoute.listed``, engines/client.py).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from evalgate.engines.api import CacheObservation, Decoded, Generation, LogLik, Position, Scorer
from evalgate.engines.client import ROUTED_TO, ROUTING_KEY, UnlistedWorker
from evalgate.engines.preflight import PreflightReport, preflight
from evalgate.errors import ConfigError
from evalgate.stats import position_klds, top1_same

__all__ = ["PROBE_TEXT", "THROUGH", "GatewayScorer", "compare_workers"]

PROBE_TEXT = (
    "Natalia sold clips to 48 of her friends in April, and then she sold half as many clips in May. "
    "How many clips did Natalia sell altogether in April and May? In May she sold 48 / 2 = 24 clips, "
    "so altogether she sold 48 + 24 = 72 clips."
)
"""A fixed GSM8K-train-style text every worker teacher-forces (its top-k at each position)."""
PROBE_TOP_K = 8
THROUGH = "through the gateway"
"""The gateway's own answer to the probe, as ``compare_workers`` names it beside a worker's."""


def compare_workers(
    probes: Mapping[str, Sequence[Position]], *, tolerance: float
) -> tuple[dict[str, dict[str, Any]], list[str]]:
    """Each worker's probe against the first's: (per worker: mean KL, top-1 agreement, identical),
    and the workers past ``tolerance``. Pure, so the refusal rule is tested without servers."""
    urls = list(probes)
    first = [p[1] for p in probes[urls[0]]]
    out: dict[str, dict[str, Any]] = {}
    odd: list[str] = []
    for url in urls:
        tops = [p[1] for p in probes[url]]
        if len(tops) != len(first):
            out[url] = {"positions": len(tops), "identical": False, "mean_kld": None}
            odd.append(url)
            continue
        klds = position_klds(first, tops)
        mean = float(np.mean(klds)) if klds.size else 0.0
        same = sum(top1_same(a, b) for a, b in zip(first, tops, strict=True))
        out[url] = {
            "positions": len(tops),
            "identical": tops == first,
            "mean_kld": mean,
            "top1_agree": f"{same}/{len(tops)}",
        }
        if mean > tolerance:
            odd.append(url)
    return out, odd


class GatewayScorer(Scorer):
    """One arm behind smg: ``through`` reaches it by the gateway (the scorer the engine makes for
    the gateway's handle), ``workers`` are each worker's own scorer (the probe, cache flushes)."""

    def __init__(
        self,
        through: Scorer,
        workers: Mapping[str, Scorer],
        *,
        roles: Mapping[str, str] | None = None,
        tolerance: float = 1e-5,
    ) -> None:
        self.through, self.workers = through, dict(workers)
        self.forced_path = through.forced_path
        """The engine's behind the gateway (llama.cpp's workers force on the decode path)."""
        for scorer in self.workers.values():  # llama.cpp: the probe must not depend on a worker's cache
            scorer.set_prompt_cache(False)
        self.roles = dict(roles or {})
        self.tolerance = tolerance
        self.concurrency = int(through.concurrency) * max(1, len(self.workers))
        self.probe: dict[str, dict[str, Any]] = {}
        """Each worker's answer to the fixed probe against the first of its role, by URL."""
        self.through_probe: dict[str, Any] = {}
        """The gateway's own answer to it against the worker it came from (``_check_through``)."""
        self.route = through.gateway_route()
        """How ``through`` reaches the gateway: it refuses any answer from a worker not listed here."""
        if self.route is not None:
            self.route.listed = frozenset(u.rstrip("/") for u in self.workers)

    async def _keyed(self, key: str, call: Any) -> Any:
        token = ROUTING_KEY.set(key)
        try:
            return await call
        finally:
            ROUTING_KEY.reset(token)

    # keys as ShardedScorer's: all of a question's choices share one worker and its prefix cache
    async def loglikelihood(self, context: str, continuation: str) -> LogLik:
        return await self._keyed(context, self.through.loglikelihood(context, continuation))

    async def loglikelihood_many(self, context: str, continuations: Sequence[str]) -> list[LogLik]:
        return await self._keyed(context, self.through.loglikelihood_many(context, continuations))

    async def token_distributions(self, tokens: Sequence[int], *, start: int, top_k: int) -> list[Position]:
        call = self.through.token_distributions(tokens, start=start, top_k=top_k)
        return await self._keyed(repr(list(tokens)), call)

    async def decode_distributions(self, prompt: Sequence[int], *, max_tokens: int, top_k: int) -> Decoded:
        call = self.through.decode_distributions(prompt, max_tokens=max_tokens, top_k=top_k)
        return await self._keyed(repr(list(prompt)), call)

    async def generate(self, prompt: str, gen: Generation) -> dict[str, Any]:
        return await self._keyed(prompt, self.through.generate(prompt, gen))

    async def chat(self, payload: dict[str, Any]) -> dict[str, Any]:
        key = json.dumps(payload.get("messages"), sort_keys=True, ensure_ascii=False, default=str)
        return await self._keyed(key, self.through.chat(payload))

    async def render_chat(self, messages: list[dict[str, Any]]) -> str:
        return await self.through.render_chat(messages)

    async def tokenize(self, text: str) -> list[int]:
        return await self.through.tokenize(text)

    async def detokenize(self, tokens: list[int]) -> str:
        return await self.through.detokenize(tokens)

    async def flush_cache(self) -> str | None:
        """Every worker's cache: smg does not pass a flush on."""
        said = await asyncio.gather(*(s.flush_cache() for s in self.workers.values()))
        return "; ".join(s for s in said if s) or None

    async def cached_request(self, prompt_ids: Sequence[int], **kwargs: Any) -> CacheObservation:
        return await self._keyed(repr(list(prompt_ids)), self.through.cached_request(prompt_ids, **kwargs))

    async def cold_request(self, prompt_ids: Sequence[int], *, max_tokens: int = 1) -> CacheObservation:
        call = self.through.cold_request(prompt_ids, max_tokens=max_tokens)
        return await self._keyed(repr(list(prompt_ids)), call)

    async def server_info(self) -> dict[str, Any]:
        return await self.through.server_info()

    async def context_length(self) -> int | None:
        """The smallest any worker reports: an item may go to any of them."""
        lengths = await asyncio.gather(*(s.context_length() for s in self.workers.values()))
        known = [n for n in lengths if n]
        return min(known) if known and len(known) == len(lengths) else None

    async def aclose(self) -> None:
        await asyncio.gather(self.through.aclose(), *(s.aclose() for s in self.workers.values()))

    def routed(self) -> dict[str, int]:
        """Answers per listed worker as smg reported them (``x-smg-routed-worker-id``)."""
        return dict(self.route.routed) if self.route is not None else {}

    def gateway_facts(self) -> tuple[dict[str, dict[str, Any]], dict[str, int]]:
        return self.probe, self.routed()

    async def check_workers(self, *, server: str) -> dict[str, dict[str, Any]]:
        """Teacher-force ``PROBE_TEXT`` on every worker directly and refuse (exit 2) an arm whose
        workers of one role answer differently, naming the odd worker; then the same probe through
        the gateway (``_check_through``)."""
        if self.route is not None:
            self.route.arm = server
        tokens = await self.through.tokenize(PROBE_TEXT)
        by_role: dict[str, dict[str, Sequence[Position]]] = {}
        for url, scorer in self.workers.items():
            positions = await scorer.token_distributions(tokens, start=1, top_k=PROBE_TOP_K)
            by_role.setdefault(self.roles.get(url, "regular"), {})[url] = positions
        for role, probes in by_role.items():
            found, odd = compare_workers(probes, tolerance=self.tolerance)
            self.probe |= {u: {**f, "role": role} for u, f in found.items()}
            if odd:
                ref, url = next(iter(probes)), odd[0]
                kld = found[url].get("mean_kld")
                said = (
                    f"mean KL {kld:.3g} nats/token" if kld is not None else "a different number of positions"
                )
                raise ConfigError(
                    f"the {server} arm mixes workers: {url} answers a fixed probe differently from {ref} "
                    f"({said}, above the tolerance {self.tolerance:g}; top-1 agrees "
                    f"{found[url].get('top1_agree', '?')}), so an item's score would depend on which "
                    "worker the gateway picked",
                    fix=f"give every {role} worker of the {server} the same weights, KV cache type and "
                    "kernels (restart the odd one), or raise [gateway] worker_kld_tolerance if the "
                    "workers are known to differ only in run-to-run noise",
                    detail="\n".join(f"  {u}: {v}" for u, v in found.items()),
                )
        await self._check_through(
            tokens, {u: p for probes in by_role.values() for u, p in probes.items()}, server
        )
        return self.probe

    async def _check_through(
        self, tokens: list[int], probes: Mapping[str, Sequence[Position]], server: str
    ) -> None:
        """The probe through the gateway must answer as the worker smg names for it (a regular one;
        else as any listed worker): refuse (exit 2) a gateway that answers from elsewhere."""
        if not probes:
            return
        named: list[str] = []
        mark = ROUTED_TO.set(named)
        cached = self.through.set_prompt_cache(False)  # as on the workers: not the gateway's cache
        try:
            call = self.through.token_distributions(tokens, start=1, top_k=PROBE_TOP_K)
            answer = await self._keyed(PROBE_TEXT, call)
        except UnlistedWorker as exc:
            raise _unlisted(server, exc) from exc
        finally:
            ROUTED_TO.reset(mark)
            if cached is not None:
                self.through.set_prompt_cache(cached)
        worker = named[-1] if named else ""
        one = worker in probes and self.roles.get(worker, "regular") == "regular"
        refs = [worker] if one else list(probes)
        found = {
            u: compare_workers({u: probes[u], THROUGH: answer}, tolerance=self.tolerance)[0][THROUGH]
            for u in refs
        }
        best = min(refs, key=lambda u: _kld(found[u]))
        self.through_probe = {**found[best], "compared_with": best}
        if _kld(found[best]) <= self.tolerance:
            return
        kld = found[best].get("mean_kld")
        said = f"mean KL {kld:.3g} nats/token" if kld is not None else "a different number of positions"
        whom = f"the worker it names for it, {worker}" if one else "any worker it lists"
        raise ConfigError(
            f"the {server} arm's gateway answers a fixed probe unlike {whom} ({said} from {best}, above the "
            f"tolerance {self.tolerance:g}), so it forwards to a server it does not list (another arm's?) "
            "and the arm would be scored on that server's answers",
            fix=f"point the {server}'s gateway at its own workers only, and attach it by the URL that routes "
            "there (smg names the worker that answered in x-smg-routed-worker-id)",
            detail=f"  through the gateway vs {best}: {found[best]}",
        )

    async def preflight(self, *, server: str, chat: bool = True) -> PreflightReport:
        """The usual preflight through the gateway, then the workers' probe (and the gateway's).
        An answer from a worker the gateway does not list is exit 2 here, before any item."""
        if self.route is not None:
            self.route.arm = server
        try:
            report = await preflight(self, server=server, chat=chat)
        except UnlistedWorker as exc:
            raise _unlisted(server, exc) from exc
        probe = await self.check_workers(server=server)
        worst = max((v.get("mean_kld") or 0.0 for v in probe.values()), default=0.0)
        report.add(
            "workers answer alike",
            True,
            f"{len(probe)} workers, a fixed probe: worst mean KL {worst:.3g} <= {self.tolerance:g}",
        )
        if self.through_probe:
            kld = self.through_probe.get("mean_kld") or 0.0
            report.add(
                "the gateway answers as its workers",
                True,
                f"the probe through the gateway against {self.through_probe['compared_with']}: mean KL "
                f"{kld:.3g} <= {self.tolerance:g}",
            )
        return report


def _kld(found: Mapping[str, Any]) -> float:
    kld = found.get("mean_kld")
    return float("inf") if kld is None else float(kld)


def _unlisted(server: str, exc: UnlistedWorker) -> ConfigError:
    """An answer from a worker the gateway does not list, seen before any item: exit 2."""
    return ConfigError(
        f"the {server} arm's gateway answered from a worker it does not list ({exc.worker!r}), so its "
        "answers may be another server's (the other arm's)",
        fix=f"point the {server}'s gateway at its own workers only (every answer's x-smg-routed-worker-id must "
        "be a worker its GET /workers lists)",
        detail=f"  {exc}",
    )
