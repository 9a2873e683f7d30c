"""The engine contract (#45), as tests/suites/test_contract.py is the suite contract's: ``Engine``
and ``Scorer`` (evalgate/engines/api.py) declare every call, the optional ones with defaults, so
every engine answers every call and nothing probes an engine, a scorer or a server handle with
``getattr``/``hasattr``. One test per promise; the scan reads the source, as tests/test_imports.py
reads imports."""

from __future__ import annotations

import ast
import asyncio
import dataclasses
import importlib
import inspect
import pkgutil
from pathlib import Path
from typing import Any

import pytest

import evalgate
import evalgate.engines
from evalgate.config import EvalgateConfig
from evalgate.engines import ENGINES, Engine, Scorer, get_engine
from evalgate.engines._launcher import WorkerSlot
from evalgate.engines.api import Generation, LaunchSlot
from evalgate.engines.api import __file__ as API_FILE
from evalgate.engines.fake import FakeEngine
from evalgate.engines.gateway import GatewayEngine
from tests.helpers.ast_probes import named, probe_calls

PACKAGE = Path(evalgate.__file__).resolve().parent
ENGINES_DIR = PACKAGE / "engines"


def _declared(protocol: type) -> dict[str, Any]:
    """The calls and facts a protocol declares: its own methods, properties and annotations."""
    names = {n: v for n, v in vars(protocol).items() if not n.startswith("_")}
    names |= {n: None for n in protocol.__annotations__ if n not in names}
    return names


ENGINE_CALLS = _declared(Engine)
SCORER_CALLS = _declared(Scorer)
CAPABILITIES = {
    Engine: ("resuming", "pressure"),
    Scorer: ("set_prompt_cache", "gateway_route", "gateway_facts"),
}
"""What the gateway (engines/gateway) and the loop used to probe for, now declared with defaults."""


def implementations(protocol: type) -> dict[str, type]:
    """Every class in evalgate/engines/ that implements ``protocol`` (by its bases)."""
    found: dict[str, type] = {}
    for info in pkgutil.walk_packages([str(ENGINES_DIR)], prefix="evalgate.engines."):
        module = importlib.import_module(info.name)
        for name, obj in vars(module).items():
            if inspect.isclass(obj) and protocol in obj.__mro__[1:] and obj.__module__ == module.__name__:
                found[name] = obj
    return found


def _compatible(declared: Any, actual: Any) -> str | None:
    """Why ``actual`` cannot stand in for the declared method (None: it can): every declared
    parameter by the same name and kind, anything extra optional."""
    want = inspect.signature(declared).parameters
    have = inspect.signature(actual).parameters
    if any(p.kind is p.VAR_KEYWORD for p in have.values()):
        have = {**have, **{n: p for n, p in want.items() if p.kind is p.KEYWORD_ONLY and n not in have}}
    for name, p in want.items():
        if name not in have:
            return f"lacks {name!r}"
        if have[name].kind is not p.kind and p.kind is not p.POSITIONAL_OR_KEYWORD:
            return f"takes {name!r} as {have[name].kind.description}, not {p.kind.description}"
    extra = [
        n
        for n, p in have.items()
        if n not in want and p.default is p.empty and p.kind in (p.KEYWORD_ONLY, p.POSITIONAL_OR_KEYWORD)
    ]
    return f"requires {extra}" if extra else None


@pytest.mark.parametrize("protocol", [Engine, Scorer], ids=lambda p: p.__name__)
def test_every_engine_answers_every_declared_call(protocol: type) -> None:
    """Every engine and scorer class (incl. the gateway's, attach mode's and the fake) has each
    declared method, callable with the declared parameters."""
    classes = implementations(protocol)
    expected = (
        {"LlamaCppEngine", "SGLangEngine", "SGLangCPUEngine", "VLLMEngine", "VLLMCPUEngine"}
        | {"GatewayEngine", "ExternalEngine", "FakeEngine"}
        if protocol is Engine
        else {"LlamaCppScorer", "SGLangScorer", "VLLMScorer", "GatewayScorer", "ShardedScorer", "FakeScorer"}
    )
    assert expected <= set(classes)
    calls = ENGINE_CALLS if protocol is Engine else SCORER_CALLS
    bad = []
    for cls_name, cls in sorted(classes.items()):
        for name, declared in calls.items():
            actual = inspect.getattr_static(cls, name, None)
            if not (callable(declared) or isinstance(declared, property)):
                continue  # a fact (``name``, ``concurrency``, ``forced_path``): the instances carry it
            if isinstance(declared, property):
                if not isinstance(actual, property):
                    bad.append(f"{cls_name}.{name} is not a property")
                continue
            if not callable(actual) and not isinstance(actual, staticmethod | classmethod):
                bad.append(f"{cls_name}.{name} is missing")
                continue
            if why := _compatible(declared, getattr(cls, name)):
                bad.append(f"{cls_name}.{name} {why}")
    assert not bad, bad


def test_the_signature_check_finds_what_it_forbids() -> None:
    def needs_more(self: Any, spec: Any, extra: int) -> None: ...
    def lacks_a_keyword(self: Any, spec: Any, *, name: str, port: int) -> list[str]: ...
    def positional(self: Any, spec: Any, name: str, port: int, api_key: str) -> list[str]: ...
    def takes_more_optionally(
        self: Any, spec: Any, *, name: str, port: int, api_key: str, x: int = 0
    ) -> list[str]: ...

    assert _compatible(Engine.slot_context, needs_more) == "requires ['extra']"
    assert _compatible(Engine.launch_command, lacks_a_keyword) == "lacks 'api_key'"
    assert "not keyword-only" in (_compatible(Engine.launch_command, positional) or "")
    assert _compatible(Engine.launch_command, takes_more_optionally) is None


SHAPES = {(Scorer, "generate"): ["self", "prompt", "gen"], (Engine, "launch"): ["self", "spec", "slot"]}
"""Calls whose options travel as one frozen value declared in api.py (``Generation``,
``LaunchSlot``), not as a keyword list each engine repeats."""


def test_options_travel_as_one_frozen_value() -> None:
    bad = [
        f"{cls.__name__}.{call} takes {have}"
        for (protocol, call), want in SHAPES.items()
        for cls in [protocol, *implementations(protocol).values()]
        if (have := list(inspect.signature(getattr(cls, call)).parameters)) != want
    ]
    assert not bad, bad
    gen = Generation(max_tokens=8)
    assert (gen.stop, gen.temperature, gen.seed, gen.sampling) == ((), 0.0, 0, None)
    with pytest.raises(dataclasses.FrozenInstanceError):
        gen.max_tokens = 9  # type: ignore[misc]
    alone, worker = LaunchSlot("baseline", Path("logs")), WorkerSlot(1, 2, "key")
    assert (alone.server, alone.api_key, alone.port) == ("baseline", None, None)
    behind = LaunchSlot("baseline", Path("logs"), worker=worker)
    assert (behind.server, behind.api_key) == ("baseline-w1", "key")


def test_the_capabilities_are_declared_with_defaults() -> None:
    """What only some engines have is declared on the protocol with a default, so a bare engine
    or scorer answers it."""
    for protocol, names in CAPABILITIES.items():
        assert set(names) <= set(_declared(protocol)), protocol.__name__

    class BareScorer(Scorer):
        concurrency = 1

    class BareEngine(Engine):
        name = "bare"

    scorer, engine = BareScorer(), BareEngine()
    assert scorer.set_prompt_cache(False) is None and scorer.gateway_route() is None
    assert scorer.gateway_facts() is None and scorer.forced_path == "prefill"
    assert asyncio.run(scorer.flush_cache()) is None and asyncio.run(scorer.server_info()) == {}
    assert engine.resuming() is None and engine.concurrent_arms is False
    assert engine.default_gen_cap("smoke") is None and engine.request_timeout_s() > 0
    assert engine.pressure(None) is None  # type: ignore[arg-type]  # no log of its pool: nothing said


def test_every_registered_engine_is_built_and_answers_the_contract() -> None:
    """The built-ins by name, each behind a gateway (``workers`` = 2), and the fake."""
    cfg = EvalgateConfig()
    built: list[Engine] = [get_engine(name, cfg) for name in ENGINES]
    for name in ENGINES:
        section = getattr(cfg, name).model_copy(update={"workers": 2})  # cfg's sections by name
        built.append(get_engine(name, cfg.model_copy(update={name: section})))
    built.append(FakeEngine())
    assert sum(isinstance(e, GatewayEngine) for e in built) == len(ENGINES)
    for engine in built:
        assert Engine in type(engine).__mro__, type(engine).__name__
        assert engine.name and engine.default_gen_cap("smoke") in (None, *range(1, 1 << 20))
        engine.resuming()  # every engine takes it
    gateways = [e for e in built if isinstance(e, GatewayEngine)]
    assert all(g.resume for g in gateways)


def test_the_built_ins_declare_what_differs() -> None:
    from evalgate.engines.gateway._scorer import GatewayScorer
    from evalgate.engines.llamacpp._engine import LlamaCppEngine
    from evalgate.engines.llamacpp._scorer import LlamaCppScorer
    from evalgate.engines.sglang._engine import SGLangEngine
    from evalgate.engines.vllm._engine import VLLMEngine

    assert "set_prompt_cache" in vars(LlamaCppScorer) and "gateway_route" in vars(LlamaCppScorer)
    assert "gateway_facts" in vars(GatewayScorer) and "resuming" in vars(GatewayEngine)
    # the engines whose servers log their KV pool read it; llama.cpp (fixed slots) and smg do not
    assert "pressure" in vars(SGLangEngine) and "pressure" in vars(VLLMEngine)
    assert "pressure" not in vars(GatewayEngine) and "pressure" not in vars(LlamaCppEngine)


# -- the scan ---------------------------------------------------------------------------------

RECEIVERS = ("engine", "scorer", "handle", "through", "worker", "inner")
"""A receiver whose name holds one of these is an engine, a scorer or a server handle."""


def probes(source: str) -> list[str]:
    """``getattr(``/``hasattr(`` on an engine, scorer or handle (by the receiver's name), or of a
    declared call or capability by name, with line numbers."""
    declared = (
        set(ENGINE_CALLS)
        | set(SCORER_CALLS)
        | {"routed", "probe", "http", "resume", "cache_prompt", "workers"}
    )

    def counts(func: str, node: ast.Call) -> bool:
        if func not in ("getattr", "hasattr"):
            return False
        receiver, attr = named(node.args[0]), node.args[1]
        return (isinstance(attr, ast.Constant) and attr.value in declared) or any(
            r in receiver for r in RECEIVERS
        )

    return probe_calls(source, counts)


def test_nothing_probes_an_engine_or_a_scorer() -> None:
    """Acceptance (#45): no getattr/hasattr probe of an engine's capabilities outside api.py."""
    bad = {
        str(path.relative_to(PACKAGE.parent)): hits
        for path in sorted(PACKAGE.rglob("*.py"))
        if path != Path(API_FILE).resolve() and (hits := probes(path.read_text(encoding="utf-8")))
    }
    assert not bad, f"declare the call on Engine or Scorer (evalgate/engines/api.py) and call it: {bad}"


def test_the_scan_finds_what_it_forbids() -> None:
    source = """
getattr(handle, "workers", [])
hasattr(scorer, "cache_prompt")
getattr(getattr(through, "http", None), "gateway", None)
hasattr(engine, "resume")
getattr(thing, "routed", None)
getattr(self.inner, "capacity")
"""
    assert len(probes(source)) == 6
    fine = 'getattr(req, "baseline")\ngetattr(args, "func", None)\ngetattr(p, side).extra\n'
    assert probes(fine) == []


# -- engine names, written once ---------------------------------------------------------------

NOT_ENGINE_NAMES = {
    ("evalgate/store/manifest.py", "sglang"): "a pip distribution whose version is recorded",
    ("evalgate/store/manifest.py", "vllm"): "a pip distribution whose version is recorded",
    ("evalgate/store/throughput.py", "sglang"): "`bench --generator sglang`: SGLang's load generator",
    ("evalgate/throughput/sweep.py", "sglang"): "`bench --generator sglang`: SGLang's load generator",
    ("evalgate/cli/bench.py", "sglang"): "`bench --generator sglang`: SGLang's load generator",
    ("evalgate/config.py", "vllm"): "[vllm] generation_config's value: vLLM's own sampling defaults",
}
"""(file, string) -> why that string there is no engine's name."""


def engine_names(source: str) -> list[tuple[int, str]]:
    """Every string constant in ``source`` that is exactly an engine's name, with its line."""
    return [
        (node.lineno, node.value)
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.Constant) and node.value in ENGINES
    ]


def test_engine_names_are_written_once() -> None:
    """Acceptance (#45): the names are ``evalgate.engines.ENGINES`` (``EngineName``); every other
    module outside evalgate/engines/ reads them from there."""
    bad, seen = [], set()
    for path in sorted(PACKAGE.rglob("*.py")):
        where = str(path.relative_to(PACKAGE.parent))
        if ENGINES_DIR in path.parents:
            continue
        for n, v in engine_names(path.read_text(encoding="utf-8")):
            seen.add((where, v))
            if (where, v) not in NOT_ENGINE_NAMES:
                bad.append(f"{where}:{n}: {v!r}")
    assert not bad, f"read the names from evalgate.engines (ENGINES, DEFAULT_ENGINE): {bad}"
    assert set(NOT_ENGINE_NAMES) <= seen, "drop the exceptions that no longer occur"
    assert engine_names('x = "vllm"\nengine: str = "llamacpp"\n"sglang-cpu"\n') == [
        (1, "vllm"),
        (2, "llamacpp"),
    ]
