"""lm-eval samples -> evalgate suites and records.

A task that one of evalgate's suites runs (its lm-eval YAML names the task: ``arc_easy``,
``gsm8k``, ``mmlu_<subject>``, ``mmlu_pro_<category>``) lands in that suite, with the suite's item
ids, metric names and primary metric, so an imported pair reads exactly like a live one and
MMLU's 57 subject tasks pool into one ``mmlu`` suite. Any other task becomes a suite of its own
name whose metrics are lm-eval's ``metric,filter`` keys (``,none`` dropped), the first one
primary.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from evalgate.errors import ConfigError
from evalgate.lmeval._read import LmEvalOutput
from evalgate.suites import LmEvalSuite, Member, default_registry, lmeval_tasks

__all__ = ["ImportedSuite", "check_same_prompts", "known_tasks", "suite_records"]

_MC_TYPES = {"multiple_choice", "loglikelihood", "loglikelihood_rolling"}


@dataclass
class ImportedSuite:
    """One evalgate suite assembled from one or more lm-eval tasks of an arm."""

    name: str
    version: int
    metrics: list[str]
    kind: str
    tasks: list[str] = field(default_factory=list)
    items: dict[str, dict[str, Any]] = field(default_factory=dict)
    """item_id -> the record fields (prompt_hash, doc_hash, target, response, extracted, metrics)."""


def known_tasks() -> dict[str, tuple[LmEvalSuite, Member]]:
    """lm-eval task name -> the evalgate suite (and member) that runs it, from the suites' own
    definitions."""
    return lmeval_tasks(default_registry())


def _metric_key(metric: str, filt: str) -> str:
    return metric if filt in ("none", "", None) else f"{metric},{filt}"


def _number(value: Any) -> float | None:
    if isinstance(value, bool):
        return float(value)
    if isinstance(value, (int, float)):
        return float(value)
    return None


def _choice_pairs(resps: Any) -> list[list[Any]] | None:
    """Per-choice [loglik, is_greedy] from a multiple-choice sample's ``resps`` (lm-eval writes
    every value as a string: ``[[["-12.8", "False"]], ...]``)."""
    out = []
    for r in resps or []:
        pair = r[0] if isinstance(r, list) and r and isinstance(r[0], list) else r
        if not isinstance(pair, list) or len(pair) < 1:
            return None
        try:
            ll = float(pair[0])
        except (TypeError, ValueError):
            return None
        greedy = str(pair[1]).lower() == "true" if len(pair) > 1 else False
        out.append([ll, greedy])
    return out or None


def _first_text(resps: Any) -> Any:
    while isinstance(resps, list) and resps:
        resps = resps[0]
    return resps if isinstance(resps, str) else None


def suite_records(out: LmEvalOutput, *, label: str) -> dict[str, ImportedSuite]:
    """Every task of one arm's lm-eval run, as evalgate suites keyed by suite name."""
    known = known_tasks()
    suites: dict[str, ImportedSuite] = {}
    for task, rows in sorted(out.samples.items()):
        k = known.get(task)
        output_type = out.task_config(task).get("output_type")
        if k:
            own = k[0]
            suite = suites.setdefault(
                own.name, ImportedSuite(own.name, own.version, list(own.metrics), own.kind)
            )
        else:
            mc = output_type in _MC_TYPES or (output_type is None and _choice_pairs(rows[0].get("resps")))
            suite = suites.setdefault(
                task, ImportedSuite(task, out.version(task), [], "loglikelihood" if mc else "generate")
            )
        suite.tasks.append(task)
        for row in rows:
            _add(suite, row, task=task, known=k, label=label)
    for suite in suites.values():
        if not suite.metrics:
            seen: dict[str, None] = {}
            for item in suite.items.values():
                seen.update(dict.fromkeys(item["metrics"]))
            suite.metrics = list(seen)
    return suites


def _add(
    suite: ImportedSuite,
    row: dict[str, Any],
    *,
    task: str,
    known: tuple[LmEvalSuite, Member] | None,
    label: str,
) -> None:
    doc_id = int(row["doc_id"])
    doc = row.get("doc") if isinstance(row.get("doc"), dict) else {}
    item_id = str(known[0].item_key(known[1], doc, doc_id)) if known else str(doc_id)
    filt = str(row.get("filter", "none"))
    item = suite.items.get(item_id)
    if item is None:
        mc = suite.kind == "loglikelihood"
        item = suite.items[item_id] = {
            "task": task,
            "doc_id": doc_id,
            "prompt_hash": str(row.get("prompt_hash", ""))[:16],
            "doc_hash": str(row.get("doc_hash", "")),
            "target": row.get("target"),
            "response": _choice_pairs(row.get("resps")) if mc else _first_text(row.get("resps")),
            "extracted": {},
            "metrics": {},
        }
    elif item["doc_hash"] != str(row.get("doc_hash", "")):
        raise ConfigError(
            f"{label}: {task} doc_id {doc_id} appears twice with different documents",
            fix="give one lm-eval run per arm (one --output_path folder, or its files of one date)",
        )
    names = list(row.get("metrics") or [])
    for name in names:
        value = _number(row.get(name))
        key = _metric_key(name, filt)
        if value is None or not math.isfinite(value):  # kept so the gate can refuse it, never dropped
            value = float("nan")
        item["metrics"][key] = value
    filtered = row.get("filtered_resps")
    if suite.kind == "loglikelihood":
        pairs = _choice_pairs(filtered) or item["response"]
        if pairs:
            item["extracted"] = {"pred": max(range(len(pairs)), key=lambda i: pairs[i][0])}
    else:
        item["extracted"][filt] = _first_text(filtered)


def check_same_prompts(task_items: Iterable[tuple[str, dict[str, Any], dict[str, Any]]], suite: str) -> None:
    """Refuse a pair whose documents or prompts differ (e.g. another num_fewshot): exit 2 naming
    the task and the first differing doc_id."""
    for item_id, b, c in task_items:
        for key, what in (("doc_hash", "document"), ("prompt_hash", "prompt")):
            if b[key] and c[key] and b[key] != c[key]:
                raise ConfigError(
                    f"{suite}: task {b['task']} doc_id {b['doc_id']} ({item_id}) has a different {what} "
                    "on the two arms, so the runs did not ask the same questions",
                    fix="rerun both with the same lm-eval task config (num_fewshot, fewshot seed, "
                    "chat template, --limit/--samples) and the same data",
                )
