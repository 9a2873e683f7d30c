"""The one view model every renderer reads: numbers are formatted here, once.

HTML, Markdown and JUnit never recompute or reformat a statistic, so they cannot disagree with
each other or with verdict.json. Optional sections that other parts of evalgate add later
(A/A noise, kernel checks, throughput, agreement) are listed in ``OPTIONAL_SECTIONS`` and
rendered generically when the manifest or the verdict carries them (report/_sections.py).
A setting whose name is a secret's (``redact.is_secret_key``) is shown as ``***``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from evalgate.gate import NOT_ESTIMABLE, Row, RunData, Verdict, parse_margin
from evalgate.redact import MASK, is_secret_key
from evalgate.report import _format as fmt
from evalgate.report._categories import CategoryPanel, category_panel
from evalgate.report._drift import FLIP_NOTE, FLIP_TITLE, DriftPanel, drift_panels, flip_drift_tables
from evalgate.report._gateway import GatewayPanel, gateway_panels
from evalgate.report._items import SuiteItems, discordant_items
from evalgate.report._lengths import LengthPanel, length_panels
from evalgate.report._sections import OPTIONAL_SECTIONS, Section, flatten, optional_sections
from evalgate.store.manifest import Manifest, VariantInfo
from evalgate.store.provenance import WhatRanRow

__all__ = ["OPTIONAL_SECTIONS", "ArgRow", "FactRow", "RowView", "RunView", "Section", "build_view"]


@dataclass(frozen=True)
class RowView:
    """One (suite, metric) row of verdict.json, formatted."""

    suite: str
    metric: str
    primary: bool
    n: int
    baseline: str
    candidate: str
    delta: str
    ci: str
    p: str
    p_adjusted: str
    flips: str
    n10: int
    n01: int
    mde: str
    status: str
    reason: str
    underpowered: bool
    anchor: str
    raw: Row


@dataclass(frozen=True)
class ArgRow:
    key: str
    baseline: str
    candidate: str
    differs: bool
    allowed: bool = False


@dataclass(frozen=True)
class FactRow:
    suite: str
    arm: str
    duration: str
    seconds: float | None
    items: int
    errors: int
    prompt_tokens: int
    completion_tokens: int
    mean_latency: str


@dataclass
class RunView:
    run_id: str
    verdict: str
    reason: str
    policy: str
    alpha: float
    margin: float | None
    margin_text: str
    notes: list[str]
    exit_code: int
    variants: dict[str, str]
    engine: str
    engine_version: str
    git: str
    models: list[ArgRow]
    args: list[ArgRow]
    rows: list[RowView]
    suite_items: list[SuiteItems]
    facts: list[FactRow]
    servers: list[Section]
    preflight: list[Section]
    errors: list[str]
    run_info: list[list[str]]
    sections: list[Section] = field(default_factory=list)
    lengths: list[LengthPanel] = field(default_factory=list)
    """Long-context suites: a table per context length, the chart and the capacity it buys."""
    drift: list[DriftPanel] = field(default_factory=list)
    """Drift suites: the budget rows, the per-token KL quantiles and the KL by position."""
    flip_drift: list[Section] = field(default_factory=list)
    """The flip-drift table (multiple-choice suites: does the choice KL predict the flips?), or none."""
    gateways: list[GatewayPanel] = field(default_factory=list)
    categories: CategoryPanel | None = None
    """0/1 suites by category: one sortable table, informational (report/_categories.py)."""
    """Arms of several workers behind smg: the gateway, its policy and each worker (report/_gateway.py)."""
    comparability: str = ""
    what_ran: list[WhatRanRow] = field(default_factory=list)
    """What each arm's server reported it ran, side by side (verdict.json ``what_ran``)."""
    warnings: list[str] = field(default_factory=list)
    """Fallbacks and declared differences, shown at the top (verdict.json ``warnings``)."""
    """Whether the arms ran the same comparison, in one line (verdict.json ``comparability``)."""

    @property
    def primary_rows(self) -> list[RowView]:
        return [r for r in self.rows if r.primary]

    @property
    def not_judged(self) -> list[str]:
        """Why each suite the gate did not judge was not: its primary row's reason, in full."""
        return [
            fmt.not_judged(r.suite, r.reason) for r in self.primary_rows if r.status in ("error", "missing")
        ]


def anchor(suite: str, index: int) -> str:
    """A stable HTML id for any suite name (``private:/path`` included)."""
    slug = "".join(c if c.isalnum() else "-" for c in suite.lower()).strip("-")
    return f"suite-{index}-{slug}"[:64]


def build_view(run: RunData, verdict: Verdict) -> RunView:
    m = run.manifest
    suites = list(m.suites)
    anchors = {s: anchor(s, i) for i, s in enumerate(suites)}
    margin = _margin(m, verdict)
    rows = [_row(r, anchors.get(r.suite, ""), margin) for r in verdict.suites]
    unjudged = {r.suite: r.reason for r in verdict.suites if r.primary and r.status in ("error", "missing")}
    commit = m.git.commit or "unknown"
    return RunView(
        run_id=m.run_id,
        verdict=verdict.verdict,
        reason=fmt.clean(verdict.reason),
        policy=verdict.policy,
        alpha=verdict.alpha,
        margin=margin if isinstance(margin, float) else None,
        margin_text="" if margin is None else (fmt.mde(margin) if isinstance(margin, float) else str(margin)),
        notes=[fmt.clean(n) for n in verdict.notes],
        exit_code=verdict.exit_code,
        variants={arm: _variant(v, _attached_label(m, arm)) for arm, v in m.variants.items()},
        engine=m.engine,
        engine_version=m.engine_version,
        git=commit + (" (dirty)" if m.git.dirty else ""),
        models=_models(m),
        args=_args(m),
        rows=rows,
        suite_items=[
            discordant_items(run, s, anchors[s], not_judged=fmt.clean(unjudged.get(s, ""))) for s in suites
        ],
        facts=_facts(run),
        servers=_per_arm(m, "server"),
        preflight=_preflight(m),
        errors=[fmt.clean(e) for e in run.errors()],
        run_info=_run_info(m),
        sections=optional_sections(m, verdict),
        lengths=length_panels(m, verdict),
        drift=drift_panels(verdict),
        flip_drift=[
            Section("flip-drift", FLIP_TITLE, *t, note=FLIP_NOTE) for t in flip_drift_tables(verdict)
        ],
        gateways=gateway_panels(m),
        categories=category_panel(verdict),
        comparability=fmt.clean(verdict.comparability.summary()) if verdict.comparability else "",
        what_ran=[
            WhatRanRow(r.key, r.label, fmt.clean(r.baseline), fmt.clean(r.candidate), r.differs)
            for r in verdict.what_ran
        ],
        warnings=[fmt.clean(w) for w in verdict.warnings],
    )


def _margin(manifest: Manifest, verdict: Verdict) -> float | str | None:
    """The policy margin (a fraction, like delta), from the verdict or the request, if any."""
    value: Any = getattr(verdict, "margin", None)
    if value is None:
        value = manifest.request.margin
    if value is None or isinstance(value, (int, float)):
        return None if value is None else float(value)
    amount, relative = parse_margin(str(value))
    return str(value) if relative else amount  # a relative margin differs per row: no single band


def _row(r: Row, anchor_id: str, margin: float | str | None) -> RowView:
    underpowered = r.status == "underpowered"  # the gate's rule (gate.GatePolicy.power_floor) is the only one
    return RowView(
        suite=fmt.clean(r.suite),
        metric=fmt.clean(r.metric),
        primary=r.primary,
        n=r.n,
        baseline=_score(r, r.n11 + r.n10, r.baseline),
        candidate=_score(r, r.n11 + r.n01, r.candidate),
        delta=fmt.points(r.delta),
        ci=fmt.ci(r.ci_low, r.ci_high),
        p=fmt.p(r.p_value),
        p_adjusted=fmt.p(r.p_adjusted),
        flips=fmt.pct(r.flips),
        n10=r.n10,
        n01=r.n01,
        mde="not estimable" if NOT_ESTIMABLE in r.reason else fmt.mde(r.mde),  # gate/_rows.py says why
        status=r.status,
        reason=fmt.clean(r.reason),
        underpowered=underpowered,
        anchor=anchor_id,
        raw=r,
    )


def _score(r: Row, passed: int, rate: float) -> str:
    """A private exam reads as "passed / total" (the way its owners quote it); others as a rate."""
    return f"{passed} / {r.n} ({rate:.1%})" if r.suite.startswith("private:") else fmt.score(rate)


def _attached_label(m: Manifest, arm: str) -> str | None:
    """An attached arm (#44): what its server reports it runs, or "unknown"; never the default
    variant name the request carries, since nothing was said of an attached server."""
    info = m.arms.get(arm)
    if m.engine != "external" and not (info is not None and info.server.attached):
        return None
    found = info.server.provenance if info is not None else None
    return "attached: " + ((found.label() if found is not None else None) or "unknown")


def _variant(v: VariantInfo, attached: str | None = None) -> str:
    if attached is not None:
        return attached
    extra = ", ".join(f"{k} {value}" for k in ("weights", "kv") if (value := getattr(v, k)))
    return v.name + (f" ({extra})" if extra else "")


def _value(v: Any) -> str:
    return "(flag)" if v is None else fmt.compact(v)


def _args(m: Manifest) -> list[ArgRow]:
    """Launch args of both arms side by side, keyed by flag, in the baseline's order."""
    allowed = set(m.request.allow_diff)
    sides: dict[str, dict[str, str]] = {}
    order: list[str] = []
    for arm in ("baseline", "candidate"):
        spec = m.launch.get(arm)
        args: list[Any] = spec.args if spec else []
        env: list[Any] = spec.env if spec else []
        for kind, pairs in (("", args), ("env ", env)):
            for k, v in pairs:
                key = f"{kind}{k}"
                if key not in sides:
                    sides[key] = {}
                    order.append(key)
                sides[key][arm] = MASK if is_secret_key(k) else _value(v)
    out = []
    for key in order:
        b, c = sides[key].get("baseline", "(absent)"), sides[key].get("candidate", "(absent)")
        out.append(ArgRow(key, b, c, b != c, key.removeprefix("env ") in allowed))
    return out


def _models(m: Manifest) -> list[ArgRow]:
    out = []
    labels = [
        getattr(m.launch.get(arm), "label", None) or _attached_label(m, arm)
        for arm in ("baseline", "candidate")
    ]
    if any(labels):  # what each arm computes in, as its engine names it (not the variant's name)
        b, c = (fmt.clean(x) if x else "not known" for x in labels)
        out.append(ArgRow("numerics", b, c, b != c))
    for key, label in (("model", "model"), ("model_sha256", "sha256")):
        b = fmt.compact(getattr(m.launch.get("baseline"), key, None)) or "unknown"
        c = fmt.compact(getattr(m.launch.get("candidate"), key, None)) or "unknown"
        out.append(ArgRow(label, b, c, b != c))
    return out


def _facts(run: RunData) -> list[FactRow]:
    arms = run.manifest.arms
    out = []
    for suite, by_arm in run.records.items():
        for arm in ("baseline", "candidate"):
            recs = list(by_arm.get(arm, {}).values())
            dur = arms[arm].durations_s.get(suite) if arm in arms else None
            lat = [r.latency_s for r in recs if r.error is None]
            out.append(
                FactRow(
                    suite=fmt.clean(suite),
                    arm=arm,
                    duration="—" if dur is None else f"{float(dur):.1f} s",
                    seconds=None if dur is None else float(dur),
                    items=len(recs),
                    errors=sum(1 for r in recs if r.error),
                    prompt_tokens=sum(int(r.tokens.get("prompt", 0)) for r in recs),
                    completion_tokens=sum(int(r.tokens.get("completion", 0)) for r in recs),
                    mean_latency=f"{sum(lat) / len(lat):.2f} s" if lat else "—",
                )
            )
    return out


def _per_arm(m: Manifest, key: str) -> list[Section]:
    """Each arm's server facts (KV buffers, max_total_num_tokens, ...), flattened to key/value rows."""
    out = []
    for arm, info in m.arms.items():
        value = getattr(info, key, None)
        if value:  # ServerFacts: the keys the server reported, as written
            out.append(Section(f"{key}-{arm}", arm, [], flatten(value.to_dict())))
    return out


def _preflight(m: Manifest) -> list[Section]:
    out = []
    for arm, info in m.arms.items():
        rows = [
            [fmt.compact(c.check), "ok" if c.ok else "FAILED", fmt.compact(c.detail)] for c in info.preflight
        ]
        if rows:
            out.append(Section(f"preflight-{arm}", arm, ["check", "result", "detail"], rows))
    return out


def _run_info(m: Manifest) -> list[list[str]]:
    rows = [
        ["run id", fmt.compact(m.run_id)],
        ["command", " ".join(fmt.compact(c) for c in m.command)],
        ["created (UTC)", fmt.compact(m.created_utc) or "—"],
        ["finished (UTC)", fmt.compact(m.finished_utc) or "not finished"],
    ]
    for key in ("preset", "limit", "seed", "max_gen_tokens", "data_dir"):
        value = getattr(m.request, key)
        if value is not None:
            rows.append([key, fmt.compact(str(value) if isinstance(value, Path) else value)])
    for arm, info in m.arms.items():
        if info.command:
            rows.append([f"{arm} server command", " ".join(fmt.compact(c) for c in info.command)])
    pkgs = m.packages
    if pkgs:
        rows.append(["packages", ", ".join(f"{k} {fmt.compact(v)}" for k, v in pkgs.items())])
    return rows
