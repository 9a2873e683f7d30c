"""smg, SGLang's model gateway (PyPI ``smg``; the Rust router that was sgl-router): where its program
is, the command evalgate starts it with, and its workers listing.

Everything here was read from smg's own source and checked against the real 1.13.0 program
(docs/engines.md, "Arms of many workers"): ``GET /workers`` on its admin API lists each worker
with its ``url`` and ``worker_type`` (regular, prefill, decode, encode; model_gateway/src/worker/
service.rs, crates/protocols/src/worker.rs ``WorkerSpec``), behind the gateway's ``--api-key``.
``--policy consistent_hashing`` routes by the ``X-SMG-Routing-Key`` header on a hash ring over the
worker URLs (policies/consistent_hashing.rs); ``--disable-retries`` keeps a failed request from
being retried on another worker (routers/common/retry.rs), so an item is scored where its key
says, and a dead worker is seen as one.
"""

from __future__ import annotations

import contextlib
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from evalgate.engines._launcher import ServerHandle, free_port, run_process
from evalgate.errors import ConfigError, ServerStartError
from evalgate.redact import env_secrets, redact, redact_url

__all__ = [
    "ROLES",
    "GatewayWorker",
    "find_smg",
    "gateway_command",
    "launch_gateway",
    "parse_workers",
    "read_workers",
    "smg_version",
]

ROLES = ("regular", "prefill", "decode", "encode")
"""smg's ``worker_type`` values (crates/protocols/src/worker.rs ``WorkerType``)."""
INSTALL_FIX = "pip install 'evalgate[gateway]' (smg, SGLang's model gateway), or set [gateway] smg"
LISTED_TEXT = 200
"""Characters kept of a listed worker's text fields (model id, status, runtime): the gateway's
word, stored in the manifest, so masked (``redact``) and cut like any server text."""


@dataclass(frozen=True)
class GatewayWorker:
    """One worker as smg lists it."""

    url: str
    role: str
    """regular, or prefill / decode / encode under PD (EPD) disaggregation."""
    model_id: str
    status: str
    """pending, ready, not_ready or failed."""
    healthy: bool
    bootstrap_port: int | None = None
    """A prefill worker's KV bootstrap port (PD only)."""
    runtime: str = ""
    """The engine smg detected: sglang, vllm, or generic (llama-server, say)."""

    def as_dict(self) -> dict[str, Any]:
        return {
            "url": self.url,
            "role": self.role,
            "model_id": self.model_id,
            "status": self.status,
            "healthy": self.healthy,
            "bootstrap_port": self.bootstrap_port,
            "runtime": self.runtime,
        }


def parse_workers(data: Any, *, where: str, secrets: Sequence[str] = ()) -> list[GatewayWorker] | None:
    """The workers of one ``GET /workers`` answer; None when ``data`` is not smg's listing (the URL
    is a server, not a gateway). A listing with a malformed entry is refused, never half-read.
    The text fields are the server's word: ``secrets`` (the API keys) masked, each cut to
    ``LISTED_TEXT``; the URLs are checked before any is contacted (engines/attach)."""
    if not isinstance(data, dict) or not isinstance(data.get("workers"), list) or "stats" not in data:
        return None

    def text(value: Any) -> str:
        return redact(str(value or ""), secrets=secrets, limit=LISTED_TEXT)

    out = []
    for i, w in enumerate(data["workers"]):
        url = w.get("url") if isinstance(w, dict) else None
        role = w.get("worker_type", "regular") if isinstance(w, dict) else None
        if not isinstance(url, str) or not url.startswith(("http://", "https://")) or role not in ROLES:
            raise ConfigError(
                f"{where} lists a worker evalgate cannot read (entry {i}: {redact(_show(w), secrets=secrets)})",
                fix="each worker must have an http(s) url and a worker_type of "
                f"{', '.join(ROLES)} (smg's /workers); attach the workers' own URLs instead",
            )
        port = w.get("bootstrap_port")
        out.append(
            GatewayWorker(
                url=url.rstrip("/"),
                role=str(role),
                model_id=text(w.get("model_id")),
                status=text(w.get("status")),
                healthy=w.get("is_healthy") is not False,
                bootstrap_port=port if isinstance(port, int) and not isinstance(port, bool) else None,
                runtime=text(w.get("runtime_type")),
            )
        )
    return out


def _show(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 120 else text[:117] + "..."


def read_workers(url: str, api_key: str | None, *, timeout_s: float = 10.0) -> list[GatewayWorker] | None:
    """``GET /workers`` of ``url``: smg's workers, or None when ``url`` does not answer as a gateway."""
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    try:
        resp = httpx.get(f"{url.rstrip('/')}/workers", headers=headers, timeout=timeout_s)
    except httpx.HTTPError:
        return None
    if resp.status_code != 200 or len(resp.content) > 16 * 2**20:
        return None
    try:
        data = resp.json()
    except (ValueError, RecursionError):
        return None
    return parse_workers(
        data, where=redact_url(url), secrets=[*([api_key] if api_key else []), *env_secrets()]
    )


def find_smg(configured: str | None = None) -> Path:
    """The smg program: as configured, else beside this Python (``evalgate[gateway]``), else on PATH."""
    if configured:
        path = Path(configured).expanduser()
        found = path if path.is_file() else shutil.which(configured)
        if not found:
            raise ConfigError(f"[gateway] smg names {configured}, which is not a program", fix=INSTALL_FIX)
        return Path(found)
    beside = Path(sys.executable).with_name("smg")
    if beside.is_file():
        return beside
    found = shutil.which("smg")
    if not found:
        raise ConfigError("an arm of several workers needs smg, and it is not installed", fix=INSTALL_FIX)
    return Path(found)


def smg_version(program: Path) -> str:
    """smg's version as its package reports it (the program has no --version)."""
    python = program.with_name("python")
    try:
        proc = subprocess.run(
            [
                str(python if python.exists() else sys.executable),
                "-c",
                "import importlib.metadata as m; print(m.version('smg'))",
            ],
            capture_output=True,
            text=True,
            timeout=30,
        )
    except (OSError, subprocess.TimeoutExpired):
        return "smg ?"
    found = re.fullmatch(r"\s*([0-9][^\s]*)\s*", proc.stdout)
    return f"smg {found.group(1)}" if found else "smg ?"


def gateway_command(
    program: Path,
    worker_urls: Sequence[str],
    *,
    port: int,
    metrics_port: int,
    api_key: str,
    policy: str,
) -> list[str]:
    """The exact ``smg launch`` command of one arm's gateway: loopback only (its metrics listener
    too, which binds 0.0.0.0:29000 by default and so also clashes between two gateways), the arm's
    key (required of every client, and forwarded to the workers), no retries on other workers."""
    return [
        str(program),
        "launch",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--worker-urls",
        *worker_urls,
        "--api-key",
        api_key,
        "--policy",
        policy,
        "--disable-retries",
        "--prometheus-host",
        "127.0.0.1",
        "--prometheus-port",
        str(metrics_port),
        "--log-level",
        "info",
    ]


def _all_ready(base_url: str, api_key: str, expected: Sequence[str], seen: dict[str, Any]) -> bool:
    """Ready when smg lists every expected worker ready and healthy: its /readiness says 200 once
    ONE worker is, and a late worker is only registered on smg's next try, ~30 s later."""
    workers = read_workers(base_url, api_key, timeout_s=5.0)
    if workers is None:
        return False
    by_url = {w.url: w for w in workers}
    seen["workers"] = workers
    return all(u in by_url and by_url[u].status == "ready" and by_url[u].healthy for u in expected)


@contextlib.contextmanager
def launch_gateway(
    program: Path,
    workers: Mapping[str, ServerHandle],
    *,
    name: str,
    log_dir: Path,
    api_key: str,
    policy: str,
    timeout_s: float,
) -> Iterator[tuple[ServerHandle, list[GatewayWorker]]]:
    """Start smg in front of ``workers`` (url -> handle) as ``<name>-gateway``, ready once it lists
    them all; yields its handle and the listing it gave."""
    port, metrics = free_port(), free_port()
    urls = list(workers)
    cmd = gateway_command(program, urls, port=port, metrics_port=metrics, api_key=api_key, policy=policy)
    base_url = f"http://127.0.0.1:{port}"
    seen: dict[str, Any] = {}
    try:
        with run_process(
            cmd,
            name=f"{name}-gateway",
            base_url=base_url,
            api_key=api_key,
            log_path=log_dir / f"{name}-gateway.log",
            ready=lambda: (
                _all_ready(base_url, api_key, urls, seen) or not all(h.alive() for h in workers.values())
            ),
            timeout_s=timeout_s,
        ) as handle:
            dead = [h for h in workers.values() if not h.alive()]
            if dead:
                raise dead[0].died("while the gateway registered it")
            yield handle, list(seen.get("workers") or ())
    except ServerStartError as exc:
        listed = {w.url: w.status for w in seen.get("workers") or ()}
        missing = [u for u in urls if listed.get(u) != "ready"]
        if missing and "not ready within" in str(exc):
            raise ServerStartError(
                f"smg did not list every {name} worker ready within {timeout_s:.0f} s "
                f"(not ready: {', '.join(missing)}; listed: {listed or 'none'})",
                fix="read the gateway's and the workers' log tails; raise [gateway] ready_timeout_s if the "
                "workers are just slow to start",
                detail=exc.detail,
            ) from exc
        raise
