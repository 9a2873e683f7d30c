"""What each arm's server actually ran, as the server itself reported it (#45).

A launch flag says what was asked; a server may quietly run something else: an FP8 KV cache
that falls back to BF16, KV scales of 1.0 where a scales file was given, another attention
backend than the baseline's. ``Provenance`` holds what the running server said, read by its
engine from the server's own log and info endpoints after readiness (``Engine.provenance``), and
is recorded per arm as ``server.provenance`` in the manifest. Every value is a short string, or
None where the server did not report it (an old run folder has no record at all).

The pure functions here compare the arms (``what_ran``), name fallbacks (``fallbacks``), parse
and check what the user declared must run (``parse_expect``, ``expectation_errors``), and name
the launch settings the user allowed to differ (``declared_differences``).
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping, Sequence
from typing import Any

from pydantic import BaseModel, ConfigDict, Field
from pydantic import dataclasses as pyd

from evalgate.errors import ConfigError

__all__ = [
    "FIELDS",
    "Provenance",
    "WhatRanRow",
    "baseline_is_fp8",
    "declared_differences",
    "expectation_errors",
    "fallbacks",
    "is_fp8",
    "kv_scales_fact",
    "parse_expect",
    "what_ran",
]

EXPECT_ARMS = ("baseline", "candidate", "aa")


class Provenance(BaseModel):
    """One arm's server, as it reported itself; None: not reported (or not read)."""

    model_config = ConfigDict(extra="allow", frozen=True)
    kv_cache_dtype: str | None = Field(
        None,
        description="The KV cache's element type as the server allocated it (f16, q8_0, bfloat16, fp8_e4m3).",
    )
    kv_scales: str | None = Field(
        None,
        description="How FP8/integer KV values are scaled: none (a float cache), per-block (llama.cpp's "
        "q8_0/q4_0 blocks), file, checkpoint, or 1.0 (no scales: a fallback where scales were given).",
    )
    attention_backend: str | None = Field(
        None,
        description="The attention implementation the server chose (flash_attn, torch_native, TORCH_SDPA).",
    )
    weight_format: str | None = Field(
        None,
        description="The weights as loaded: the GGUF file type (Q4_0, F16), or the dtype and the "
        "quantization method (bfloat16; fp8 (compressed-tensors)).",
    )
    linear_kernel: str | None = Field(
        None, description="The matmul path for the weights (llama.cpp's CPU_REPACK, vLLM's linear kernel)."
    )
    batch_invariant: str | None = Field(
        None, description="on: batch-invariant (deterministic) kernels; off: results may move with the batch."
    )
    speculative: str | None = Field(None, description="off, or the speculative decoding method.")
    source: str | None = Field(
        None, description="Where these were read (the server's log, its info endpoint)."
    )

    def reported(self) -> dict[str, str]:
        """The facts the server reported (``FIELDS`` order), without the source."""
        return {k: v for k in FIELDS if (v := getattr(self, k)) is not None}

    def label(self) -> str | None:
        """``Q4_0 weights, q8_0 KV``: an attached arm's label, from what its server reports;
        None when it reports neither."""
        parts = []
        if self.weight_format:
            parts.append(f"{self.weight_format} weights")
        if self.kv_cache_dtype:
            parts.append(f"{self.kv_cache_dtype} KV")
        return ", ".join(parts) or None


FIELDS: dict[str, str] = {
    "kv_cache_dtype": "KV cache dtype",
    "kv_scales": "KV scales",
    "attention_backend": "attention backend",
    "weight_format": "weight format",
    "linear_kernel": "linear kernel",
    "batch_invariant": "batch-invariant",
    "speculative": "speculative decoding",
}
"""The reported facts, in the order the report shows them, with their row names."""

NOT_REPORTED = "not reported"


@pyd.dataclass(frozen=True)
class WhatRanRow:
    """One fact of the "what ran" table, both arms as their servers reported it."""

    key: str
    label: str
    baseline: str
    candidate: str
    differs: bool


def what_ran(baseline: Provenance | None, candidate: Provenance | None) -> list[WhatRanRow]:
    """Side by side, every fact either arm reported; none when neither arm recorded provenance
    (a run folder from before it was read). A fact one arm did not report is "not reported"
    and does not count as a difference: nothing says it differs."""
    if baseline is None and candidate is None:
        return []
    b, c = (p.reported() if p is not None else {} for p in (baseline, candidate))
    rows = []
    for key, label in FIELDS.items():
        if key not in b and key not in c:
            continue
        bv, cv = b.get(key, NOT_REPORTED), c.get(key, NOT_REPORTED)
        rows.append(WhatRanRow(key, label, bv, cv, key in b and key in c and bv != cv))
    return rows


def is_fp8(dtype: str | None) -> bool:
    """An FP8 element type as the engines spell it (fp8_e4m3, float8_e4m3fn, fp8)."""
    return bool(dtype) and str(dtype).lower().replace("float8", "fp8").startswith("fp8")


def kv_scales_fact(kv: str | None, said: object, known: tuple[str, ...]) -> str | None:
    """``Provenance.kv_scales`` of a KV cache of element type ``kv``: "none" for a float cache; for
    an FP8 one what the engine's scales record ``said`` when it is one of the ``known`` sources,
    else None (not shown); None when the cache type is unknown."""
    if kv is None:
        return None
    if not is_fp8(kv):
        return "none"
    return str(said) if said in known else None


_WIDE = ("f16", "bf16", "f32", "float16", "bfloat16", "float32", "half", "float")


def fallbacks(
    baseline: Provenance | None, candidate: Provenance | None, *, fp8_kv_asked: bool, scales_given: bool
) -> list[str]:
    """What the candidate's server ran instead of what was asked: a 16/32-bit cache where an FP8
    one was asked, scales of 1.0 where scales were given, another attention backend than the
    baseline's. Each line names both values; none when nothing was reported."""
    if candidate is None:
        return []
    out = []
    kv = candidate.kv_cache_dtype
    if fp8_kv_asked and kv is not None and kv.lower() in _WIDE:
        out.append(f"fallback: the candidate asked for an FP8 KV cache but its server reports a {kv} cache")
    if scales_given and candidate.kv_scales == "1.0":
        out.append("fallback: KV scales were given to the candidate but its server reports scales of 1.0")
    b_attn = baseline.attention_backend if baseline is not None else None
    c_attn = candidate.attention_backend
    if b_attn and c_attn and b_attn != c_attn:
        out.append(
            f"fallback: the candidate's attention backend is {c_attn}, the baseline's {b_attn}: "
            "the pair differs in attention kernels as well as in quantization"
        )
    return out


def baseline_is_fp8(baseline: Provenance | None, *, kv_flag: str | None) -> bool:
    """The baseline's server reports an FP8 KV cache though its KV dtype was left to the model
    (``auto``, or no flag): an FP8 checkpoint's cache, no full-precision reference."""
    if baseline is None or not is_fp8(baseline.kv_cache_dtype):
        return False
    return kv_flag is None or kv_flag.lower() == "auto"


def parse_expect(values: Sequence[str]) -> dict[str, dict[str, str]]:
    """``--expect candidate.kv_cache_dtype=fp8_e4m3`` (repeatable) -> ``{"candidate":
    {"kv_cache_dtype": "fp8_e4m3"}}``; an unknown arm or fact is refused, naming the nearest."""
    out: dict[str, dict[str, str]] = {}
    for text in values:
        spec, eq, value = text.partition("=")
        arm, dot, key = spec.strip().partition(".")
        if not (eq and dot and value.strip()):
            raise ConfigError(
                f"--expect {text!r} is not ARM.FACT=VALUE",
                fix="e.g. --expect candidate.kv_cache_dtype=fp8_e4m3",
            )
        for name, known in ((arm, EXPECT_ARMS), (key.strip(), tuple(FIELDS))):
            if name not in known:
                near = difflib.get_close_matches(name, known, n=1)
                raise ConfigError(
                    f"--expect {text!r}: {name!r} is not one of {', '.join(known)}",
                    fix=f"did you mean {near[0]}?" if near else f"use one of {', '.join(known)}",
                )
        out.setdefault(arm, {})[key.strip()] = value.strip()
    return out


def _matches(expected: str, reported: str) -> bool:
    """Equal ignoring case, or a family that names the reported type (``fp8`` for ``fp8_e4m3``)."""
    e, r = expected.lower(), reported.lower()
    return e == r or r.startswith(e + "_")


def expectation_errors(arm: str, expected: Mapping[str, str], provenance: Provenance) -> list[str]:
    """Each declared fact of ``arm`` its server contradicts or does not report, naming both values."""
    out = []
    for key, want in expected.items():
        got = getattr(provenance, key, None)
        flag = f"--expect {arm}.{key}={want}"
        if got is None:
            out.append(
                f"the {arm}'s server does not report its {FIELDS[key]}, so {flag} could not be confirmed"
            )
        elif not _matches(want, got):
            out.append(f"the {arm}'s server reports {FIELDS[key]} {got!r}, but {flag} expected {want!r}")
    return out


def declared_differences(allowed: Sequence[str], sides: Mapping[str, tuple[Any, Any]]) -> str | None:
    """``declared differences: tp_size 2 -> 1 (--allow-diff)``: each allowed setting with both
    arms' values where ``sides`` has them (launch flags, env, attached settings); None when the
    user allowed nothing."""
    if not allowed:
        return None
    parts = []
    for key in allowed:
        found = sides.get(key) or sides.get(key.lstrip("-")) or sides.get(f"--{key.replace('_', '-')}")
        if found is not None and found[0] != found[1]:
            parts.append(f"{key} {_show(found[0])} -> {_show(found[1])}")
        else:
            parts.append(f"{key} (no difference recorded)" if found is not None else key)
    return "declared differences: " + ", ".join(parts) + " (--allow-diff)"


def _show(value: Any) -> str:
    return "(absent)" if value is None else str(value)
