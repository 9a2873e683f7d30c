"""One probe on one server, launched or attached, and its files: what ``evalgate probe cache`` and
``evalgate probe warm-cold`` share. The launched server is settled as compare settles its arms
(``run.settle.settle_one``: the engine, the variant's checked launch spec, --deterministic in the
engine's own section); an attached one is fingerprinted like an attach-mode arm, its key in
``EVALGATE_API_KEY``. Nothing starts before every flag and ``--out`` itself have been checked:
a probe's file, its logs/ folder or a log in it that is a link (or anything but what the probe
writes there) is refused (exit 2), and each file is then written by the run folder's writer,
which never follows a link (``store.files.write_atomic``)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import stat
import sys
from collections.abc import Callable, Iterator
from datetime import datetime, timezone
from pathlib import Path
from typing import Annotated, Any, Protocol

from pydantic import BaseModel, ConfigDict, Field

from evalgate.config import load_config
from evalgate.engines import Scorer, ServerHandle
from evalgate.engines.api import LaunchSlot
from evalgate.engines.attach import DIALECTS, AttachedHandle, fingerprint, normalize_url
from evalgate.errors import ConfigError
from evalgate.probe.report import junit_xml, probe_html, summary_line, summary_md
from evalgate.redact import redact_url
from evalgate.request import Flag
from evalgate.run.settle import settle_one
from evalgate.store.files import make_folder, write_atomic
from evalgate.store.probe_report import check_report

__all__ = ["API_KEY_ENV", "OUTPUTS", "Probe", "ProbeServer", "run_probe"]

API_KEY_ENV = "EVALGATE_API_KEY"
OUTPUTS = ("probe.json", "junit.xml", "summary.md", "probe.html")
"""The files a probe writes to --out (beside the server's log under logs/)."""


class Probe(Protocol):
    """One probe of one server: ``run`` is its report (probe.json, a ``ProbeReport``)."""

    @property
    def name(self) -> str:
        """probe.json's ``probe``: cache_isolation or warm_cold."""
        ...

    @property
    def deterministic(self) -> bool:
        """Launch the server as ``compare --deterministic`` does."""
        ...

    async def run(self, scorer: Scorer, *, progress: Callable[[str], None]) -> dict[str, Any]: ...


class ProbeServer(BaseModel):
    """The one server a probe runs on, and where its files go (not recorded in probe.json)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    engine: str | None = Field(None, description="launch this engine's server (llamacpp, sglang, vllm)")
    variant: str = Field("bf16", description="the variant to launch")
    url: str | None = Field(
        None, description=f"attach to this running server instead (its key in {API_KEY_ENV})"
    )
    protocol: str = Field("auto", description="the attached server's engine")
    out: Annotated[Path | None, Flag(default_text="reports/probe-<time>")] = Field(
        None, description="folder for probe.json, junit.xml, summary.md, probe.html and the server log"
    )

    def require_one(self, probe: str) -> None:
        """One server: launched (--engine) or attached (--url), exit 2 otherwise."""
        if bool(self.engine) == bool(self.url):
            raise ConfigError(
                f"probe {probe} needs one server",
                fix="pass --engine NAME to launch one, or --url URL to attach to one",
            )


def say(line: str) -> None:
    """A probe's progress, on stderr (stdout is the summary line)."""
    print(line, file=sys.stderr, flush=True)


def run_probe(probe: Probe, server: ProbeServer, *, config: Path | None, seed: int) -> int:
    """The server, the probe on it, and the files; the exit code is the verdict's."""
    server.require_one(probe.name)
    out = server.out or Path("reports") / f"probe-{datetime.now(timezone.utc):%Y%m%d-%H%M%S}"
    make_folder(out)
    refuse_planted(out)

    async def go(scorer: Scorer) -> dict[str, Any]:
        try:
            return await probe.run(scorer, progress=say)
        finally:
            await scorer.aclose()

    with _server(server, out, config=config, seed=seed, deterministic=probe.deterministic) as (
        handle,
        scorer,
    ):
        report = asyncio.run(go(scorer))
    report["server"] = redact_url(handle.base_url) if server.url else f"{server.engine} {server.variant}"
    check_report(report)
    path = out / "probe.json"
    write_atomic(path, json.dumps(report, indent=2) + "\n")
    write_atomic(out / "junit.xml", junit_xml(report))
    write_atomic(out / "summary.md", summary_md(report))
    write_atomic(out / "probe.html", probe_html(report))
    print(summary_line(report))
    for reason in report["reasons"]:
        print(f"  {reason}")
    print(f"  {path}")
    return int(report["exit_code"])


def refuse_planted(out: Path) -> None:
    """Refuse (exit 2), before any server starts, an --out where a probe's file, its logs/ folder
    or a log in it is something else (a symbolic link would have the probe write where it points)."""
    logs = out / "logs"
    wanted = [(out / n, "a regular file", stat.S_ISREG) for n in OUTPUTS] + [(logs, "a folder", stat.S_ISDIR)]
    if logs.is_dir() and not logs.is_symlink():
        wanted += [(p, "a regular file", stat.S_ISREG) for p in sorted(logs.iterdir())]
    for path, kind, test in wanted:
        try:
            mode = os.lstat(path).st_mode
        except FileNotFoundError:
            continue
        if not test(mode):
            found = "a symbolic link" if stat.S_ISLNK(mode) else "something else"
            raise ConfigError(
                f"{path} is {found}, not {kind}: evalgate probe writes there and never through a link",
                fix=f"remove {path}, or pass another --out",
            )


@contextlib.contextmanager
def _server(
    server: ProbeServer, out: Path, *, config: Path | None, seed: int, deterministic: bool
) -> Iterator[tuple[ServerHandle, Scorer]]:
    """The launched or attached server and its scorer, one request at a time."""
    if server.url:
        key = os.environ.get(API_KEY_ENV) or None
        url = normalize_url(server.url)
        fp = fingerprint(url, api_key=key, protocol=server.protocol, key_env=API_KEY_ENV)
        handle = AttachedHandle(
            "probe",
            url,
            key or "",
            ["attach", url],
            out / "probe.log",
            info=fp,
            urls=[url],
            protocol=fp["protocol"],
        )
        yield handle, DIALECTS[fp["protocol"]].scorer(handle, concurrency=1, seed=seed, deterministic=True)
        return
    engine, spec = settle_one(
        load_config(config), engine=str(server.engine), variant=server.variant, deterministic=deterministic
    )
    with engine.launch(spec, LaunchSlot("probe", out / "logs")) as handle:
        yield handle, engine.scorer(handle, seed=seed)
