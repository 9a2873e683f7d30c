"""An arm served by several workers behind smg (``server.gateway`` in the manifest): which gateway,
which routing policy, and each worker with its answer to the fixed probe and how many answers it
gave, so a reviewer sees that the arm was a pool and that its workers agreed. A PD arm says which
suites reached which pool. Text comes from a server's listing: cleaned here, escaped by the
renderer (jinja2's autoescape, summary.md's ``_md``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from evalgate.redact import redact_url
from evalgate.report import _format as fmt
from evalgate.report._sections import Section
from evalgate.store.facts import GatewayFacts, GatewayWorkerFacts
from evalgate.store.manifest import Manifest

__all__ = ["PD_NOTE", "WORKER_HEADERS", "GatewayPanel", "gateway_panels"]

PD_NOTE = (
    "prompt-logprob suites (multiple choice) and the drift suite prefill rows read the prefill "
    "workers numerics only; generation suites and the drift suite decode rows (greedy generations, "
    "each step reading the KV cache the decode workers hold) read the decode workers too"
)
WORKER_HEADERS = ["worker", "role", "status", "probe mean KL vs the first worker", "answers routed"]


@dataclass(frozen=True)
class GatewayPanel:
    """One arm's gateway: key/value facts (URL, program, policy) and its workers' table."""

    key: str
    title: str
    facts: list[list[str]]
    workers: Section
    note: str = ""
    """``PD_NOTE`` for an arm with prefill/decode workers, else empty."""


def gateway_panels(m: Manifest) -> list[GatewayPanel]:
    """A panel per arm whose server facts hold ``gateway``, in the manifest's arm order."""
    out = []
    for arm, info in m.arms.items():
        gateway = info.server.gateway
        if gateway is not None:
            out.append(_panel(arm, gateway))
    return out


def _panel(arm: str, gateway: GatewayFacts) -> GatewayPanel:
    workers = list(gateway.workers or ())
    facts = [
        ["gateway", _url(gateway.url)],
        [
            "program",
            fmt.compact(gateway.program) or "not recorded (attached: evalgate did not start it)",
        ],
        ["policy", fmt.compact(gateway.policy) or "not recorded"],
        ["mode", "launched by evalgate" if gateway.launched else "attached (already running)"],
    ]
    if gateway.retries:
        facts.append(["retries", fmt.compact(gateway.retries)])
    probe = gateway.probe or {}
    routed = _routed(gateway.routed)
    rows = []
    for w in workers:
        url = str(w.url or "")
        rows.append([
            _url(url),
            fmt.compact(w.role) or "regular",
            _status(w),
            _kl(probe.get(url)),
            str(routed.pop(url.rstrip("/"), 0)),
        ])  # fmt: skip
    for name, n in routed.items():  # answers smg attributed to no listed worker ("?": no header)
        rows.append([_url(name), "", "not listed by the gateway", "", str(n)])
    pd = any(w.role in ("prefill", "decode") for w in workers)
    title = f"{arm}: {len(workers)} workers behind smg"
    table = Section(f"gateway-{arm}-workers", title, list(WORKER_HEADERS), rows)
    return GatewayPanel(f"gateway-{arm}", fmt.clean(title), facts, table, note=PD_NOTE if pd else "")


def _url(value: Any) -> str:
    return fmt.compact(redact_url(str(value))) if value else "not recorded"


def _status(w: GatewayWorkerFacts) -> str:
    status = fmt.compact(w.status) or "unknown"
    return status if w.healthy is not False else f"{status} (unhealthy)"


def _kl(found: Any) -> str:
    """The worker's mean KL against the first worker of its role on the probe, or why there is none."""
    if not isinstance(found, dict):
        return "not probed"
    kld = found.get("mean_kld")
    if not isinstance(kld, (int, float)) or isinstance(kld, bool):
        return f"{fmt.compact(found.get('positions'))} positions: not comparable"
    same = " (identical)" if found.get("identical") else ""
    return f"{kld:.3g}{same}"


def _routed(value: Any) -> dict[str, int]:
    """Answers per worker as recorded (``x-smg-routed-worker-id``), keys without a trailing slash."""
    out: dict[str, int] = {}
    for name, n in (value or {}).items() if isinstance(value, dict) else ():
        if isinstance(n, int) and not isinstance(n, bool):
            key = str(name).rstrip("/")
            out[key] = out.get(key, 0) + n
    return out
