"""throughput.json: its model (``ThroughputDoc``, schema 1), how two arms' sweeps become one
document, and how it is written (``evalgate bench``) or kept in a compare run's manifest.

The document stays a plain dict in memory, as renderers read it; ``write_throughput`` and the
manifest check it against the model, so every copy on disk matches docs/schemas/.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from evalgate.errors import ConfigError
from evalgate.store.capacity import capacity_ratio
from evalgate.store.files import make_folder, write_atomic

__all__ = [
    "DEFAULT_LEVELS",
    "THROUGHPUT_SCHEMA",
    "BenchSettings",
    "ThroughputDoc",
    "throughput_doc",
    "write_throughput",
]

DEFAULT_LEVELS = (1, 4, 8, 16, 32, 64)


@dataclass(frozen=True)
class BenchSettings:
    """How hard and how long each arm is pushed (one field per ``evalgate bench`` flag)."""

    levels: tuple[int, ...] = DEFAULT_LEVELS
    """Concurrency levels; levels above the server's parallel slots are capped to it."""
    input_len: int = 128
    """Prompt tokens per request."""
    output_len: int = 64
    """Generated tokens per request (greedy, ignore_eos)."""
    requests_per_level: int | None = None
    """Requests per level; None means 4 per concurrent stream, at least 8."""
    max_requests_per_level: int = 256
    """Hard cap on requests per level."""
    max_seconds_per_level: float = 30.0
    """Hard cap on a level's wall time; requests still running then are cancelled."""
    queue_timeout_s: float = 20.0
    """A request with no first token after this long counts as queued beyond capacity."""
    generator: str = "builtin"
    """builtin (this module) or sglang (``python -m sglang.bench_serving``)."""
    seed: int = 0

    def validate(self) -> None:
        if not self.levels or any(c < 1 for c in self.levels):
            raise ConfigError(f"bad --levels {self.levels}", fix="give positive integers, e.g. 1,4,8")
        for name in ("input_len", "output_len", "max_requests_per_level"):
            if getattr(self, name) < 1:
                raise ConfigError(f"--{name.replace('_', '-')} must be at least 1", fix="e.g. 128")
        if self.requests_per_level is not None and self.requests_per_level < 1:
            raise ConfigError("--requests-per-level must be at least 1", fix="omit it for 4 per stream")
        if self.max_seconds_per_level <= 0 or self.queue_timeout_s <= 0:
            raise ConfigError("time limits must be positive", fix="e.g. --max-seconds-per-level 30")
        if self.generator not in ("builtin", "sglang"):
            raise ConfigError(f"unknown generator {self.generator!r}", fix="use builtin or sglang")

    def requests_for(self, concurrency: int) -> int:
        wanted = self.requests_per_level or max(8, 4 * concurrency)
        return max(1, min(wanted, self.max_requests_per_level))

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["levels"] = list(self.levels)
        return out


THROUGHPUT_SCHEMA = 1


class LevelRatio(BaseModel):
    """Both arms at one concurrency level."""

    model_config = ConfigDict(extra="forbid")
    concurrency: int
    baseline_tok_s: float | None = Field(description="The baseline's output tokens per second.")
    candidate_tok_s: float | None = Field(description="The candidate's output tokens per second.")
    ratio: float | None = Field(description="candidate / baseline tok/s; None unless both arms ran cleanly.")
    baseline_status: str = Field(description="ok, errors, limit, skipped or 'not run'.")
    candidate_status: str


class CapacityComparison(BaseModel):
    """Each arm's KV capacity (``evalgate.store.capacity``) and their ratio."""

    model_config = ConfigDict(extra="allow")
    baseline: dict[str, Any] | None = None
    candidate: dict[str, Any] | None = None
    ratio: float | None = None
    basis: str = Field("", description="What the ratio compares (tokens, tokens per MiB, ...).")


class ThroughputDoc(BaseModel):
    """throughput.json (and a compare run's ``throughput``): both arms' sweeps and their ratios."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)
    schema_version: Literal[1] = Field(THROUGHPUT_SCHEMA, alias="schema")
    settings: BenchSettings = Field(description="How hard and how long each arm was pushed.")
    arms: dict[str, dict[str, Any]] = Field(
        description="Per arm: the sweep (levels with tok/s, TTFT, ITL; limit; capacity; command), "
        "or {'error': ...} when it failed."
    )
    levels: list[LevelRatio]
    capacity: CapacityComparison
    created_utc: str | None = Field(None, description="evalgate bench only, as are the fields below.")
    finished_utc: str | None = None
    command: list[str] | None = None
    git: dict[str, Any] | None = None
    engine: str | None = None
    engine_version: str | None = None
    host: dict[str, Any] | None = Field(None, description="Launch settings chosen from the machine's load.")

    def to_dict(self) -> dict[str, Any]:
        """The document as it was given: no key it did not have."""
        return self.model_dump(mode="json", by_alias=True, exclude_unset=True)


def _ratio(a: Any, b: Any) -> float | None:
    return round(float(b) / float(a), 3) if a and b is not None else None


def throughput_doc(arms: Mapping[str, Mapping[str, Any] | None], settings: BenchSettings) -> dict[str, Any]:
    """throughput.json: both arms' levels, the candidate/baseline ratio per level, and capacity."""
    base, cand = arms.get("baseline") or {}, arms.get("candidate") or {}
    by_level: dict[int, dict[str, Any]] = {}
    for arm, data in (("baseline", base), ("candidate", cand)):
        for row in data.get("levels") or []:
            by_level.setdefault(int(row["concurrency"]), {})[arm] = row
    levels = []
    for c in sorted(by_level):
        b, k = by_level[c].get("baseline") or {}, by_level[c].get("candidate") or {}
        both = b.get("status") in ("ok", "errors") and k.get("status") in ("ok", "errors")
        levels.append(
            {
                "concurrency": c,
                "baseline_tok_s": b.get("output_tok_s"),
                "candidate_tok_s": k.get("output_tok_s"),
                "ratio": _ratio(b.get("output_tok_s"), k.get("output_tok_s")) if both else None,
                "baseline_status": b.get("status", "not run"),
                "candidate_status": k.get("status", "not run"),
            }
        )
    return {
        "schema": THROUGHPUT_SCHEMA,
        "settings": settings.to_dict(),
        "arms": {arm: dict(data) for arm, data in (("baseline", base), ("candidate", cand)) if data},
        "levels": levels,
        "capacity": {
            "baseline": base.get("capacity"),
            "candidate": cand.get("capacity"),
            **capacity_ratio(base.get("capacity"), cand.get("capacity")),
        },
    }


def write_throughput(folder: Path, doc: Mapping[str, Any]) -> Path:
    """Atomically write ``folder/throughput.json`` (checked against ``ThroughputDoc`` first)."""
    ThroughputDoc.model_validate(doc)
    make_folder(folder)
    path = folder / "throughput.json"
    write_atomic(path, json.dumps(doc, indent=2, allow_nan=False) + "\n")
    return path
