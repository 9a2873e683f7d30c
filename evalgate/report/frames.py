"""A run folder as pandas DataFrames, for notebooks and the data tools teams already use.

    import evalgate
    run = evalgate.load_run("reports/example")
    run.pairs().query("baseline != candidate")      # the flipped items, both answers side by side

Read-only and computed from the run folder's files (manifest, ``items/*.jsonl``, verdict.json),
exactly as ``evalgate report`` reads them. pandas is imported on first use.

Columns
-------
``items()``: one row per item per arm: run_id, suite, arm, variant, item_id, repeat, prompt_hash,
  primary_metric, score (the primary metric's value), error, latency_s, prompt_tokens,
  completion_tokens, extracted, response, then one ``metric:<name>`` column per metric.
``pairs()``: one row per paired item (baseline with candidate; ``aa_pairs()`` for an A/A arm):
  suite, item_id, repeat, metric (the primary), baseline, candidate (its values), delta
  (candidate - baseline), flipped (values differ), direction ("regression", "improvement" or
  "same"), baseline_extracted, candidate_extracted, baseline_response, candidate_response.
``verdict()``: one row per gate row of verdict.json (``kind`` "accuracy" for the suites' metric
  rows, "agreement" for the flip-budget rows; for a long-context suite "length" per context length
  and "longest length" for its gated row), with that row's fields as columns.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from evalgate.errors import ConfigError
from evalgate.gate.verdict import RunData
from evalgate.store.records import Pair

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["ITEM_COLUMNS", "PAIR_COLUMNS", "RunFrames", "load_run"]

ITEM_COLUMNS = (
    "run_id", "suite", "arm", "variant", "item_id", "repeat", "prompt_hash", "primary_metric", "score",
    "error", "latency_s", "prompt_tokens", "completion_tokens", "extracted", "response",
)  # fmt: skip
PAIR_COLUMNS = (
    "suite", "item_id", "repeat", "metric", "baseline", "candidate", "delta", "flipped", "direction",
    "baseline_extracted", "candidate_extracted", "baseline_response", "candidate_response",
)  # fmt: skip


def _pandas() -> Any:
    try:
        import pandas
    except ImportError as exc:  # pragma: no cover - pandas comes with lm-eval's datasets
        raise ConfigError("pandas is not installed", fix="pip install pandas") from exc
    return pandas


def _json(value: Any) -> Any:
    """Nested answers (choice log-likelihoods, chat messages) as JSON text, so every column is flat."""
    return value if value is None or isinstance(value, (str, int, float, bool)) else json.dumps(value)


class RunFrames:
    """One run folder; each method builds a fresh DataFrame from its files."""

    def __init__(self, run: RunData) -> None:
        self._run = run
        self.path = run.dir
        self.manifest = run.manifest

    def items(self) -> pd.DataFrame:
        rows = []
        metrics: dict[str, None] = {}
        for suite, arms in self._run.records.items():
            primary = self.manifest.suites[suite].metrics[0]
            for arm, recs in arms.items():
                for r in recs.values():
                    row = {
                        "run_id": r.run_id or self.manifest.run_id,
                        "suite": suite,
                        "arm": arm,
                        "variant": r.variant,
                        "item_id": r.item_id,
                        "repeat": r.repeat,
                        "prompt_hash": r.prompt_hash,
                        "primary_metric": primary,
                        "score": r.metrics.get(primary),
                        "error": r.error,
                        "latency_s": r.latency_s,
                        "prompt_tokens": r.tokens.get("prompt"),
                        "completion_tokens": r.tokens.get("completion"),
                        "extracted": _json(r.extracted),
                        "response": _json(r.response),
                    }
                    for name, value in r.metrics.items():
                        metrics[name] = None
                        row[f"metric:{name}"] = value
                    rows.append(row)
        columns = [*ITEM_COLUMNS, *(f"metric:{m}" for m in metrics)]
        return _pandas().DataFrame(rows, columns=columns)

    def pairs(self) -> pd.DataFrame:
        return self._pairs(self._run.pairs)

    def aa_pairs(self) -> pd.DataFrame:
        """The baseline against its own second launch (``--aa``): what noise alone changes."""
        return self._pairs(self._run.aa_pairs)

    def _pairs(self, by_suite: dict[str, list[Pair]]) -> pd.DataFrame:
        rows = []
        for suite, pairs in by_suite.items():
            metric = self.manifest.suites[suite].metrics[0]
            for p in pairs:
                b, c = p.baseline.metrics.get(metric), p.candidate.metrics.get(metric)
                delta = c - b if b is not None and c is not None else None
                rows.append(
                    {
                        "suite": suite,
                        "item_id": p.item_id,
                        "repeat": p.repeat,
                        "metric": metric,
                        "baseline": b,
                        "candidate": c,
                        "delta": delta,
                        "flipped": b != c,
                        "direction": "same" if not delta else "improvement" if delta > 0 else "regression",
                        "baseline_extracted": _json(p.baseline.extracted),
                        "candidate_extracted": _json(p.candidate.extracted),
                        "baseline_response": _json(p.baseline.response),
                        "candidate_response": _json(p.candidate.response),
                    }
                )
        return _pandas().DataFrame(rows, columns=list(PAIR_COLUMNS))

    def verdict(self) -> pd.DataFrame:
        path = self.path / "verdict.json"
        if not path.exists():
            raise ConfigError(f"{path} does not exist", fix=f"render it first: evalgate report {self.path}")
        doc = json.loads(path.read_text(encoding="utf-8"))
        rows = [{"kind": "accuracy", **r} for r in doc.get("suites", [])]
        rows += [{"kind": "agreement", **r} for r in doc.get("agreement", [])]
        for s in doc.get("lengths", []):  # long-context suites (gate/_lengths.py)
            where = {"suite": s["suite"], "metric": s["metric"]}
            rows += [{"kind": "length", **where, **r} for r in s["rows"]]
            if s.get("trend"):
                rows.append({"kind": "longest length", **where, **s["trend"]})
        frame = _pandas().DataFrame(rows)
        frame.attrs["verdict"] = doc.get("verdict")
        frame.attrs["reason"] = doc.get("reason")
        return frame


def load_run(path: str | Path) -> RunFrames:
    """The run folder at ``path`` (what ``evalgate compare`` printed) as DataFrames."""
    path = Path(path)
    if not (path / "manifest.json").exists():
        raise ConfigError(
            f"{path} holds no run (no manifest.json)", fix="pass the folder `evalgate compare` printed"
        )
    return RunFrames(RunData(path))
