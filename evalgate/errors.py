"""Errors that name their cause and their fix, and carry the exit code CI should see."""

from __future__ import annotations

__all__ = [
    "ConfigError",
    "EvalgateError",
    "InfraError",
    "InvalidResponse",
    "ItemErrors",
    "PreflightError",
    "ServerDied",
    "ServerStartError",
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
