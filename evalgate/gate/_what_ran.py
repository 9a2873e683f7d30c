"""The verdict's "what ran" table and its top-of-report warnings, read from the manifest: each
arm's ``server.provenance`` (what its server reported it ran), the launch settings, and the
settings the user declared may differ (``--allow-diff``). Pure: the rules are in
evalgate/store/provenance.py; this module only finds their inputs in a run folder's manifest."""

from __future__ import annotations

from typing import Any

from evalgate.store.manifest import Manifest
from evalgate.store.provenance import (
    Provenance,
    WhatRanRow,
    baseline_is_fp8,
    declared_differences,
    fallbacks,
    is_fp8,
    what_ran,
)

__all__ = ["baseline_fp8_note", "pressure_row", "provenance_of", "what_ran_for"]

KV_FLAGS = ("--kv-cache-dtype", "-ctk")
SCALE_FLAGS = ("--quantization-param-path", "--kv-scales-file")


def provenance_of(m: Manifest, arm: str) -> Provenance | None:
    """What the arm's server reported it ran; None when the run folder has no record of it."""
    info = m.arms.get(arm)
    return info.server.provenance if info is not None else None


def what_ran_for(m: Manifest) -> tuple[list[WhatRanRow], list[str]]:
    """The side-by-side rows, and the warnings for the top of the report: the candidate's
    fallbacks, then the declared differences."""
    b, c = provenance_of(m, "baseline"), provenance_of(m, "candidate")
    args = _args(m, "candidate")
    variant = m.variants.get("candidate")
    fp8_asked = (variant is not None and variant.kv == "fp8") or any(is_fp8(args.get(f)) for f in KV_FLAGS)
    info = m.arms.get("candidate")
    scales = info.server.kv_scales if info is not None else None
    given = any(f in args for f in SCALE_FLAGS) or (
        scales is not None and bool(scales.file or scales.k_scale)
    )
    warnings = fallbacks(b, c, fp8_kv_asked=fp8_asked, scales_given=given)
    declared = declared_differences(list(m.request.allow_diff), _sides(m))
    pressed = pressure_row(m)
    return what_ran(b, c) + ([pressed] if pressed else []), warnings + ([declared] if declared else [])


def pressure_row(m: Manifest) -> WhatRanRow | None:
    """Each arm's KV pool pressure while it served, summed over its launches (``server.pool_pressure``,
    from the server's own log): a run whose pool never filled never ran retraction or preemption.
    Shown, not compared (one arm may retract where the other does not: FP8 holds more tokens)."""
    sides = []
    for arm in ("baseline", "candidate"):
        info = m.arms.get(arm)
        entries = (info.server.pool_pressure if info is not None else None) or []
        if not entries:
            sides.append("not read")
            continue
        kind = str(entries[0].get("kind", "retractions"))
        events = sum(int(e.get("events") or 0) for e in entries)
        requests = sum(int(e.get("requests") or 0) for e in entries)
        peaks = [float(e["peak_usage"]) for e in entries if e.get("peak_usage") is not None]
        peak = f", peak pool use {max(peaks):.0%}" if peaks else ""
        sides.append(f"{kind}: {events} ({requests} requests){peak}" if events else f"{kind}: none{peak}")
    if sides == ["not read", "not read"]:
        return None
    return WhatRanRow("pool_pressure", "KV pool pressure (its log)", sides[0], sides[1], differs=False)


def baseline_fp8_note(m: Manifest) -> list[str]:
    """#44: the baseline's server reports an FP8 KV cache under ``auto``: no full-precision reference."""
    args = _args(m, "baseline")
    flag = next((str(args[f]) for f in KV_FLAGS if args.get(f) is not None), None)
    if baseline_is_fp8(provenance_of(m, "baseline"), kv_flag=flag):
        return ["baseline precision: FP8, not a full-precision reference"]
    return []


def _args(m: Manifest, arm: str) -> dict[str, Any]:
    launch = m.launch.get(arm)
    return dict(launch.args) if launch is not None else {}


def _sides(m: Manifest) -> dict[str, tuple[Any, Any]]:
    """Every launch flag, variable and attached server setting, as (baseline, candidate)."""
    per_arm: list[dict[str, Any]] = []
    for arm in ("baseline", "candidate"):
        values: dict[str, Any] = {}
        launch = m.launch.get(arm)
        if launch is not None:
            values |= {k: "(flag)" if v is None else v for k, v in launch.args}
            values |= dict(launch.env)
        info = m.arms.get(arm)
        servers = (info.server.servers if info is not None else None) or {}
        for fp in list(servers.values())[:1]:  # an arm's servers are one deployment
            if isinstance(fp, dict):
                values |= {k: v for k, v in fp.items() if not isinstance(v, dict)}
                values |= dict(fp.get("server_args") or {})
        per_arm.append(values)
    b, c = per_arm
    return {k: (b.get(k), c.get(k)) for k in {**b, **c}}
