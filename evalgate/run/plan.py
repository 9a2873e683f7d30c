"""What ``evalgate compare`` will do, settled before any server starts: what ``settle`` decides
(engine, launch specs and their checks, suites and options; ``evalgate.run.settle``, shared with
``--dry-run`` and ``bench``), then the items, the run folder and its manifest (and, on --resume,
that they match the run's). The request itself is ``evalgate.request.CompareRequest``.
"""

from __future__ import annotations

import hashlib
import json
import os
import secrets
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from rich.console import Console

from evalgate.arms import REPEATS, original, repeat_ids
from evalgate.config import EvalgateConfig
from evalgate.engines import Engine
from evalgate.engines.attach import deployment_changes
from evalgate.engines.client import RetryPolicy
from evalgate.engines.gguf import file_sha256
from evalgate.errors import ConfigError
from evalgate.gate import GatePolicy
from evalgate.redact import recorded_settings
from evalgate.request import CompareRequest
from evalgate.run.settle import load_items, resolve_suites, settle
from evalgate.stats.sequential import DEFAULT_CHUNK
from evalgate.store.files import write_atomic
from evalgate.store.lock import RunLock
from evalgate.store.manifest import ArmInfo, LaunchInfo, Manifest, SuiteInfo, VariantInfo, write_manifest
from evalgate.store.records import safe_name
from evalgate.suites import Item, Suite, SuiteOptions
from evalgate.variants import LaunchSpec, Variant

__all__ = [
    "CompareRequest",
    "RunPlan",
    "check_resumed_server",
    "check_resumed_tokenizer",
    "model_digest",
    "plan_compare",
    "resolve_suites",
]


@dataclass
class RunPlan:
    request: CompareRequest
    run_dir: Path
    run_id: str
    engine: Engine
    specs: dict[str, LaunchSpec]
    suites: list[Suite]
    items: dict[str, list[Item]]
    options: SuiteOptions
    manifest: Manifest
    variants: dict[str, Variant] = field(default_factory=dict)
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    """Per request: the timeout of one try and the number of tries ([client], --request-timeout, --tries)."""
    deadline_s: float | None = None
    """Seconds the whole run may take ([client] deadline_s, --deadline); None: no deadline."""
    lock: RunLock | None = None
    """Held on the run folder from planning until the command ends: one writer per run."""
    secrets: list[str] = field(default_factory=list)
    """Launched servers' API keys, masked in every error stored or printed (never recorded)."""
    recorded: dict[str, ArmInfo] = field(default_factory=dict)
    """--resume: each arm as the original run recorded it (its servers, its tokenizer), before this
    resume's launches overwrite it; the servers launched now must match it (``check_resumed_*``)."""

    def arm_items(self, arm: str, suite: str, block: list[Item] | None = None) -> list[Item]:
        """The items of ``block`` (default: all the suite's) that ``arm`` runs: every one, except
        on the candidate's repeat (--aa both), which runs the first --aa-items of the suite."""
        items = self.items[suite] if block is None else block
        if arm not in REPEATS or original(arm) == "baseline":
            return items
        keep = set(repeat_ids([it.item_id for it in self.items[suite]], arm, self.request.aa_items))
        return [it for it in items if it.item_id in keep]

    def release(self) -> None:
        if self.lock is not None:
            self.lock.release()

    def save(self) -> None:
        """Write manifest.json atomically: every write of a compare run's manifest goes through here."""
        write_manifest(self.run_dir, self.manifest)


def _run_id(req: CompareRequest) -> str:
    stamp = datetime.now(timezone.utc).strftime("%Y%m%d-%H%M%S")
    return f"{stamp}-{req.baseline}-vs-{req.candidate}-{secrets.token_hex(2)}".replace("+", "_")


def plan_compare(req: CompareRequest, cfg: EvalgateConfig, console: Console) -> RunPlan:
    """Everything that can fail without a server: config, variants, the fairness check, items.
    The returned plan holds the run folder's lock (``RunPlan.release`` lets it go)."""
    GatePolicy.from_request(req)  # validate
    run_id = _run_id(req)
    run_dir = Path(req.resume) if req.resume else Path(req.out) if req.out else Path("reports") / run_id
    lock = RunLock(run_dir)
    if run_dir.is_dir():  # a run being resumed, or an --out folder given: take it before any work
        lock.acquire()
    try:
        plan = _plan(req, cfg, console, run_id, run_dir, lock)
    except BaseException:
        lock.release()
        raise
    plan.lock = lock
    return plan


def _plan(
    req: CompareRequest, cfg: EvalgateConfig, console: Console, run_id: str, run_dir: Path, lock: RunLock
) -> RunPlan:
    if not req.resume:
        _require_fresh(run_dir)
    settled = settle(req, cfg)  # everything decided before a server starts, as --dry-run shows it
    req, engine, host, old = settled.request, settled.engine, settled.host, settled.previous
    if host and not old:
        for value in host.values():
            if isinstance(value, dict) and value.get("reason"):
                console.print(f"[dim]host: {value['reason']}[/dim]")
    specs, suites, options, variants = settled.specs, settled.suites, settled.options, settled.variants
    items = load_items(settled, console)
    if old:
        run_id = old.run_id
    manifest = _manifest(req, run_id, engine, specs, suites, items, options, variants)
    manifest.host_settled(host)
    if req.sequential:
        manifest.sequential_started(req.chunk or DEFAULT_CHUNK)
    if old:
        _check_resume(old, manifest, run_dir)
        manifest.resumed_from(old)  # its request, arms, times, host, outcomes, sweeps, kernel check
    plan = RunPlan(req, run_dir, run_id, engine, specs, suites, items, options, manifest, variants)
    if old:
        plan.recorded = {arm: info.model_copy(deep=True) for arm, info in old.arms.items()}
    plan.retry = RetryPolicy(
        attempts=req.tries or cfg.client.tries,
        timeout_s=req.request_timeout_s or cfg.client.timeout_s or engine.request_timeout_s(),
    )
    plan.deadline_s = req.deadline_s or cfg.client.deadline_s
    lock.acquire()
    if not req.resume:
        _require_fresh(run_dir)  # again, now that no one else can start it
    plan.save()
    _write_prompts(plan)
    return plan


def _require_fresh(run_dir: Path) -> None:
    """A new run's folder holds no run: neither a manifest nor another run's records."""
    if (run_dir / "manifest.json").exists():
        raise ConfigError(
            f"{run_dir} already holds a run",
            fix=f"continue it with --resume {run_dir}, or choose another --out",
        )
    leftovers = [p for p in ("items", "prompts") if any((run_dir / p).glob("*.jsonl"))]
    if leftovers:
        raise ConfigError(
            f"{run_dir} holds {' and '.join(f'{p}/' for p in leftovers)} of another run but no manifest.json, "
            "so they cannot be told apart from this run's",
            fix="choose another --out (or empty that folder); a run is continued only with --resume",
        )


def _write_prompts(plan: RunPlan) -> None:
    """What each item asked, once per run (shared by both arms), for the report's item browser."""
    folder = plan.run_dir / "prompts"
    folder.mkdir(parents=True, exist_ok=True)
    for suite in plan.suites:
        if suite.private and not plan.options.reveal_private:
            continue
        path = folder / f"{safe_name(suite.name)}.jsonl"  # private:/a/b would nest folders
        if path.exists():
            continue
        rows = (  # one row per item: its repeats asked the same
            {"item_id": it.item_id, "prompt_hash": it.prompt_hash, **it.display}
            for it in plan.items[suite.name]
            if not it.repeat
        )  # write_atomic: never through a link; a lone surrogate becomes its JSON escape
        write_atomic(path, "".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows))


def _manifest(
    req: CompareRequest,
    run_id: str,
    engine: Any,
    specs: dict[str, LaunchSpec],
    suites: list[Suite],
    items: dict[str, list[Item]],
    options: SuiteOptions,
    variants: dict[str, Variant],
) -> Manifest:
    return Manifest.new(
        run_id=run_id,
        engine=engine.name,
        engine_version=engine.version(),
        request=req,
        variants={arm: VariantInfo(name=v.name, weights=v.weights, kv=v.kv) for arm, v in variants.items()},
        launch={
            arm: LaunchInfo(
                model=s.model,
                model_sha256=model_digest(s.model),
                args=recorded_settings(s.args),  # a secret's digest, never its value
                env=recorded_settings(s.env),
                label=engine.describe(s),
            )
            for arm, s in specs.items()
        },
        suites={
            s.name: SuiteInfo(
                version=s.version,
                metrics=list(s.metrics),
                kind=s.kind,
                metric_kind=s.metric_kind,
                private=s.private,
                source=s.source(options),
                n=len({it.item_id for it in items[s.name]}),
                item_ids=list(dict.fromkeys(it.item_id for it in items[s.name])),
                decode_tokens=s.decode_plan(options)[0],
                decode_everywhere=s.decode_plan(options)[1],
            )
            for s in suites
        },
        arm_names=list(specs),
    )


def model_digest(model: str) -> str | None:
    """What identifies an arm's weights on disk: a model file's sha256 (memoised beside it), or for
    a checkpoint folder the sha256 of its listing (every file's path, size and modification time;
    hashing gigabytes of safetensors per run is too slow); None for a Hub id or a missing path."""
    path = Path(model)
    if path.is_file():
        return file_sha256(path)
    if not path.is_dir():
        return None
    h = hashlib.sha256()
    for root, dirs, files in os.walk(path):
        dirs.sort()
        for name in sorted(files):
            f = Path(root) / name
            if name.endswith(".sha256") or not f.is_file():
                continue
            st = f.stat()
            h.update(f"{f.relative_to(path).as_posix()}\0{st.st_size}\0{st.st_mtime_ns}\n".encode())
    return h.hexdigest()


def _resume_keys(m: Manifest) -> dict[str, Any]:
    """What a resumed run must share with the original (the rest of its request is the original's);
    each arm's launch (model, its digest, settings, environment) is compared part by part."""
    req = m.request
    return {
        "engine": m.engine,
        "engine_version": m.engine_version,
        "seed": req.seed,
        "preset": req.preset,
        "limit": req.limit,
        "max_gen_tokens": req.max_gen_tokens,
        "variants": m.variants,
        "suites": m.suites,
    }


def _launch_changes(old: Manifest, new: Manifest) -> list[str]:
    """Each arm's launch input that differs from the original run's, named with both values."""
    out = []
    for arm in dict.fromkeys([*old.launch, *new.launch]):
        before, now = old.launch.get(arm), new.launch.get(arm)
        if before is None or now is None:
            out.append(f"the {arm}'s launch ({'added' if before is None else 'dropped'})")
            continue
        if before.model != now.model:
            out.append(f"the {arm}'s model ({before.model} -> {now.model})")
        elif before.model_sha256 is not None and before.model_sha256 != now.model_sha256:
            was, is_ = before.model_sha256[:16], str(now.model_sha256)[:16]
            out.append(f"the {arm}'s model files (their digest) at {now.model} (sha256 {was} -> {is_})")
        for key, label in (("args", "launch settings"), ("env", "environment")):
            if getattr(before, key) == getattr(now, key):
                continue
            a, b = dict(getattr(before, key)), dict(getattr(now, key))
            diff = sorted(k for k in {*a, *b} if a.get(k, "<unset>") != b.get(k, "<unset>"))
            shown = ", ".join(f"{k} {a.get(k, '<unset>')} -> {b.get(k, '<unset>')}" for k in diff[:4])
            out.append(f"the {arm}'s {label} ({shown or 'their order, or a repeated flag'})")
    return out


def _changed(run_dir: Path, what: str, *, detail: str = "") -> ConfigError:
    return ConfigError(
        f"--resume {run_dir}: {what} changed since the run began, so its records and this resume's would be "
        "paired as one arm though they come from different models or settings",
        fix="start a new run (without --resume) for what changed; to finish this run, restore the original "
        "inputs (see `launch` and `arms` in its manifest.json)",
        detail=detail,
    )


def _check_resume(old: Manifest, new: Manifest, run_dir: Path) -> None:
    before, now = _resume_keys(old), _resume_keys(new)
    mismatched = [k for k in before if before[k] != now[k]]
    launch = _launch_changes(old, new)
    if launch and not {"engine", "engine_version"} & set(mismatched):  # another engine: said below
        raise _changed(run_dir, "; ".join(launch))
    if mismatched:
        raise ConfigError(
            f"--resume {run_dir}: this command differs from the original run in {', '.join(mismatched)}",
            fix="rerun with exactly the original flags (see `command` in its manifest.json), or start a new run",
        )


def check_resumed_server(plan: RunPlan, arm: str, info: dict[str, Any]) -> None:
    """--resume: an attached arm's servers must serve what the run recorded (engine, version,
    model, settings; their URLs and per-start ids may change). A launched arm's server is its
    launch spec and model digest, checked before any launch (``_check_resume``)."""
    before = plan.recorded.get(arm)
    servers = before.server.servers if before is not None else None
    if not servers or not info.get("servers"):
        return
    changes = deployment_changes({"servers": servers}, info)
    if changes:
        raise _changed(
            plan.run_dir,
            f"what the {arm}'s servers serve ({', '.join(k for k, _, _ in changes[:6])})",
            detail="\n".join(f"  {k}: recorded {a!r}, now {b!r}" for k, a, b in changes[:20]),
        )


def check_resumed_tokenizer(plan: RunPlan, arm: str, fingerprint: str | None) -> None:
    """--resume: the arm's tokenizer must be the one its records were made with."""
    before = plan.recorded.get(arm)
    was = before.tokenizer_fingerprint if before is not None else None
    if was and fingerprint and was != fingerprint:
        raise _changed(plan.run_dir, f"the {arm}'s tokenizer (fingerprint {was[:16]} -> {fingerprint[:16]})")
