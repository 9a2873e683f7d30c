"""Errors that name their cause and their fix, and carry the exit code CI should see."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

M = TypeVar("M", bound=BaseModel)

__all__ = [
    "ConfigError",
    "EvalgateError",
    "InfraError",
    "Invalid",
    "InvalidResponse",
    "ItemErrors",
    "PreflightError",
    "ServerDied",
    "ServerStartError",
    "first_invalid",
    "invalid_input",
    "validated",
]


class EvalgateError(Exception):
    """Base error: ``str(err)`` is the cause, ``fix`` what to do about it, ``detail`` extra lines."""

    exit_code = 3

    def __init__(self, cause: str, *, fix: str = "", detail: str = "") -> None:
        super().__init__(cause)
        self.cause = cause
        self.fix = fix
        self.detail = detail

    def render(self) -> str:
        lines = [f"error: {self.cause}"]
        if self.fix:
            lines.append(f"fix: {self.fix}")
        if self.detail:
            lines.append(self.detail.rstrip())
        return "\n".join(lines)


class ConfigError(EvalgateError):
    """Bad input from the user: exit 2, nothing launched."""

    exit_code = 2


class InfraError(EvalgateError):
    """Infrastructure failed (servers, network, preflight): exit 3, records kept for --resume."""

    exit_code = 3


class ServerStartError(InfraError):
    """A server did not become ready."""


class ServerDied(InfraError):
    """A server that was ready has gone away mid-run."""


class PreflightError(InfraError):
    """A server answered, but not in a way that can be scored correctly."""


class InvalidResponse(PreflightError):
    """One answer that cannot be scored (a NaN or positive logprob, no choices, null text, a body
    that is not JSON). The loop retries the item like a failed request, then records it as an
    errored item: never a score."""


class ItemErrors(InfraError):
    """Some items failed after retries; scoring them would be a silent wrong score."""


@dataclass(frozen=True)
class Invalid:
    """The first thing pydantic refused in a document or a set of flags."""

    where: str
    """Its dotted location (``suites.gsm8k.n``), or ``(top level)``."""
    msg: str
    """pydantic's words for it."""
    kind: str
    """pydantic's error type (``extra_forbidden``, ``missing``...), for rules keyed on it."""


def first_invalid(exc: ValidationError) -> Invalid:
    """The first of ``exc``'s errors: the one a user fixes first (the rest are often its echo)."""
    first = exc.errors()[0]
    where = ".".join(str(p) for p in first["loc"]) or "(top level)"
    return Invalid(where, first["msg"], first["type"])


def invalid_input(
    exc: ValidationError, *, at: Callable[[str], str], fix: str | Callable[[str], str]
) -> ConfigError:
    """``exc`` as the exit-2 error every reader of user input raises: ``at(where)`` names the
    file, flag or option and the key, pydantic's message follows, ``fix`` (or ``fix(where)``)
    says what to do."""
    first = first_invalid(exc)
    return ConfigError(
        f"{at(first.where)}: {first.msg}", fix=fix if isinstance(fix, str) else fix(first.where)
    )


def validated(
    model: type[M],
    data: Any,
    *,
    at: Callable[[str], str],
    fix: str | Callable[[str], str],
    context: Any = None,
) -> M:
    """``data`` as a ``model``, or the exit-2 error ``invalid_input`` makes of its first problem:
    the one way user input (a config, a manifest, suite options, flags) becomes a model."""
    try:
        return model.model_validate(data, context=context)
    except ValidationError as exc:
        raise invalid_input(exc, at=at, fix=fix) from exc
