"""Engines: how each inference server is launched and scored. Chosen by name, never by scanning.

The contract is ``api`` (``Engine``, ``Scorer``); each engine is one package holding its launch,
scorer, diagnosis and capacity code: ``llamacpp``, ``sglang``, ``vllm``, ``attach`` for servers
that are already running, and ``gateway``, which puts N servers of any of them behind one smg
per arm (``workers = N`` in the engine's section). ``fake`` is the loop's scripted test double,
which a test registers by name (``register_engine``) for as long as it runs. An engine takes its
section of evalgate.toml as it is (``LlamaCppConfig``, ``SGLangConfig``, ``VLLMConfig``).

How to add one: write ``engines/<name>/`` with an ``Engine`` and a ``Scorer`` that name the
protocols of ``api`` as their bases (a call only some engines need has its default there, so
override only what differs); add the name to ``EngineName``, its config section to
``evalgate.config`` and a factory to ``REGISTRY`` below (through ``_arms_of``, so ``workers``
works); then ``tests/engines/test_contract.py`` builds it and checks every declared call. Read
the server's own source for what it answers before relying on it, and record what it reports
about itself in the manifest (``store.manifest.ServerFacts``).
"""

from __future__ import annotations

import contextlib
import difflib
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Literal, get_args

from evalgate.engines._launcher import ServerHandle, free_port, require_input_files, run_process
from evalgate.engines._scoring import check_chat, first_choice
from evalgate.engines.api import Engine, Scorer
from evalgate.errors import ConfigError

if TYPE_CHECKING:
    from evalgate.config import EvalgateConfig

__all__ = [
    "DEFAULT_ENGINE",
    "ENGINES",
    "TOOL_PARSING_ENGINES",
    "Engine",
    "EngineFactory",
    "EngineName",
    "EngineRegistry",
    "Scorer",
    "ServerHandle",
    "check_chat",
    "first_choice",
    "free_port",
    "get_engine",
    "register_engine",
    "registered_engine",
    "require_input_files",
    "run_process",
    "unregister_engine",
]

EngineName = Literal["llamacpp", "sglang", "vllm"]
"""The engines ``--engine`` launches (attach mode is chosen by giving URLs instead): the one list
of their names, which evalgate.toml's sections, ``--protocol`` and the rest read
(``tests/engines/test_contract.py`` finds any other)."""
ENGINES: tuple[EngineName, ...] = get_args(EngineName)
DEFAULT_ENGINE: EngineName = "llamacpp"
"""The CPU engine, launched when none is named."""
TOOL_PARSING_ENGINES: frozenset[EngineName] = frozenset({"llamacpp"})
"""Engines whose server always turns a model's output into ``tool_calls`` with its chat template
(llama-server's --jinja): the tool_calls suite prefills there and needs no parsed-call preflight."""

EngineFactory = Callable[["EvalgateConfig"], Engine]
"""Builds an engine from the whole config (each takes its own section)."""


def _arms_of(engine: Engine, workers: int, deterministic: bool, cfg: EvalgateConfig) -> Engine:
    """``engine`` as is, or (``workers`` > 1 in its section) each arm as that many of its servers
    behind one smg gateway (engines/gateway)."""
    if workers <= 1:
        return engine
    from evalgate.engines.gateway import GatewayEngine

    return GatewayEngine(engine, workers=workers, config=cfg.gateway, deterministic=deterministic)


def _llamacpp(cfg: EvalgateConfig) -> Engine:
    from evalgate.engines.llamacpp import LlamaCppEngine

    c = cfg.llamacpp
    return _arms_of(LlamaCppEngine(c), c.workers, c.deterministic, cfg)


def _sglang(cfg: EvalgateConfig) -> Engine:
    from evalgate.engines.sglang import SGLangCPUEngine, SGLangEngine

    c = cfg.sglang
    engine = SGLangCPUEngine(c) if c.device == "cpu" else SGLangEngine(c)  # CPU: engines/sglang/_cpu.py
    return _arms_of(engine, c.workers, c.deterministic, cfg)


def _vllm(cfg: EvalgateConfig) -> Engine:
    from evalgate.engines.vllm import VLLMCPUEngine, VLLMEngine

    c = cfg.vllm
    engine = VLLMCPUEngine(c) if c.device == "cpu" else VLLMEngine(c)  # CPU: engines/vllm/_cpu.py
    return _arms_of(engine, c.workers, c.deterministic, cfg)


class EngineRegistry:
    """Engine name -> factory: the built-ins, and any engine registered for a while (a test's
    scripted fake). An object rather than a module dict or a monkeypatched ``get_engine``: the
    CLI is entered by argv, so a run can reach an engine only by its name, and every change to
    the names goes through ``register``/``unregister``, which refuse to shadow a built-in or a
    name already taken. ``registered`` scopes one registration to a ``with`` block (the tests'
    ``use`` fixture holds it for one test), so an engine never outlives its test, and one that
    leaked would make the next registration of its name fail loudly, not answer silently."""

    def __init__(self, builtins: dict[str, EngineFactory]) -> None:
        self._builtins = dict(builtins)
        self._extra: dict[str, EngineFactory] = {}

    def names(self) -> list[str]:
        return [*self._builtins, *self._extra]

    def register(self, name: str, factory: EngineFactory) -> None:
        if name in self._builtins or name in self._extra:
            raise ValueError(f"engine {name!r} is already registered")
        self._extra[name] = factory

    def unregister(self, name: str) -> None:
        if name not in self._extra:
            raise ValueError(f"engine {name!r} was not registered (built-ins stay)")
        del self._extra[name]

    @contextlib.contextmanager
    def registered(self, name: str, factory: EngineFactory) -> Iterator[None]:
        """``name`` builds with ``factory`` inside the block, and is gone after it."""
        self.register(name, factory)
        try:
            yield
        finally:
            self.unregister(name)

    def get(self, name: str | None, cfg: EvalgateConfig) -> Engine:
        """The engine ``name`` (default: llama.cpp, the CPU engine), configured from ``cfg``."""
        name = name or DEFAULT_ENGINE
        factory = self._builtins.get(name) or self._extra.get(name)
        if factory is not None:
            return factory(cfg)
        near = difflib.get_close_matches(name, self.names(), n=1)
        hint = f"did you mean {near[0]}? " if near else ""
        raise ConfigError(f"unknown engine {name!r}", fix=f"{hint}known engines: {', '.join(self.names())}")


REGISTRY = EngineRegistry({"llamacpp": _llamacpp, "sglang": _sglang, "vllm": _vllm})
"""The one registry ``--engine`` names are looked up in."""


def get_engine(name: str | None, cfg: EvalgateConfig) -> Engine:
    """The engine ``name`` (default: llama.cpp, the CPU engine), configured from ``cfg``."""
    return REGISTRY.get(name, cfg)


def register_engine(name: str, factory: EngineFactory) -> None:
    """Make ``--engine name`` build with ``factory`` until ``unregister_engine(name)``."""
    REGISTRY.register(name, factory)


def unregister_engine(name: str) -> None:
    REGISTRY.unregister(name)


def registered_engine(name: str, factory: EngineFactory) -> contextlib.AbstractContextManager[None]:
    """``register_engine`` for the length of a ``with`` block."""
    return REGISTRY.registered(name, factory)
