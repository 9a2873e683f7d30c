"""Prove a server can be scored before any item runs: never a silent wrong score.

A server without real prompt logprobs scores multiple choice at chance, and a broken
tokenizer or chat template shifts every answer; none of these raise an error on their own.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import asdict, dataclass, field
from typing import Any

from evalgate.engines.api import Scorer
from evalgate.errors import PreflightError

__all__ = ["PreflightReport", "preflight"]

# (context, likely continuation, absurd continuation): a working model prefers the first.
LOGPROB_PROBES = (
    ("The capital of France is", " Paris", " potato"),
    ("1, 2, 3, 4, 5,", " 6", " elephant"),
    ("The opposite of hot is", " cold", " seventeen"),
)
ROUNDTRIP_TEXTS = (
    "Question: Natalia sold clips to 48 of her friends in April.\nAnswer:",
    "  leading spaces, tabs\tand unicode: café, 東京, naïve — 3.14159",
)


@dataclass
class PreflightReport:
    checks: list[dict[str, Any]] = field(default_factory=list)
    tokenizer_fingerprint: str = ""

    def add(self, name: str, ok: bool, detail: str) -> None:
        self.checks.append({"check": name, "ok": ok, "detail": detail})

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


async def preflight(scorer: Scorer, *, server: str, chat: bool = True) -> PreflightReport:
    """Run every check; raise PreflightError naming the first that fails."""
    report = PreflightReport()
    for context, good, bad in LOGPROB_PROBES:
        ll_good, _, n_good = await scorer.loglikelihood(context, good)
        ll_bad, _, n_bad = await scorer.loglikelihood(context, bad)
        values = (ll_good, ll_bad)
        if n_good == 0 or n_bad == 0:
            _fail(report, server, "logprobs present", f"no continuation tokens scored for {context!r}")
        if not all(math.isfinite(v) for v in values) or any(v > 1e-6 for v in values):
            _fail(report, server, "logprobs sane", f"log-probabilities {values} are not finite and <= 0")
        if ll_good == 0.0 and ll_bad == 0.0:
            _fail(
                report,
                server,
                "logprobs sane",
                "all log-probabilities are 0: the server is not scoring prompts",
            )
        if not ll_good > ll_bad:
            _fail(
                report,
                server,
                "logprobs ordered",
                f"{context!r}: {good!r} scored {ll_good:.3f} but {bad!r} scored {ll_bad:.3f}",
            )
        report.add("logprobs", True, f"{context!r}: {good!r} {ll_good:.3f} > {bad!r} {ll_bad:.3f}")
    fingerprint = hashlib.sha256()
    for text in ROUNDTRIP_TEXTS:
        tokens = await scorer.tokenize(text)
        back = await scorer.detokenize(tokens)
        if back != text:
            _fail(report, server, "tokenizer round-trip", f"{text!r} came back as {back!r}")
        fingerprint.update(repr(tokens).encode())
    report.tokenizer_fingerprint = fingerprint.hexdigest()[:16]
    report.add(
        "tokenizer round-trip",
        True,
        f"{len(ROUNDTRIP_TEXTS)} texts; fingerprint {report.tokenizer_fingerprint}",
    )
    if chat:
        marker = "evalgate-preflight-7f3a"
        rendered = await scorer.render_chat([{"role": "user", "content": marker}])
        if marker not in rendered or rendered.strip() == marker:
            _fail(
                report,
                server,
                "chat template applied",
                f"the rendered chat prompt {rendered[:200]!r} shows no template around the message",
            )
        report.add("chat template applied", True, f"rendered {len(rendered)} chars around the message")
    return report


def _fail(report: PreflightReport, server: str, check: str, detail: str) -> None:
    report.add(check, False, detail)
    raise PreflightError(
        f"preflight check '{check}' failed on the {server} server: {detail}",
        fix="this server cannot be scored correctly; check the engine version and model files "
        "(a silent wrong score is worse than no score)",
    )
