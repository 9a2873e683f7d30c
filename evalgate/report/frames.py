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
  "same"), baseline_extracted, candidate_extracted, baseline_response, candidate_response. A drift
  suite's documents have no answer to flip: metric "loglik", flipped False, direction "drift".
``verdict()``: one row per gate row of verdict.json (``kind`` "accuracy" for the suites' metric
  rows, "agreement" for the flip-budget rows; for a long-context suite "length" per context length
  and "longest length" for its gated row; for a drift suite "drift" per budget row: measure kld,
  ppl_ratio or top1_agree, pair candidate or aa, estimate, lower, upper, budget, status, reason,
  with the pair's per-token KL quantiles p50, p90, p99, p99.9 on its kld row; "flip drift" per
  multiple-choice suite: the mean choice KL of flipped and unflipped items and its AUC), with that
  row's fields as columns.
``drift()``: one row per document per pair of arms of each drift suite (``DRIFT_COLUMNS``): suite,
  item_id, repeat, pair (candidate, or aa for the A/A arm), unit, units, baseline_loglik,
  other_loglik, change_per_unit (nats), kld_mean and top1_agree (live distributions only), positions.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from evalgate.errors import ConfigError
from evalgate.gate import RunData
from evalgate.report._documents import document_numbers
from evalgate.store.files import read_document
from evalgate.store.records import Pair

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["DRIFT_COLUMNS", "ITEM_COLUMNS", "PAIR_COLUMNS", "RunFrames", "load_run"]

ITEM_COLUMNS = (
    "run_id", "suite", "arm", "variant", "item_id", "repeat", "prompt_hash", "primary_metric", "score",
    "error", "latency_s", "prompt_tokens", "completion_tokens", "extracted", "response",
)  # fmt: skip
PAIR_COLUMNS = (
    "suite", "item_id", "repeat", "metric", "baseline", "candidate", "delta", "flipped", "direction",
    "baseline_extracted", "candidate_extracted", "baseline_response", "candidate_response",
)  # fmt: skip
DRIFT_COLUMNS = (
    "suite", "item_id", "repeat", "pair", "unit", "units", "baseline_loglik", "other_loglik",
    "change_per_unit", "kld_mean", "top1_agree", "positions",
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
            drift = self.manifest.suites[suite].metric_kind == "drift"
            for p in pairs:
                b, c = p.baseline.metrics.get(metric), p.candidate.metrics.get(metric)
                delta = c - b if b is not None and c is not None else None
                direction = "same" if not delta else "improvement" if delta > 0 else "regression"
                rows.append(
                    {
                        "suite": suite,
                        "item_id": p.item_id,
                        "repeat": p.repeat,
                        "metric": metric,
                        "baseline": b,
                        "candidate": c,
                        "delta": delta,
                        "flipped": False if drift else b != c,
                        "direction": "drift" if drift else direction,
                        "baseline_extracted": _json(p.baseline.extracted),
                        "candidate_extracted": _json(p.candidate.extracted),
                        "baseline_response": _json(p.baseline.response),
                        "candidate_response": _json(p.candidate.response),
                    }
                )
        return _pandas().DataFrame(rows, columns=list(PAIR_COLUMNS))

    def drift(self) -> pd.DataFrame:
        """Each drift suite's documents per pair of arms (the A/A arm's with ``--aa``)."""
        rows = []
        for pair_name, by_suite in (("candidate", self._run.pairs), ("aa", self._run.aa_pairs)):
            for suite, pairs in by_suite.items():
                if self.manifest.suites[suite].metric_kind != "drift":
                    continue
                for p in pairs:
                    x = document_numbers(p)
                    rows.append({
                        "suite": suite, "item_id": p.item_id, "repeat": p.repeat, "pair": pair_name,
                        "unit": x.unit, "units": x.units, "baseline_loglik": x.baseline_loglik,
                        "other_loglik": x.candidate_loglik, "change_per_unit": x.change_per_unit,
                        "kld_mean": x.kld_mean, "top1_agree": x.top1_agree, "positions": x.positions,
                    })  # fmt: skip
        return _pandas().DataFrame(rows, columns=list(DRIFT_COLUMNS))

    def verdict(self) -> pd.DataFrame:
        path = self.path / "verdict.json"
        if not path.exists():
            raise ConfigError(f"{path} does not exist", fix=f"render it first: evalgate report {self.path}")
        doc = json.loads(read_document(path).decode("utf-8"))  # a regular file, bounded
        rows = [{"kind": "accuracy", **r} for r in doc.get("suites", [])]
        rows += [{"kind": "agreement", **r} for r in doc.get("agreement", [])]
        for s in doc.get("lengths", []):  # long-context suites (gate/_lengths.py)
            where = {"suite": s["suite"], "metric": s["metric"]}
            rows += [{"kind": "length", **where, **r} for r in s["rows"]]
            if s.get("trend"):
                rows.append({"kind": "longest length", **where, **s["trend"]})
        for s in doc.get("drift", []):  # drift suites (gate/_drift.py)
            for r in s["rows"]:
                quantiles = (s.get("quantiles") or {}).get(r["pair"], {}) if r["measure"] == "kld" else {}
                rows.append({"kind": "drift", **r, **quantiles})
        rows += [{"kind": "flip drift", **r} for r in doc.get("flip_drift", [])]
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
