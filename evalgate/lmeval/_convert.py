"""lm-eval samples -> evalgate suites and records.

A task that one of evalgate's suites runs (its lm-eval YAML names the task: ``arc_easy``,
``gsm8k``, ``mmlu_<subject>``, ``mmlu_pro_<category>``) lands in that suite, with the suite's item
ids, metric names and primary metric, so an imported pair reads exactly like a live one and
MMLU's 57 subject tasks pool into one ``mmlu`` suite. Any other task becomes a suite of its own
name whose metrics are lm-eval's ``metric,filter`` keys (``,none`` dropped), the first one
primary.

A perplexity task (``output_type: loglikelihood_rolling``, e.g. wikitext) logs each metric as a
``(loglik, count)`` pair: ``ConfigurableTask.process_results`` in lm_eval/api/task.py (and
wikitext's own ``preprocess_wikitext.process_results``) returns ``word_perplexity: (ll, words)``,
``byte_perplexity`` and ``bits_per_byte: (ll, bytes)``, and ``evaluator.evaluate`` writes that
dict into the sample (``example.update(metrics)``), so the JSONL holds ``[ll, count]`` lists.
Such a task becomes a ``drift`` suite of its own name whose records carry ``{"loglik", "words",
"bytes"}``: one log-likelihood per document, the counts the corpus perplexity divides by.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from evalgate.errors import ConfigError
from evalgate.lmeval._read import LmEvalOutput
from evalgate.suites import LmEvalSuite, Member, default_registry, lmeval_tasks

__all__ = [
    "BINARY_METRICS",
    "ROLLING_UNITS",
    "ImportedSuite",
    "check_same_prompts",
    "known_tasks",
    "suite_records",
]

_MC_TYPES = {"multiple_choice", "loglikelihood"}
ROLLING_UNITS = {"word_perplexity": "words", "byte_perplexity": "bytes", "bits_per_byte": "bytes"}
"""lm-eval's rolling metrics (lm_eval/api/metrics.py, output_type loglikelihood_rolling) -> the
unit their pair counts: the same loglik over words or over UTF-8 bytes."""
_UNIT_ORDER = ("words", "bytes")
MAX_METRIC = 1e12
"""The largest magnitude a per-document metric may have: lm-eval's are scores, shares and
log-likelihoods of one document; ``1e308`` is no score, and the gate's sums would overflow."""
MAX_COUNT = 1 << 32
"""The most words or bytes one document may count (4 GiB of text; the samples file that logs it is
at most ``MAX_SAMPLES_BYTES``)."""
MAX_NATS_PER_UNIT = 500.0
"""The most nats one document may lose per word or byte on average. A language model's token
logprob bottoms out near -104 (float32's smallest probability) and real logit ranges keep it far
above that; a word is a few tokens. 500 leaves a wide margin and keeps exp(nats per unit), the
perplexity lm-eval reports, inside float range; past it the loglik is no model's (``-1e7`` over a
short document, ``-1e300``) and is refused, never averaged into a ratio or overflowed."""
LL_TOLERANCE = 1e-3
"""How far above 0 a log-likelihood may round (float32 sums); more is no log-probability."""
BINARY_METRICS = frozenset({"acc", "acc_norm", "acc_mutual_info", "exact_match"})
"""lm-eval metrics that are 0 or 1 per document (right or wrong: lm_eval/api/metrics.py and the
tasks' process_results); any other value in a samples file is not a score, and is refused."""


@dataclass
class ImportedSuite:
    """One evalgate suite assembled from one or more lm-eval tasks of an arm."""

    name: str
    version: int
    metrics: list[str]
    kind: str
    tasks: list[str] = field(default_factory=list)
    metric_kind: str | None = None
    """"drift" for a perplexity task; None: binary or continuous, decided from the values."""
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
        if output_type == "loglikelihood_rolling" or any(_has_pair(r) for r in rows):
            suites[task] = _rolling_suite(out, task, rows, label=label)
            continue
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
        for i, row in enumerate(rows):
            _add(suite, row, task=task, known=k, label=f"{label}: {out.at(task, i)}")
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
    fix = "give the samples file lm-eval wrote, unedited"
    try:
        item_id = str(known[0].item_key(known[1], doc, doc_id)) if known else str(doc_id)
    except (KeyError, IndexError, TypeError, ValueError) as exc:
        raise ConfigError(
            f"{label}: {task} doc_id {doc_id}: its doc has no usable {exc} field, which {known[0].name if known else task} "
            "names its items by",
            fix=fix,
        ) from None
    filt = str(row.get("filter", "none"))
    item = suite.items.get(item_id)
    if item is None:
        mc = suite.kind == "loglikelihood"
        if mc:
            _check_choices(row.get("resps"), f"{label}: {task} doc_id {doc_id}")
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
        if isinstance(row.get(name), str):
            raise ConfigError(
                f"{label}: {task} doc_id {doc_id}: {key} = {row.get(name)!r} is a string, not a number "
                "(lm-eval logs each metric's value as a JSON number)",
                fix=fix,
            )
        if value is not None and math.isfinite(value) and abs(value) > MAX_METRIC:
            raise ConfigError(
                f"{label}: {task} doc_id {doc_id}: {key} = {value:g} is no per-document score "
                f"(beyond +-{MAX_METRIC:g})",
                fix=fix,
            )
        if name in BINARY_METRICS and value is not None and math.isfinite(value) and value not in (0.0, 1.0):
            raise ConfigError(
                f"{label}: {task} doc_id {doc_id}: {key} = {row.get(name)!r}, but {name} is 0 or 1 per "
                "document (right or wrong)",
                fix="give the samples file lm-eval wrote, unedited",
            )
        if value is None or not math.isfinite(value):  # kept so the gate can refuse it, never dropped
            value = float("nan")
        item["metrics"][key] = value
    filtered = row.get("filtered_resps")
    if suite.kind == "loglikelihood":
        _check_choices(filtered, f"{label}: {task} doc_id {doc_id}")
        pairs = _choice_pairs(filtered) or item["response"]
        if pairs:
            item["extracted"] = {"pred": max(range(len(pairs)), key=lambda i: pairs[i][0])}
    else:
        item["extracted"][filt] = _first_text(filtered)


def _check_choices(resps: Any, where: str) -> None:
    """A multiple-choice sample's choice log-likelihoods are finite and <= 0 (``LL_TOLERANCE``):
    a NaN or a +5 is no log-probability, and the KL and top-1 rows would be computed from it."""
    for i, (ll, _) in enumerate(_choice_pairs(resps) or []):
        if not math.isfinite(ll) or ll > LL_TOLERANCE:
            raise ConfigError(
                f"{where}: choice {i} has a log-likelihood of {ll!r}, not a finite number <= 0",
                fix="give the samples file lm-eval wrote, unedited",
            )


def _has_pair(row: dict[str, Any]) -> bool:
    """A rolling metric logged as a list: how a perplexity task shows itself when no results JSON
    gives its output_type. Any two-element list is not enough: lm-eval's corpus metrics log
    ``(gold, pred)`` pairs too (``mcc``, ``f1``, ``bleu``: lm_eval/api/metrics.py)."""
    return any(isinstance(row.get(m), list) for m in row.get("metrics") or [] if m in ROLLING_UNITS)


def _pair(value: Any) -> tuple[float, float] | None:
    """A logged ``[loglik, count]`` as two floats, None when it is not two numbers."""
    if not isinstance(value, list) or len(value) != 2:
        return None
    ll, count = (_number(v) if not isinstance(v, bool) else None for v in value)
    return None if ll is None or count is None else (ll, count)


def _document(row: dict[str, Any], where: str, skipped: set[str]) -> dict[str, float]:
    """One perplexity document's ``{"loglik", "words", "bytes"}``, each value checked: a finite
    loglik <= 0 within ``MAX_NATS_PER_UNIT`` of its counts, whole counts > 0 up to ``MAX_COUNT``,
    one loglik and one count per unit across its metrics, no more words than bytes."""
    fix = "give the samples file lm-eval wrote for this task, unedited"
    values: dict[str, float] = {}
    for name in row.get("metrics") or []:
        unit = ROLLING_UNITS.get(name)
        raw = row.get(name)
        if unit is None and not isinstance(raw, list):
            skipped.add(name)  # a scalar beside the pairs (a custom task's extra metric)
            continue
        pair = _pair(raw)
        if unit is None or pair is None:
            what = (
                f"{name} = {raw!r} is not a [loglik, count] pair"
                if pair is None
                else (
                    f"{name} is a [loglik, count] pair of no known unit "
                    f"(evalgate reads {', '.join(ROLLING_UNITS)})"
                )
            )
            raise ConfigError(f"{where}: {what}", fix=fix)
        ll, count = pair
        if not math.isfinite(ll):
            raise ConfigError(f"{where}: {name} has a non-finite loglik ({ll})", fix=fix)
        if not math.isfinite(count) or count <= 0:
            raise ConfigError(f"{where}: {name} counts {count} {unit}; a count must be > 0", fix=fix)
        if count != int(count) or count > MAX_COUNT:
            raise ConfigError(
                f"{where}: {name} counts {count:g} {unit}: not a whole number of {unit} up to "
                f"{MAX_COUNT:g} (one document's)",
                fix=fix,
            )
        if ll > LL_TOLERANCE:
            raise ConfigError(
                f"{where}: {name} has a positive loglik ({ll:g}): a log-likelihood is <= 0", fix=fix
            )
        if -ll > MAX_NATS_PER_UNIT * count:
            raise ConfigError(
                f"{where}: {name} has a loglik of {ll:g} over {count:g} {unit}: beyond what any "
                f"model's log-probabilities can sum to ({MAX_NATS_PER_UNIT:g} nats per {unit[:-1]})",
                fix=fix,
            )
        for key, v in (("loglik", ll), (unit, count)):
            if key in values and values[key] != v:
                raise ConfigError(
                    f"{where}: {name} has {key} {v} where another metric of the document has "
                    f"{values[key]} (one document has one {key})",
                    fix=fix,
                )
            values[key] = v
    if "loglik" not in values:
        raise ConfigError(f"{where}: no [loglik, count] metric in {row.get('metrics')!r}", fix=fix)
    if "words" in values and "bytes" in values and values["words"] > values["bytes"] + 1:
        raise ConfigError(
            f"{where}: {values['words']:g} words in {values['bytes']:g} bytes: a word is at least a byte",
            fix=fix,
        )
    return values


def _rolling_suite(out: LmEvalOutput, task: str, rows: list[dict[str, Any]], *, label: str) -> ImportedSuite:
    """A perplexity task as a drift suite: per document its loglik and the counts it is divided by.

    Every pair of one document must hold the same loglik (lm-eval logs one value per document
    under each metric) and the same count per unit; a non-finite loglik, a count <= 0 or a value
    that is not a pair is refused (exit 2) naming the document, never averaged over."""
    suite = ImportedSuite(task, out.version(task), [], "loglikelihood", metric_kind="drift")
    suite.tasks.append(task)
    skipped: set[str] = set()
    for i, row in enumerate(rows):
        doc_id = int(row["doc_id"])
        where = f"{label}: {task} doc_id {doc_id}"
        fix = "give the samples file lm-eval wrote for this task, unedited"
        try:
            values = _document(row, where, skipped)
        except ConfigError as exc:  # the file and row, after the document: what lm-eval would show
            raise ConfigError(f"{exc.cause} (at {out.at(task, i)})", fix=exc.fix) from None
        item = suite.items.get(str(doc_id))
        if item is not None and (
            item["doc_hash"] != str(row.get("doc_hash", "")) or item["metrics"] != values
        ):
            raise ConfigError(f"{where} appears twice with different documents or values", fix=fix)
        suite.items[str(doc_id)] = {
            "task": task,
            "doc_id": doc_id,
            "prompt_hash": str(row.get("prompt_hash", ""))[:16],
            "doc_hash": str(row.get("doc_hash", "")),
            "target": row.get("target"),
            "response": None,
            "extracted": {},
            "metrics": values,
            "where": out.at(task, i),
        }
    units = {u for it in suite.items.values() for u in it["metrics"] if u != "loglik"}
    for it in suite.items.values():
        if missing := units - set(it["metrics"]):
            raise ConfigError(
                f"{label}: {task} doc_id {it['doc_id']} logs no {', '.join(sorted(missing))} "
                "where other documents do",
                fix="give the samples file lm-eval wrote for this task, unedited",
            )
    suite.metrics = ["loglik", *(u for u in _UNIT_ORDER if u in units)]
    if suite.items and all(it["metrics"]["loglik"] == 0 for it in suite.items.values()):
        raise ConfigError(
            f"{label}: {task}: every document's loglik is 0 (perplexity 1) in {out.files.get(task, task)}: "
            "no model scored these documents",
            fix="give the samples file lm-eval wrote for this task, unedited",
        )
    if skipped:
        out.notes.append(
            f"{label}: {task} is a perplexity task; its {', '.join(sorted(skipped))} not imported"
        )
    return suite


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
