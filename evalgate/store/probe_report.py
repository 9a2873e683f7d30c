"""probe.json: what ``evalgate probe cache`` and ``evalgate probe warm-cold`` record, as models.

``ProbeSettings`` and ``WarmColdSettings`` are the probes' requests: each field is a flag of its
command (``evalgate.cli._flags``, as ``CompareRequest``'s are ``compare``'s) and is recorded in
probe.json's ``settings``; a value no probe can use is refused here, naming the flag (exit 2).
``ProbeReport`` is the document itself (docs/schemas/probe.schema.json, ``evalgate.schemas``):
the probes build it as plain JSON and ``check_report`` holds it to the model before it is written.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from evalgate.errors import ConfigError
from evalgate.request import Flag
from evalgate.stats import DEFAULT_FLIP_BUDGET, DEFAULT_LEAK_SHARE, DEFAULT_MIN_MARGIN

__all__ = [
    "DEFAULT_SUITES",
    "MAX_PREFIX_TOKENS",
    "MIN_ALPHA",
    "PROBE_SCHEMA",
    "ProbeReport",
    "ProbeSettings",
    "WarmColdSettings",
    "check_report",
]

PROBE_SCHEMA = 2
"""2: the cache probe's timing test blocks only beyond its margin (``timing.block_p``,
``settings.min_margin``)."""
DEFAULT_SUITES = ("arc_easy", "gsm8k")
MIN_ALPHA = 1e-6
"""The smallest level a probe takes: below it no run of probes could reach it (2^-20 is one
sided at 20 probes), and ``1 - 2 * alpha`` rounds to 1 (a confidence the bootstrap refuses)."""
MAX_PREFIX_TOKENS = 1 << 20
"""The longest prefix ``--prefix-tokens`` asks for; each probe draws it as random token ids, and a
server's own context (when it says) caps it further."""
Verdict = Literal["PASS", "BLOCK", "NO_ISOLATION", "ERROR", "UNDERPOWERED"]


def _check_seed_alpha(seed: int, alpha: float) -> None:
    if seed < 0:
        raise ConfigError(f"--seed {seed} is negative", fix="pass a seed of 0 or more (0 is the default)")
    if not MIN_ALPHA <= alpha < 0.5:
        raise ConfigError(
            f"--alpha {alpha:g} is out of range",
            fix=f"pass a level from {MIN_ALPHA:g} to below 0.5, e.g. 0.05",
        )


class ProbeSettings(BaseModel):
    """``evalgate probe cache``: what one run does."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    probes: int = Field(20, description="probes (victim, then SAME, CROSS and COLD)")
    share: float = Field(
        DEFAULT_LEAK_SHARE,
        description="the margin: a CROSS speed-up within this share of the cache gap (log latency) is no "
        "leak; BLOCK needs it significantly beyond, PASS its upper bound below",
    )
    min_margin: float = Field(
        DEFAULT_MIN_MARGIN,
        description="the margin is at least this speed-up (a ratio; 1 for none): a share of a small gap "
        "is within a busy server's own drift",
    )
    alpha: float = Field(0.05, description="one-sided level of each test")
    salted: Annotated[bool, Flag(name="salt")] = Field(
        True,
        description="each tenant under its own salt; --no-salt sends none, so both tenants share the cache "
        "(the probe must BLOCK)",
    )
    prefix_tokens: Annotated[int | None, Flag(default_text="calibrated")] = Field(
        None, description="prefix length"
    )
    suffix_tokens: int = Field(8, description="tokens after the prefix (SAME and CROSS)")
    page_tokens: int = Field(
        16, description="SAME may read this many fewer cached tokens (the server's page)"
    )
    seed: int = Field(0, description="random content and sampling seed")
    max_tokens: int = Field(1, description="output tokens per request")

    @model_validator(mode="after")
    def _usable(self) -> ProbeSettings:
        _check_seed_alpha(self.seed, self.alpha)
        if self.probes < 2:
            raise ConfigError(
                f"--probes {self.probes} is too few", fix="pass --probes 2 or more (20 is the default)"
            )
        if not 0 < self.share < 1:
            raise ConfigError(
                f"--share {self.share} is not a share", fix="pass a number between 0 and 1, e.g. 0.2"
            )
        if not 1 <= self.min_margin <= 10:
            raise ConfigError(
                f"--min-margin {self.min_margin} is not a speed-up", fix="pass a ratio from 1 to 10, e.g. 1.1"
            )
        if self.prefix_tokens is not None and self.prefix_tokens < 16:
            raise ConfigError(
                f"--prefix-tokens {self.prefix_tokens} is too short", fix="pass 16 or more, or omit it"
            )
        if self.prefix_tokens is not None and self.prefix_tokens > MAX_PREFIX_TOKENS:
            raise ConfigError(
                f"--prefix-tokens {self.prefix_tokens} is longer than any context (at most {MAX_PREFIX_TOKENS})",
                fix="pass a prefix shorter than the server's context, or omit it (calibrated)",
            )
        if self.page_tokens < 0:
            raise ConfigError("--page-tokens is negative", fix="pass 0 or more (the server's page size)")
        return self


class WarmColdSettings(BaseModel):
    """``evalgate probe warm-cold``: what one run does."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    suites: Annotated[tuple[str, ...], Flag(listed=",")] = Field(
        DEFAULT_SUITES, description="comma-separated public completion suites whose prompts are answered"
    )
    limit: int = Field(10, description="items per suite")
    max_tokens: int = Field(16, description="greedy tokens per answer")
    budget: Annotated[float, Flag(default_text=f"{DEFAULT_FLIP_BUDGET}; 0 with --deterministic")] = Field(
        DEFAULT_FLIP_BUDGET, description="flip budget: the share of answers allowed to differ"
    )
    alpha: float = Field(0.05, description="level of the flip test")
    deterministic: bool = Field(
        False, description="launch the server deterministic (as compare --deterministic) and expect 0 flips"
    )
    seed: int = Field(0, description="random content and sampling seed")

    @model_validator(mode="before")
    @classmethod
    def _zero_budget(cls, data: Any) -> Any:
        """--deterministic: any flip BLOCKs, whatever --budget says."""
        if isinstance(data, dict) and data.get("deterministic"):
            return {**data, "budget": 0.0}
        return data

    @model_validator(mode="after")
    def _usable(self) -> WarmColdSettings:
        if not self.suites:
            raise ConfigError("--suites is empty", fix=f"pass suite names, e.g. {','.join(DEFAULT_SUITES)}")
        if self.limit < 1:
            raise ConfigError(f"--limit {self.limit} is too few", fix="pass 1 or more items per suite")
        if self.max_tokens < 1:
            raise ConfigError(f"--max-tokens {self.max_tokens} is too few", fix="pass 1 or more")
        if not 0 <= self.budget < 1:
            raise ConfigError(
                f"--budget {self.budget} is not a share", fix="pass a share in [0, 1), e.g. 0.05"
            )
        _check_seed_alpha(self.seed, self.alpha)
        return self


# -- probe.json ----------------------------------------------------------------------------------


class _Doc(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Condition(_Doc):
    """One condition over the probes (or answers): median latency and the cached tokens read."""

    median_latency_s: float
    cached_tokens_min: Any = Field(description="as the server reported them (None: not reported)")
    cached_tokens_max: Any


class Observation(_Doc):
    """One request of a probe."""

    latency_s: float
    cached_tokens: Any = Field(description="as the server reported them; garbage is kept and named")
    prompt_tokens: int | None
    answered: bool


class ProbeRow(_Doc):
    """One probe: the victim, then SAME, CROSS and COLD in ``order``."""

    victim: Observation
    same: Observation
    cross: Observation
    cold: Observation
    order: list[Literal["same", "cross", "cold"]]


class Oracle(_Doc):
    """The exact oracle's counts, on the cached tokens the server reports."""

    reported: bool
    cross_cached_max: Any
    cross_probes_with_cached_tokens: int
    same_cached_min: Any
    same_probes_below_prefix: int


class Timing(_Doc):
    """``stats.TimingResult``: the paired timing test, in log-latency units (exp gives ratios)."""

    n: int
    gap: float
    gap_p: float
    leak: float
    leak_p: float = Field(description="one-sided p that CROSS is no faster than COLD (shown, not gating)")
    block_p: float = Field(
        description="one-sided p that CROSS's speed-up is within the margin: BLOCK below alpha"
    )
    leak_upper: float
    margin: float = Field(description="log of the largest speed-up that is no leak")
    status: Literal["pass", "block", "error", "underpowered"]
    reason: str
    probes_needed: int | None


class CalibrationStep(_Doc):
    prefix_tokens: int
    cold_over_same: list[float]


class WarmColdItem(_Doc):
    """One prompt answered cold and warm."""

    item: str
    prompt_tokens: int | None
    warm_cached_tokens: Any
    cold_cached_tokens: Any
    warm_latency_s: float
    cold_latency_s: float
    flip: bool
    warm: str | None
    cold: str | None


class ProbeReport(_Doc):
    """probe.json. Every report has the head (schema to settings); a NO_ISOLATION report stops
    there. ``cache_isolation`` adds the probes, the oracle and the timing test; ``warm_cold`` the
    items and the flip test."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)
    schema_version: Literal[2] = Field(PROBE_SCHEMA, alias="schema")
    probe: Literal["cache_isolation", "warm_cold"]
    verdict: Verdict
    exit_code: Literal[0, 1, 2, 3]
    reasons: list[str]
    settings: ProbeSettings | WarmColdSettings
    server: str | None = Field(
        None, description="the launched engine and variant, or the attached URL (redacted)"
    )
    seconds: float | None = None
    conditions: dict[str, Condition] | None = None
    # cache_isolation
    prefix_tokens: int | None = None
    context_length: int | None = None
    calibration: list[CalibrationStep] | None = None
    flush: list[str] | None = None
    oracle: Oracle | None = None
    timing: Timing | None = None
    cache_gap: float | None = Field(None, description="COLD / SAME: the cache's measured speed-up")
    margin: float | None = Field(None, description="the largest CROSS speed-up that is no leak (a ratio)")
    probes: list[ProbeRow] | None = None
    # warm_cold
    n: int | None = None
    flips: int | None = None
    budget: float | None = None
    pvalue: float | None = None
    warm_namespace: str | None = None
    items: list[WarmColdItem] | None = None

    @model_validator(mode="after")
    def _one_kind(self) -> ProbeReport:
        want = {"cache_isolation": ProbeSettings, "warm_cold": WarmColdSettings}[self.probe]
        if not isinstance(self.settings, want):
            raise ValueError(f"a {self.probe} report holds {want.__name__}")
        return self


def check_report(report: dict[str, Any]) -> dict[str, Any]:
    """``report`` held to ``ProbeReport`` (a ValueError naming the first field that is not) and
    returned as it is: what probe.json gets is exactly what the probe built."""
    ProbeReport.model_validate(report)
    return report
