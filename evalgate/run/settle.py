"""Everything a comparison decides before any server starts, decided once: ``settle``.

``compare``, ``compare --dry-run`` and ``bench`` all call it, so a dry run refuses exactly what
the run refuses (same order, same message, exit 2) and prints what the run will do: the engine
(launched, or attached by URL), each arm's launch spec, its input files, the only-quantization
check, the pair check, the suites with their options (sampling included), long_context's lengths,
the tool-call parser, and the combinations a run refuses. Only the run folder, the items and the
manifest are the plan's (``evalgate.run.plan``); nothing here writes or launches.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel
from rich.console import Console

from evalgate.arms import DEFAULT_AA_ITEMS, original, repeat_arms
from evalgate.config import EvalgateConfig
from evalgate.engines import ENGINES, Engine, get_engine, require_input_files
from evalgate.engines.attach import ExternalEngine, require_two_servers
from evalgate.errors import ConfigError
from evalgate.gate import DEFAULT_FLIP_BUDGET, GatePolicy
from evalgate.request import CompareRequest
from evalgate.stats.sequential import shuffled
from evalgate.store.manifest import Manifest, load_manifest
from evalgate.suites import (
    PRESETS,
    Item,
    Suite,
    SuiteOptions,
    chat_variants,
    default_registry,
    plan_lengths,
)
from evalgate.variants import LaunchSpec, Variant, require_only_quantization

__all__ = [
    "Settled",
    "items_per_suite",
    "load_items",
    "resolve_suites",
    "settle",
    "settle_one",
    "suite_options",
    "suite_tables",
    "with_deterministic",
]


@dataclass(frozen=True)
class Settled:
    """What ``settle`` decided: the run's inputs, none of them touched by a server yet."""

    request: CompareRequest
    """The request with what was settled filled in: long_context's lengths, the engine's
    default generation cap (both recorded in the manifest)."""
    engine: Engine
    host: dict[str, Any] | None
    """What the engine measured on this machine for the launch settings (the manifest's ``host``)."""
    variants: dict[str, Variant]
    specs: dict[str, LaunchSpec]
    """Per arm (``aa``, with --aa: the baseline's again; ``aa_candidate``, with --aa both: the
    candidate's), each checked before launch."""
    suites: list[Suite]
    options: SuiteOptions
    previous: Manifest | None = None
    """The run being resumed (--resume), whose host choice the engine keeps."""
    attached: bool = False
    """The arms are running servers (--baseline-url/--candidate-url), not launched."""


def settle(
    req: CompareRequest,
    cfg: EvalgateConfig,
    *,
    contact: bool = True,
    measures: Literal["answers", "speed"] = "answers",
) -> Settled:
    """Decide (or refuse, ConfigError: exit 2) everything before the first server starts.

    ``contact=False`` (the dry run) leaves out the two checks that ask attached servers (their
    read-back settings, their tool-call parser): nothing else depends on a server. ``measures``
    names what a launch difference would confound in the only-quantization refusal (``bench``:
    speed, and no report records an --allow-diff)."""
    GatePolicy.from_request(req)  # validate
    cfg = with_deterministic(cfg) if req.deterministic else cfg
    engine, attached = _engine(req, cfg)
    previous = load_manifest(Path(req.resume)) if req.resume else None
    host = engine.settle_host(previous_env=previous.launch["baseline"].env if previous else None)
    variants = {"baseline": cfg.variant(req.baseline), "candidate": cfg.variant(req.candidate)}
    specs = {arm: engine.launch_spec(v) for arm, v in variants.items()}
    for arm in repeat_arms(req.aa):  # --aa: the baseline launched again; --aa both: the candidate too
        variants[arm], specs[arm] = variants[original(arm)], specs[original(arm)]
    require_input_files(specs)  # a --chat-template-file that is not there: exit 2, not a failed start
    require_only_quantization(
        specs["baseline"],
        specs["candidate"],
        allow=req.allow_diff,
        what=measures,
        recorded=measures == "answers",
    )
    asks = contact or not attached  # a launched engine's checks read only its specs
    if asks:
        engine.check_pair(allow=req.allow_diff)  # attach mode: the settings the servers report
    suites = resolve_suites(req)
    if asks and any(s.needs_tool_parser for s in suites):
        for arm, spec in specs.items():
            engine.require_tool_parser(arm, spec)  # else no calls on either arm: a silent PASS
    if req.context_lengths and not any(s.plans_lengths for s in suites):
        raise ConfigError(
            "--context-lengths sets long_context's lengths, and this run does not include it",
            fix="add long_context to --suites, or drop --context-lengths",
        )
    if any(s.plans_lengths for s in suites):  # lengths settled (and fit) before launch
        slots = {arm: engine.slot_context(spec) for arm, spec in specs.items()}
        req = req.model_copy(update={"context_lengths": plan_lengths(req.context_lengths, slots, req.preset)})
    cap = engine.default_gen_cap(req.preset)  # e.g. llama.cpp's smoke runs: CPU time is short
    if req.max_gen_tokens is None and cap is not None:  # both arms get it; manifest and report say so
        req = req.model_copy(update={"max_gen_tokens": cap})
    configured = next((s.drift_budget for s in suites if s.drift_budget), None)
    if req.drift_budget is None and configured:  # [suites.drift]'s budgets, recorded like the flag's
        req = req.model_copy(update={"drift_budget": configured})
    _refuse_modes(req, suites)
    return Settled(
        req, engine, host, variants, specs, suites, suite_options(req, engine.name), previous, attached
    )


def resolve_suites(req: CompareRequest) -> list[Suite]:
    """The run's suites, each with its own options (``--chat``: the chat variants), and the
    refusals of options for a suite not in the run and of ``--thinking`` with no suite to reach."""
    registry = default_registry()
    names = chat_variants(req.suites) if req.chat else req.suites  # --chat: each suite's chat variant
    extra = [name for name in req.suite_options if name not in names]
    if extra:
        raise ConfigError(
            f"suite options for {extra[0]}, which this run does not include",
            fix="add it to --suites, or drop its --suite-opt"
            + (" (--chat runs the chat variants)" if req.chat else ""),
        )
    suites = [registry.get(name, options=req.suite_options.get(name)) for name in names]
    first: dict[str, str] = {}
    for spec, suite in zip(names, suites, strict=True):  # records and rows are keyed by name
        if suite.name in first:
            raise ConfigError(
                f"--suites {first[suite.name]} and {spec} are both the suite {suite.name}, so one of them "
                "would silently not run",
                fix='name each suite once; two private exams need their own names (name = "..." in one '
                "folder's exam.toml, see suites/private/README.md)",
            )
        first[suite.name] = spec
    if req.thinking != "auto" and not any(s.takes_thinking for s in suites):
        raise ConfigError(
            f"--thinking {req.thinking} reaches only chat suites, and this run has none",
            fix="add --chat (or a chat suite such as gsm8k_chat, or a private exam), or drop --thinking",
        )
    return suites


def suite_tables(
    tables: Mapping[str, Mapping[str, Any]], suites: Sequence[str], *, chat: bool
) -> dict[str, dict[str, Any]]:
    """The ``[suites.<name>]`` tables of evalgate.toml this run takes: those of the suites it runs,
    under the name it runs them by (``--suites gsm8k --chat`` runs gsm8k_chat: its table is
    ``[suites.gsm8k_chat]``). A table of a suite the run leaves out stays unused, as evalgate.toml
    serves every run; under --chat the plain suite's table is refused, since its suite does not
    run and its options are not the chat variant's."""
    runs = chat_variants(suites) if chat else tuple(suites)
    for name in suites if chat else ():
        runs_as = chat_variants([name])[0]
        if runs_as != name and name in tables:
            raise ConfigError(
                f"[suites.{name}] in evalgate.toml: --chat runs {runs_as} in place of {name}, so that "
                f"table would not apply",
                fix=f"move its options to [suites.{runs_as}] (see `evalgate suites list`), or drop --chat",
            )
    return {name: dict(table) for name, table in tables.items() if name in runs}


def suite_options(req: CompareRequest, engine: str) -> SuiteOptions:
    """The run-wide knobs every suite gets, the same on both arms (sampling included)."""
    return SuiteOptions(
        data_dir=req.data_dir,
        seed=req.seed,
        max_gen_tokens=req.max_gen_tokens,
        engine=engine,
        reveal_private=req.reveal_private,
        temperature=req.temperature,
        context_lengths=req.context_lengths or (),
        thinking=None if req.thinking == "auto" else req.thinking == "on",
        sampling=tuple(
            (k, v)
            for k, v in (("top_p", req.top_p), ("top_k", req.top_k), ("min_p", req.min_p))
            if v is not None
        ),
    )


def load_items(settled: Settled, console: Console | None = None) -> dict[str, list[Item]]:
    """Each suite's items in the order the run asks them: ``--sequential``'s recorded shuffle,
    and ``--repeats`` k records per item (the same seed on both arms)."""
    req = settled.request
    items: dict[str, list[Item]] = {}
    for suite in settled.suites:
        n = items_per_suite(settled, suite.name)
        if console is None:
            items[suite.name] = suite.load(settled.options, n)
        else:
            with console.status(f"loading {suite.name} items"):
                items[suite.name] = suite.load(settled.options, n)
        if req.sequential:  # the recorded order in which the e-value consumes them
            items[suite.name] = shuffled(items[suite.name], seed=req.seed, suite=suite.name)
        if req.repeats > 1:  # repeat r of an item: its own record, the same seed on both arms
            items[suite.name] = [
                replace(it, repeat=r) for it in items[suite.name] for r in range(req.repeats)
            ]
    return items


def items_per_suite(settled: Settled, suite: str) -> int | None:
    """``--limit``; else, on a resume, what the original run planned (a later version's defaults
    never change a run half done); else the engine's count for the preset (a CPU smoke run asks
    fewer 5-shot GSM8K items, ``Engine.default_items``), else the preset's; None: every item."""
    req, previous = settled.request, settled.previous
    if req.limit is not None:
        return req.limit
    engine_counts = settled.engine.default_items(req.preset)
    if suite not in engine_counts:
        return PRESETS[req.preset]
    if previous is not None and suite in previous.suites:  # planned under another version's counts
        return previous.suites[suite].n
    return engine_counts[suite]


def with_deterministic(cfg: EvalgateConfig, engines: Sequence[str] = ENGINES) -> EvalgateConfig:
    """--deterministic in each named engine's own section of ``cfg`` (-np 1, SGLang's flag, vLLM's
    env), so the launch args record it and a resume keeps it; an engine with no such setting (a
    registered test engine) is refused (exit 2)."""
    update = {}
    for name in engines:
        section = getattr(cfg, name, None)
        if not isinstance(section, BaseModel) or "deterministic" not in type(section).model_fields:
            raise ConfigError(
                f"--deterministic has no setting for the engine {name!r}",
                fix=f"drop --deterministic, or launch {', '.join(ENGINES)}",
            )
        update[name] = section.model_copy(update={"deterministic": True})
    return cfg.model_copy(update=update)


def settle_one(
    cfg: EvalgateConfig, *, engine: str, variant: str, deterministic: bool = False
) -> tuple[Engine, LaunchSpec]:
    """One launched server (``evalgate probe``): its engine and its variant's launch spec, checked
    as a compare arm's are before launch (--deterministic as compare sets it, the spec's input
    files present)."""
    if deterministic:
        cfg = with_deterministic(cfg, (engine,))
    one = get_engine(engine, cfg)
    spec = one.launch_spec(cfg.variant(variant))
    require_input_files({"probe": spec})
    return one, spec


def _engine(req: CompareRequest, cfg: EvalgateConfig) -> tuple[Engine, bool]:
    """The engine by name, or (both URLs given) the attached servers; True when attached."""
    if bool(req.baseline_url) != bool(req.candidate_url):
        raise ConfigError(
            "attach mode needs both --baseline-url and --candidate-url",
            fix="pass both (comma-separated URLs per arm), or neither to launch the servers",
        )
    if not req.baseline_url:
        engine = get_engine(req.engine or cfg.engine, cfg)
        if req.resume:  # an arm behind smg: route items by their key
            engine.resuming()
        return engine, False
    if req.engine:
        raise ConfigError(
            "--engine launches servers; --baseline-url/--candidate-url attach to running ones",
            fix="drop --engine (use --protocol to name the attached servers' engine)",
        )
    urls = {"baseline": list(req.baseline_url), "candidate": list(req.candidate_url)}
    if not req.same_server_ok:
        require_two_servers(urls["baseline"], urls["candidate"])
    engine = ExternalEngine(
        urls,
        protocol=req.protocol,
        deterministic=req.deterministic,
        allow_diff=req.allow_diff,
        same_server_ok=req.same_server_ok,
        worker_kld_tolerance=cfg.gateway.worker_kld_tolerance,
        allow_workers=cfg.gateway.allow_workers,
    )
    return engine, True


def _refuse_modes(req: CompareRequest, suites: list[Suite]) -> None:
    """The combinations of --repeats, --sequential, --aa, sampling and the policy that a run refuses."""
    picked = [
        f for f, v in (("--baseline-run", req.baseline_run), ("--candidate-run", req.candidate_run)) if v
    ]
    if picked:  # they pick a run from an lm-eval folder; a run with servers has none to pick
        raise ConfigError(
            f"{' and '.join(picked)} pick(s) one lm-eval run from a folder of several, and this run gates servers",
            fix=f"drop {' and '.join(picked)}, or gate lm-eval runs with --baseline-samples/--candidate-samples",
        )
    if req.aa_items is not None and (req.aa != "both" or req.aa_items < 1):  # sizes --aa both's repeat
        raise ConfigError(
            f"--aa-items {req.aa_items} sizes the candidate's repeat, and "
            + ("only --aa both runs one" if req.aa != "both" else "it must be at least 1"),
            fix="add --aa both, or drop --aa-items"
            if req.aa != "both"
            else f"the default is {DEFAULT_AA_ITEMS} items per suite",
        )
    if req.repeats > 1:
        fixed = [s.name for s in suites if not s.samples]
        if fixed:
            raise ConfigError(
                f"--repeats {req.repeats}: {', '.join(fixed)} do(es) not sample (log-likelihood scoring "
                "or the suite's own fixed requests), so every repeat would be the same request",
                fix="run those suites in a separate run without --repeats, or drop --repeats",
            )
        if req.sequential:
            raise ConfigError(
                "--sequential cannot be combined with --repeats",
                fix="run the repeats as a full run (the per-item mean needs every repeat of an item)",
            )
    sampled = [s.name for s in suites if s.samples] if (req.temperature or 0) > 0 else []
    if sampled and req.repeats == 1 and req.agreement_gate and not req.aa and req.flip_budget is None:
        raise ConfigError(  # the default 5 % budget would count sampling disagreement as change
            f"--temperature {req.temperature:g} without --repeats: two samples of one model disagree by "
            f"chance, and the agreement gate's fixed {DEFAULT_FLIP_BUDGET:.0%} flip budget would count that "
            f"as change on {', '.join(sampled)} (a true A/A would block)",
            fix="add --repeats 2 or more (the gate then tests the arms' disagreement beyond each arm's own, "
            "repeat to repeat), or --aa (the A/A arm's flips become the reference)"
            + (", and drop --sequential" if req.sequential else ""),
        )
    if req.drift_budget is not None and not any(s.metric_kind == "drift" for s in suites):
        raise ConfigError(  # else the budget is recorded and gates nothing, said nowhere
            f"--drift-budget {req.drift_budget} sets a drift suite's budgets, and this run has none "
            f"({', '.join(s.name for s in suites)})",
            fix="add drift to --suites, or drop --drift-budget",
        )
    if req.sequential and req.policy == "non-inferiority":
        raise ConfigError(
            "--sequential tests for a difference or a regression, not non-inferiority",
            fix="drop --sequential, or use --policy difference or regression",
        )
    if req.sequential and (req.aa or req.with_throughput):
        raise ConfigError(
            "--sequential cannot be combined with --aa or --with-throughput",
            fix="run the A/A calibration or the throughput sweep as a separate, full run",
        )
