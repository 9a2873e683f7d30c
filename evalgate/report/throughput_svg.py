"""The report's throughput section: tables of throughput.json and an inline SVG of output tok/s
against concurrency for both arms.

Hand-written SVG for the same reasons as the forest plot (one offline file, byte-stable). The
x axis is categorical (the levels as run), so 1, 4, 8, 16, 32, 64 spread evenly. Returns plain
headers and rows; ``_view`` wraps them in its ``Section`` (no import back, so no cycle).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from markupsafe import Markup, escape

from evalgate.report._format import clean
from evalgate.report._plot import chart_head, legend

__all__ = ["capacity_table", "level_table", "settings_note", "throughput_chart"]

_W, _H = 720, 320
_X0, _X1, _Y0, _Y1 = 70, 560, 40, 260  # plot area: left, right, top, bottom
_ARMS = (("baseline", "#57606a", "6 4"), ("candidate", "#0969da", ""))


def _f(x: Any, digits: int = 1) -> str:
    return "—" if x is None else f"{float(x):,.{digits}f}"


def _lat(row: Mapping[str, Any], kind: str) -> str:
    p50, p99 = row.get(f"{kind}_p50_ms"), row.get(f"{kind}_p99_ms")
    return "—" if p50 is None else f"{_f(p50)}/{_f(p99)}"


def _x(r: Any) -> str:
    return "—" if r is None else f"{float(r):.2f}\u2060×"  # word joiner: never wrap before the ×


def _arm_label(doc: Mapping[str, Any], arm: str) -> str:
    variant = ((doc.get("arms") or {}).get(arm) or {}).get("variant")
    return f"{arm} ({variant})" if variant else arm


def level_table(doc: Mapping[str, Any]) -> tuple[list[str], list[list[str]]]:
    """One row per concurrency level: both arms' tok/s and their ratio, then latency and errors."""
    arms = doc.get("arms") or {}
    rows_by = {
        arm: {int(r["concurrency"]): r for r in (arms.get(arm) or {}).get("levels") or []}
        for arm in ("baseline", "candidate")
    }
    headers = [
        "concurrency", "baseline tok/s", "candidate tok/s", "ratio", "req/s (b / c)",
        "TTFT p50/p99 ms (b · c)", "ITL p50/p99 ms (b · c)", "errors (b / c)", "status (b / c)",
    ]  # fmt: skip
    rows = []
    for level in doc.get("levels") or []:
        c = int(level["concurrency"])
        b, k = rows_by["baseline"].get(c, {}), rows_by["candidate"].get(c, {})
        rows.append(
            [
                str(c),
                _f(level.get("baseline_tok_s")),
                _f(level.get("candidate_tok_s")),
                _x(level.get("ratio")),
                f"{_f(b.get('request_s'), 2)} / {_f(k.get('request_s'), 2)}",
                f"{_lat(b, 'ttft')} · {_lat(k, 'ttft')}",
                f"{_lat(b, 'itl')} · {_lat(k, 'itl')}",
                f"{_errors(b)} / {_errors(k)}",
                clean(f"{b.get('status', 'not run')} / {k.get('status', 'not run')}"),
            ]
        )
    return headers, rows


def _errors(row: Mapping[str, Any]) -> str:
    if not row or row.get("status") == "skipped":
        return "—"
    return str(sum(int(row.get(k) or 0) for k in ("errors", "rejected", "queued")))


def capacity_table(doc: Mapping[str, Any]) -> tuple[list[str], list[list[str]]]:
    """KV capacity per arm as each engine reported it, the load limit found, and the ratios."""
    cap = doc.get("capacity") or {}
    b, k = cap.get("baseline") or {}, cap.get("candidate") or {}
    arms = doc.get("arms") or {}

    def density(c: Mapping[str, Any]) -> float | None:
        return c["kv_tokens"] / c["kv_mib"] if c.get("kv_tokens") and c.get("kv_mib") else None

    def limit(arm: str) -> str:
        data = arms.get(arm) or {}
        if data.get("limit") is not None:
            why = f" ({data['limit_reason']})" if data.get("limit_reason") else ""
            return clean(f"concurrency {data['limit']}{why}")
        run = data.get("levels_run") or []
        return f"none up to {max(run)}" if run else "—"

    rows = [
        [
            "KV pool (tokens)",
            _f(b.get("kv_tokens"), 0),
            _f(k.get("kv_tokens"), 0),
            _x(cap.get("kv_tokens_ratio")),
        ],
        ["KV memory (MiB)", _f(b.get("kv_mib")), _f(k.get("kv_mib")), "—"],
        ["KV tokens per MiB", _f(density(b)), _f(density(k)), _x(cap.get("kv_tokens_per_mib_ratio"))],
        [
            "weights (MiB)",
            _f(b.get("weights_mib")),
            _f(k.get("weights_mib")),
            _x(cap.get("weights_mib_ratio")),
        ],
        ["KV types", clean(str(b.get("kv_types") or "—")), clean(str(k.get("kv_types") or "—")), ""],
        ["load limit found", limit("baseline"), limit("candidate"), ""],
        ["reported by", clean(str(b.get("source") or "—")), clean(str(k.get("source") or "—")), ""],
        ["capacity ratio", "", "", f"{_x(cap.get('ratio'))} ({clean(str(cap.get('basis') or ''))})"],
    ]
    return ["", "baseline", "candidate", "candidate / baseline"], rows


def settings_note(doc: Mapping[str, Any]) -> str:
    s = doc.get("settings") or {}
    slots = {((doc.get("arms") or {}).get(a) or {}).get("slots") for a in ("baseline", "candidate")} - {None}
    capped = f"; levels capped at the server's {min(slots)} parallel slots" if slots else ""
    return clean(
        f"Closed-loop load: at each level that many streams each send their next request when the last "
        f"ends. Prompts of {s.get('input_len')} tokens, {s.get('output_len')} generated tokens each "
        f"(greedy, ignore_eos); at most {s.get('max_requests_per_level')} requests and "
        f"{s.get('max_seconds_per_level')} s per level; a request with no first token within "
        f"{s.get('queue_timeout_s')} s marks the arm's capacity limit{capped}. Ratio = candidate / "
        "baseline output tok/s."
    )


def _nice_step(top: float) -> float:
    raw = top / 5
    mag = 10 ** math.floor(math.log10(raw)) if raw > 0 else 1.0
    return next(m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw)


def throughput_chart(doc: Mapping[str, Any]) -> Markup:
    """Output tok/s against concurrency, one line per arm; limit levels marked with a red ×."""
    levels = [lv for lv in doc.get("levels") or [] if "concurrency" in lv]
    if not levels:
        return Markup("")
    values = [
        float(v) for lv in levels for key in ("baseline_tok_s", "candidate_tok_s") if (v := lv.get(key))
    ]
    step = _nice_step(max(values) * 1.1) if values else 1.0
    top = step * max(1, math.ceil((max(values) * 1.1 if values else 1.0) / step))
    n = len(levels)

    def px(i: int) -> float:
        return _X0 + (_X1 - _X0) * ((i + 0.5) / n)

    def py(v: float) -> float:
        return _Y1 - (_Y1 - _Y0) * (v / top)

    title = "Output tokens per second against concurrency, baseline and candidate"
    out = chart_head("throughput", "throughput-title", title, width=_W, height=_H)
    k = 0
    while k * step <= top + 1e-9:
        y = py(k * step)
        out.append(f'<line x1="{_X0}" y1="{y:.1f}" x2="{_X1}" y2="{y:.1f}" stroke="#eaeef2" />')
        out.append(f'<text x="{_X0 - 8}" y="{y + 4:.1f}" text-anchor="end">{k * step:g}</text>')
        k += 1
    for i, lv in enumerate(levels):
        x = px(i)
        out.append(f'<text x="{x:.1f}" y="{_Y1 + 18}" text-anchor="middle">{int(lv["concurrency"])}</text>')
        if lv.get("ratio") is not None:
            out.append(
                f'<text x="{x:.1f}" y="{_Y0 - 12}" text-anchor="middle" fill="#57606a">{_x(lv["ratio"])}</text>'
            )
    out.append(f'<line x1="{_X0}" y1="{_Y1}" x2="{_X1}" y2="{_Y1}" stroke="#57606a" />')
    for arm, color, dash in _ARMS:
        out += _series(levels, arm, color, dash, px, py)
    out += legend(
        [(_arm_label(doc, arm)[:22], color, dash) for arm, color, dash in _ARMS], x=_X1 + 16, y0=_Y0
    )
    if any(lv.get(f"{arm}_status") == "limit" for lv in levels for arm, _, _ in _ARMS):
        out.append(f'<text x="{_X1 + 16}" y="{_Y0 + 64}" fill="#cf222e">× capacity limit</text>')
    out.append(
        f'<text x="{(_X0 + _X1) / 2:.1f}" y="{_Y1 + 40}" text-anchor="middle">concurrent streams</text>'
    )
    out.append(
        f'<text x="16" y="{(_Y0 + _Y1) / 2:.1f}" text-anchor="middle" '
        f'transform="rotate(-90 16 {(_Y0 + _Y1) / 2:.1f})">output tok/s</text>'
    )
    out.append(f'<text x="{_X0 - 8}" y="{_Y0 - 12}" text-anchor="end" fill="#57606a">ratio</text>')
    out.append("</svg>")
    return Markup("\n".join(out))


def _series(levels: list[Mapping[str, Any]], arm: str, color: str, dash: str, px: Any, py: Any) -> list[str]:
    points, marks = [], []
    for i, lv in enumerate(levels):
        value, status = lv.get(f"{arm}_tok_s"), lv.get(f"{arm}_status")
        if status in ("limit", "skipped") or value is None:
            if status == "limit":
                x, y = px(i), _Y1 - 8
                marks.append(
                    f'<text x="{x:.1f}" y="{y:.1f}" text-anchor="middle" fill="#cf222e" font-size="16">'
                    f"<title>{escape(arm)}: capacity limit at concurrency {int(lv['concurrency'])}</title>×</text>"
                )
            continue
        x, y = px(i), py(float(value))
        points.append(f"{x:.1f},{y:.1f}")
        marks.append(
            f'<circle cx="{x:.1f}" cy="{y:.1f}" r="4" fill="{color}"><title>{escape(arm)} at concurrency '
            f"{int(lv['concurrency'])}: {_f(value)} tok/s</title></circle>"
        )
    style = f' stroke-dasharray="{dash}"' if dash else ""
    line = (
        [f'<polyline points="{" ".join(points)}" fill="none" stroke="{color}" stroke-width="2"{style} />']
        if len(points) > 1
        else []
    )
    return line + marks
