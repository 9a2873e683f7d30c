"""The gate's policy: the one place a run's alpha, policy, margin and budgets are read."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, get_args

from evalgate.errors import ConfigError
from evalgate.gate._agreement import DEFAULT_AA_MARGIN, NOISE_HINT, noise_hint
from evalgate.gate._drift import DEFAULT_DRIFT_BUDGET, DriftBudget, parse_drift_budget
from evalgate.request import Policy
from evalgate.stats.sequential import SequentialRule, rule_for

if TYPE_CHECKING:
    from evalgate.request import CompareRequest
    from evalgate.store.manifest import Manifest

__all__ = ["POLICIES", "GatePolicy", "parse_margin", "sequential_rule"]

POLICIES: tuple[str, ...] = get_args(Policy)


@dataclass(frozen=True)
class GatePolicy:
    alpha: float = 0.05
    policy: str = "difference"
    """'difference' (two-sided, the default), 'regression' (one-sided), 'non-inferiority'."""
    margin: str | None = None
    """Non-inferiority margin: '0.02' or '2pt' (absolute), '1%rel' (relative to the baseline)."""
    allow_diff: tuple[str, ...] = ()
    power_floor: float = 0.02
    """A passing row whose MDE (at the level its test must reach) exceeds this is UNDERPOWERED."""
    agreement_gate: bool = True
    """Also test each suite's flip rate against a budget (see evalgate.gate._agreement)."""
    flip_budget: float | None = None
    """Tolerated flip rate; None: the A/A rate plus ``aa_margin`` with --aa, else the default."""
    aa_margin: float = DEFAULT_AA_MARGIN
    errors_as_wrong: bool = False
    """Failed items count as wrong, and as unanswered: every suite's agreement row tests them."""
    noise_hint: str = NOISE_HINT
    """What a flip BLOCK says about the server's own noise (evalgate.gate._agreement.noise_hint)."""
    drift_budget: DriftBudget = DEFAULT_DRIFT_BUDGET
    """What a drift suite's KL and perplexity ratio may reach (gate/_drift.py)."""
    advisory: tuple[str, ...] = ()
    """Suites tested and shown but never gating, decided as a family of their own (gate/_tiers.py)."""
    require_power: bool = False
    """A PASS with an UNDERPOWERED blocking row is INCONCLUSIVE (exit 4)."""

    def __post_init__(self) -> None:
        if self.policy not in POLICIES:
            raise ConfigError(f"unknown policy {self.policy!r}", fix=f"use one of {', '.join(POLICIES)}")
        if self.policy == "non-inferiority" and self.margin is None:
            raise ConfigError(
                "the non-inferiority policy needs --margin", fix="e.g. --margin 2pt or --margin 1%rel"
            )
        if self.margin is not None:
            parse_margin(self.margin)

    @classmethod
    def from_request(cls, req: CompareRequest) -> GatePolicy:
        """The one place a run's policy is read: its request (a live run's, or its manifest's)."""
        return cls(
            alpha=float(req.alpha),
            policy=req.policy,
            margin=req.margin,
            allow_diff=tuple(req.allow_diff),
            agreement_gate=req.agreement_gate,
            flip_budget=req.flip_budget,
            errors_as_wrong=req.errors_as_wrong,
            noise_hint=noise_hint(deterministic=req.deterministic, imported=bool(req.baseline_samples)),
            drift_budget=parse_drift_budget(req.drift_budget),
            advisory=tuple(req.advisory),
            require_power=req.require_power,
        )

    @property
    def alternative(self) -> str:
        """McNemar's alternative: two-sided for 'difference', H1 regression for the others."""
        return "two-sided" if self.policy == "difference" else "less"

    @property
    def confidence(self) -> float:
        """The rows' interval: 1 - alpha two-sided, or 1 - 2 alpha so its lower bound is a
        one-sided alpha bound (non-inferiority tests exactly that bound against -margin)."""
        return 1 - self.alpha if self.policy == "difference" else 1 - 2 * self.alpha

    def margin_for(self, baseline: float) -> float | None:
        """The margin in accuracy units for a row whose baseline accuracy is ``baseline``."""
        if self.margin is None:
            return None
        value, relative = parse_margin(self.margin)
        return value * baseline if relative else value


def sequential_rule(manifest: Manifest) -> SequentialRule:
    """--sequential's rule for a run, from its request and chunk: the live loop and a re-render
    from the files build it here, so both apply the very same rule."""
    if manifest.sequential is None:
        raise ValueError(f"run {manifest.run_id} is not a --sequential run")
    policy = GatePolicy.from_request(manifest.request)
    return rule_for(
        chunk=manifest.sequential.chunk,
        alpha=policy.alpha,
        n_suites=len(manifest.suites),
        policy=policy.policy,
        agreement_gate=policy.agreement_gate,
        flip_budget=policy.flip_budget,
    )


def parse_margin(text: str) -> tuple[float, bool]:
    """'0.02' / '2pt' -> (0.02, False); '1%rel' -> (0.01, True)."""
    t = str(text).strip().lower()
    try:
        if t.endswith("%rel"):
            value, relative = float(t[:-4]) / 100, True
        elif t.endswith("pt"):
            value, relative = float(t[:-2]) / 100, False
        else:
            value, relative = float(t), False
    except ValueError:
        value, relative = -1.0, False
    if not 0 < value < 1:
        raise ConfigError(
            f"margin {text!r} is not a number in (0, 1), 'Npt' or 'N%rel'", fix="e.g. 2pt or 1%rel"
        )
    return value, relative
