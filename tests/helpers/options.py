"""An engine's option list as its own parser declares it (a fixture file written from the engine's
source), and the check that every flag evalgate passes is on it, for the SGLang and vLLM parser tests."""

from __future__ import annotations

from pathlib import Path

__all__ = ["check_flags", "read_options"]

Options = dict[str, set[str] | None]


def read_options(path: Path) -> Options:
    """Option -> its allowed values (None: any value; empty set: a flag without a value), from lines
    ``option<TAB>choice,choice`` (``<flag>`` for a flag; ``#`` comments)."""
    out: Options = {}
    for line in path.read_text().splitlines():
        if line.startswith("#") or not line.strip():
            continue
        option, _, choices = line.partition("\t")
        out[option] = set() if choices == "<flag>" else (set(choices.split(",")) if choices else None)
    return out


def check_flags(argv: list[str], options: Options, server: str, *, start: int = 0) -> None:
    """Every flag of ``argv`` from ``start`` on is one of ``options``, each value one it allows."""
    i = start
    while i < len(argv):
        flag = argv[i]
        assert flag in options, f"{server} has no option {flag}"
        allowed = options[flag]
        if allowed == set():
            i += 1
            continue
        value = argv[i + 1]
        assert allowed is None or value in allowed, f"{flag} {value} is not one of {sorted(allowed or [])}"
        i += 2
