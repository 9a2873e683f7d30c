"""Named quantization variants and the rule that a pair may differ only in quantization.

A variant names *what* is quantized (weights, KV cache); an engine turns it into launch
settings. Composition (``int4+fp8kv``) merges parts that touch different things.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from evalgate.errors import ConfigError

__all__ = [
    "BUILTIN_VARIANTS",
    "LaunchSpec",
    "Variant",
    "check_only_quantization",
    "parse_variant",
    "require_only_quantization",
]

WEIGHTS = ("bf16", "fp8", "int4")
KV = ("bf16", "fp8")


@dataclass(frozen=True)
class Variant:
    """A weights precision and a KV-cache precision, plus user overrides from evalgate.toml."""

    name: str
    weights: str = "bf16"
    kv: str = "bf16"
    model: str | None = None
    """Explicit weights checkpoint (a path); None lets the engine pick its default for ``weights``."""
    args: tuple[tuple[str, str | None], ...] = ()
    """Extra engine flags, applied after the engine's own (so they override)."""
    env: tuple[tuple[str, str], ...] = ()


# What each built-in part changes; ``bf16`` is the identity.
_PARTS: dict[str, dict[str, str]] = {
    "bf16": {},
    "fp8kv": {"kv": "fp8"},
    "fp8": {"weights": "fp8"},
    "int4": {"weights": "int4"},
}
BUILTIN_VARIANTS: tuple[str, ...] = tuple(_PARTS)


def parse_variant(name: str, custom: Mapping[str, Variant] | None = None) -> Variant:
    """Resolve ``name`` (a built-in, a config-defined variant, or ``a+b``) into a Variant."""
    custom = dict(custom or {})
    if name in custom:
        return custom[name]
    parts = [p.strip() for p in name.split("+") if p.strip()]
    if not parts:
        raise ConfigError(f"empty variant name {name!r}", fix="use one of " + ", ".join(BUILTIN_VARIANTS))
    fields: dict[str, str] = {}
    for part in parts:
        if part not in _PARTS:
            known = list(_PARTS) + list(custom)
            near = difflib.get_close_matches(part, known, n=1)
            hint = f"did you mean {near[0]!r}? " if near else ""
            raise ConfigError(
                f"unknown variant {part!r}",
                fix=f"{hint}known variants: {', '.join(known)}; define others in evalgate.toml [variants.NAME]",
            )
        for key, value in _PARTS[part].items():
            if key in fields and fields[key] != value:
                raise ConfigError(
                    f"variant {name!r} sets {key} twice ({fields[key]} and {value})",
                    fix="compose parts that change different things, e.g. int4+fp8kv",
                )
            fields[key] = value
    return Variant(name=name, **fields)


@dataclass(frozen=True)
class LaunchSpec:
    """Everything that decides how one arm's server is started, in comparable form."""

    engine: str
    model: str
    args: tuple[tuple[str, str | None], ...]
    env: tuple[tuple[str, str], ...] = ()
    quant_keys: frozenset[str] = field(default_factory=frozenset)
    """Arg keys that may legitimately differ between the arms (quantization and kernels)."""

    def as_dict(self) -> dict[str, str | None]:
        out: dict[str, str | None] = {"engine": self.engine, "model": self.model}
        out.update({k: v for k, v in self.args})
        out.update({f"env:{k}": v for k, v in self.env})
        return out


def check_only_quantization(
    baseline: LaunchSpec, candidate: LaunchSpec, *, allow: Iterable[str] = ()
) -> list[tuple[str, str | None, str | None]]:
    """Return the forbidden differences between two launch specs (empty when the pair is fair).

    The model path may differ (a quantized checkpoint); its tokenizer is checked at preflight.
    """
    allowed = set(baseline.quant_keys) | set(candidate.quant_keys) | {"model"} | set(allow)
    a, b = baseline.as_dict(), candidate.as_dict()
    diffs = []
    for key in sorted(set(a) | set(b)):
        if key in allowed:
            continue
        if a.get(key, _MISSING) != b.get(key, _MISSING):
            diffs.append((key, _show(a.get(key, _MISSING)), _show(b.get(key, _MISSING))))
    return diffs


def require_only_quantization(
    baseline: LaunchSpec,
    candidate: LaunchSpec,
    *,
    allow: Iterable[str] = (),
    what: str = "answers",
    recorded: bool = True,
) -> None:
    """Refuse (exit 2, with the diff) a pair whose launch settings differ beyond quantization."""
    diffs = check_only_quantization(baseline, candidate, allow=allow)
    if not diffs:
        return
    table = "\n".join(f"  {k}: baseline={a!r} candidate={b!r}" for k, a, b in diffs)
    raise ConfigError(
        f"the pair differs in more than quantization ({len(diffs)} setting(s)), so a difference "
        f"in {what} could not be blamed on quantization",
        fix="make the variants equal in these settings, or pass --allow-diff KEY for each"
        + (" (recorded in the report)" if recorded else ""),
        detail="differences:\n" + table,
    )


_MISSING = "<unset>"


def _show(value: str | None) -> str | None:
    return "<flag>" if value is None else value


def variant_from_config(name: str, table: Mapping[str, object], builtins: Mapping[str, Variant]) -> Variant:
    """Build a config-defined variant: ``base`` names a built-in (default bf16) it starts from."""
    base_name = str(table.get("base", "bf16"))
    base = builtins.get(base_name) or parse_variant(base_name)
    args = table.get("args", {}) or {}
    env = table.get("env", {}) or {}
    if not isinstance(args, Mapping) or not isinstance(env, Mapping):
        raise ConfigError(f"[variants.{name}] args and env must be tables", fix="e.g. args = {'-c' = '8192'}")
    return Variant(
        name=name,
        weights=str(table.get("weights", base.weights)),
        kv=str(table.get("kv", base.kv)),
        model=str(table["model"]) if table.get("model") else base.model,
        args=base.args + tuple((str(k), None if v is True else str(v)) for k, v in args.items()),
        env=base.env + tuple((str(k), str(v)) for k, v in env.items()),
    )
