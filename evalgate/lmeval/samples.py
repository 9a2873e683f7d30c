"""Gate two lm-eval runs that already exist: ``evalgate compare --baseline-samples A
--candidate-samples B``.

Teams that quantize a model have usually run lm-eval with ``--log_samples`` on both
configurations. Those logs hold what a paired test needs (per document: ``doc_id``,
``doc_hash``, ``prompt_hash``, each metric's value, and the choice log-likelihoods), so no server
is needed: the samples become an ordinary run folder (manifest, ``items/*.jsonl`` in evalgate's
record schema), and the verdict and reports come from that folder by the same code as a live run
(``evalgate report`` re-renders it). Items pair by document; a pair whose documents or prompts
differ is refused, never compared.

A perplexity task (``loglikelihood_rolling``: wikitext) imports as a ``drift`` suite of
per-document log-likelihoods (``_convert``); lm-eval's own corpus aggregates from
``results_*.json`` (``results[task]["word_perplexity,none"]``, computed by
``evaluator_utils`` with lm_eval/api/metrics.py's ``weighted_perplexity`` and ``bits_per_byte``)
are kept in the manifest (``imported[arm]["aggregates"]`` and the suite's ``source``) beside
evalgate's recomputation (``stats.rolling_aggregates``), and a disagreement is noted.
"""

from __future__ import annotations

import math
import re
import secrets
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Literal

from evalgate.errors import ConfigError
from evalgate.lmeval._convert import ROLLING_UNITS, ImportedSuite, check_same_prompts, suite_records
from evalgate.lmeval._read import LmEvalOutput, read_lmeval
from evalgate.redact import env_secrets, mask_args, redact
from evalgate.request import CompareRequest
from evalgate.stats import rolling_aggregates
from evalgate.store.facts import RecordExtra, ServerFacts
from evalgate.store.lock import RunLock
from evalgate.store.manifest import ArmInfo, LaunchInfo, Manifest, SuiteInfo, VariantInfo, write_manifest
from evalgate.store.records import Record, RecordStore

__all__ = ["ENGINE", "import_samples", "safe_model_args"]

ENGINE = "lm-eval samples"
"""The manifest's ``engine`` for an imported run: nothing was launched."""


def safe_model_args(args: str) -> str:
    """lm-eval's ``model_args`` as a report may show it: values of secret keys (api_key,
    hf_token, password; not tokenizer: ``redact.is_secret_key``), URL credentials and the
    attach-mode keys masked."""
    return redact(mask_args(args), secrets=env_secrets())


def _own_lmeval_aggregates(
    out: LmEvalOutput, suites: dict[str, ImportedSuite]
) -> dict[str, dict[str, float]]:
    """Per perplexity task, lm-eval's own aggregates from the results JSON (``metric,filter``
    keys, ``,none`` dropped); a value evalgate's recomputation from the samples does not match
    (1e-6 relative: e.g. a samples file cut short) is noted, since the gate uses the samples."""
    found: dict[str, dict[str, float]] = {}
    results = (out.results or {}).get("results") or {}
    for name, suite in suites.items():
        if suite.metric_kind != "drift":
            _note_accuracy(out, name, suite, results.get(name))
            continue
        own = {
            m: float(v)
            for m in ROLLING_UNITS
            if isinstance(v := (results.get(name) or {}).get(f"{m},none"), (int, float))
            and not isinstance(v, bool)
        }
        if not own:
            continue
        found[name] = own
        mine = rolling_aggregates(it["metrics"] for it in suite.items.values())
        for m, v in own.items():
            if m in mine and not math.isclose(mine[m], v, rel_tol=1e-6):
                out.notes.append(
                    f"{name}: lm-eval's own {m} is {v:.6g} but the samples give {mine[m]:.6g} "
                    "(the samples are what is gated)"
                )
    return found


def _note_accuracy(out: LmEvalOutput, name: str, suite: ImportedSuite, own: Any) -> None:
    """A results JSON whose metric for a one-task suite is not the samples' mean (a results file of
    another run beside these samples: gsm8k claiming 0.50 where its samples score 0.92) is noted:
    the samples are what is gated, and the reader should know the two files disagree."""
    if not isinstance(own, dict) or suite.tasks != [name] or not suite.items:
        return
    for metric in suite.metrics:
        key = metric if "," in metric else f"{metric},none"
        claimed = own.get(key)
        values = [it["metrics"].get(metric) for it in suite.items.values()]
        if not isinstance(claimed, (int, float)) or isinstance(claimed, bool) or None in values:
            continue
        mean = math.fsum(float(v) for v in values) / len(values)
        if not math.isclose(mean, float(claimed), rel_tol=1e-6, abs_tol=1e-9):
            out.notes.append(
                f"{name}: lm-eval's results file claims {metric} {float(claimed):.4g}, but its samples "
                f"give {mean:.4g} over {len(values)} documents (the samples are what is gated: are "
                "they from the same run?)"
            )


def _lmeval_info(out: LmEvalOutput, suites: dict[str, ImportedSuite]) -> dict[str, Any]:
    """What the report shows of one arm's lm-eval run; model_args can carry an API key."""
    aggregates = _own_lmeval_aggregates(out, suites)
    r = out.results or {}
    cfg = r.get("config") if isinstance(r.get("config"), dict) else {}
    args = cfg.get("model_args")
    if isinstance(args, dict):
        args = ",".join(f"{k}={v}" for k, v in args.items())
    return {
        "path": out.where,
        "results_file": str(out.results_path) if out.results_path else None,
        "run": out.run,
        "layout": out.layout,
        "model": cfg.get("model"),
        "model_args": safe_model_args(str(args)) if args else None,
        "model_name": r.get("model_name"),
        "lm_eval_version": r.get("lm_eval_version"),
        "git_hash": r.get("git_hash"),
        "date": r.get("date"),
        "n_shot": r.get("n-shot"),
        "tasks": sorted(out.samples),
        "aggregates": aggregates,
        "notes": out.notes,
    }


def _check_two_runs(base: LmEvalOutput, cand: LmEvalOutput, *, same_ok: bool) -> None:
    """Refuse one run on both arms (a samples file on both, or every shared task's samples
    byte-identical: one task alike can be a real, deterministic tie): such a pair passes whatever
    the candidate is. ``--same-server-ok`` makes it an A/A check, said in a note."""
    tasks = sorted(set(base.files) & set(cand.files))
    same = [t for t in tasks if base.files[t].resolve() == cand.files[t].resolve()]
    alike = bool(tasks) and all(base.digests[t] == cand.digests[t] for t in tasks)
    identical = tasks if alike and not same else []
    if not same and not identical:
        return
    what = (
        f"both arms are the same samples files ({', '.join(str(base.files[t]) for t in same)})"
        if same
        else f"the two arms' samples of {', '.join(identical)} are identical document by document "
        "(byte-identical or reordered: one run, twice)"
    )
    if not same_ok:
        raise ConfigError(
            f"{what}: such a pair passes whatever the candidate is",
            fix="give each arm its own run (--baseline-run/--candidate-run pick one from a shared "
            "folder), or pass --same-server-ok for an A/A check of the harness",
        )
    cand.notes.append(
        f"candidate: A/A: {what}; --same-server-ok: this checks the harness and says nothing about a candidate"
    )


def _tokenizer(out: LmEvalOutput) -> str | None:
    """The tokenizer an arm's lm-eval ``model_args`` names (``tokenizer=``), None when it names none."""
    cfg = (out.results or {}).get("config")
    args = cfg.get("model_args") if isinstance(cfg, dict) else None
    if isinstance(args, dict):
        return str(args["tokenizer"]) if args.get("tokenizer") else None
    m = re.search(r"(?:^|,)\s*tokenizer=([^,]+)", args) if isinstance(args, str) else None
    return m.group(1).strip() if m else None


def _note_tokenizers(base: LmEvalOutput, cand: LmEvalOutput) -> None:
    """Arms whose model_args name different tokenizers score different token sequences: said."""
    b, c = _tokenizer(base), _tokenizer(cand)
    if b and c and b != c:
        cand.notes.append(
            f"candidate: the arms' model_args name different tokenizers (baseline {safe_model_args(b)}, "
            f"candidate {safe_model_args(c)}): their prompts and log-likelihoods are not the same tokens, "
            "so a difference may be the tokenizer's, not the numerics'"
        )


def _pair_suites(
    base: dict[str, ImportedSuite], cand: dict[str, ImportedSuite], wanted: tuple[str, ...] | None
) -> list[str]:
    names = [s for s in base if s in cand]
    only = sorted(set(base) ^ set(cand))
    if wanted is not None:
        missing = [s for s in wanted if s not in names]
        if missing:
            raise ConfigError(
                f"--suites {','.join(missing)}: not in both lm-eval runs (both have: {', '.join(names) or 'nothing'})",
                fix="name suites both runs logged, or drop --suites to gate every shared one",
            )
        return list(wanted)
    if only:
        raise ConfigError(
            f"the two lm-eval runs logged different tasks: {', '.join(only)} on one arm only",
            fix="rerun the missing tasks, or pass --suites with the ones both runs have",
        )
    if not names:
        raise ConfigError("the two lm-eval runs share no task", fix="give both arms' --log_samples output")
    return names


def _check_items(name: str, b: ImportedSuite, c: ImportedSuite) -> None:
    if set(b.items) != set(c.items):
        extra = sorted(set(b.items) ^ set(c.items))
        raise ConfigError(
            f"{name}: the runs scored different documents ({len(b.items)} on the baseline, "
            f"{len(c.items)} on the candidate; e.g. {extra[0]} on one only)",
            fix="run lm-eval with the same --limit (or --samples) on both arms",
        )
    check_same_prompts(((i, b.items[i], c.items[i]) for i in sorted(b.items)), name)
    if b.metric_kind == "drift" or c.metric_kind == "drift":
        for i in sorted(b.items):
            bm, cm = b.items[i]["metrics"], c.items[i]["metrics"]
            for unit in ("words", "bytes"):
                if unit in bm and unit in cm and bm[unit] != cm[unit]:
                    raise ConfigError(
                        f"{name}: doc_id {b.items[i]['doc_id']} counts {bm[unit]:g} {unit} on the baseline "
                        f"({b.items[i].get('where')}) and {cm[unit]:g} on the candidate "
                        f"({c.items[i].get('where')}): not the same document",
                        fix="give the samples files lm-eval wrote for the same documents, unedited",
                    )


def _metric_kind(b: ImportedSuite, c: ImportedSuite) -> Literal["binary", "continuous", "drift"]:
    """drift for a perplexity task (per-document log-likelihoods); binary when the primary metric
    is 0 or 1 on every item of both arms (McNemar), else continuous (a graded metric: the paired
    sign-flip test). NaN is left for the gate to refuse."""
    if b.metric_kind == "drift" or c.metric_kind == "drift":
        return "drift"
    primary = b.metrics[0] if b.metrics else None
    values = [it["metrics"].get(primary) for s in (b, c) for it in s.items.values()]
    graded = any(v is not None and v == v and v not in (0.0, 1.0) for v in values)
    return "continuous" if graded else "binary"


def _records(run_id: str, arm: str, label: str, suite: ImportedSuite, order: list[str]) -> list[Record]:
    out = []
    for item_id in order:
        it = suite.items[item_id]
        metrics = {m: it["metrics"][m] for m in suite.metrics if m in it["metrics"]}
        out.append(
            Record(
                run_id=run_id,
                arm=arm,
                variant=label,
                suite=suite.name,
                suite_version=suite.version,
                item_id=item_id,
                repeat=0,
                prompt_hash=it["prompt_hash"],
                target=it["target"],
                response=it["response"],
                extracted=it["extracted"] or None,
                metrics=metrics,
                extra=RecordExtra(
                    lm_eval={"task": it["task"], "doc_id": it["doc_id"], "doc_hash": it["doc_hash"]}
                ),
            )
        )
    return out


def import_samples(req: CompareRequest, *, suites: tuple[str, ...] | None = None) -> Path:
    """Write a run folder from two lm-eval sample logs and return it (render it next)."""
    if not req.baseline_samples or not req.candidate_samples:
        raise ConfigError(
            "importing lm-eval runs needs both --baseline-samples and --candidate-samples",
            fix="give each arm's lm-eval --output_path folder",
        )
    if req.baseline_url or req.candidate_url or req.engine or req.resume:
        raise ConfigError(
            "--baseline-samples/--candidate-samples gate runs that already happened; they take no "
            "server, engine or --resume",
            fix="drop --engine, the URLs and --resume (rerun the import instead: it is fast)",
        )
    if req.aa:  # the A/A arm is the baseline launched again; an import launches nothing
        raise ConfigError(
            "--aa launches the baseline a second time as a noise floor, and an lm-eval import launches nothing",
            fix="drop --aa (to calibrate, import two lm-eval runs of the baseline as the two arms)",
        )
    base_out = read_lmeval(req.baseline_samples, label="baseline", run=req.baseline_run)
    cand_out = read_lmeval(req.candidate_samples, label="candidate", run=req.candidate_run)
    _check_two_runs(base_out, cand_out, same_ok=req.same_server_ok)
    _note_tokenizers(base_out, cand_out)
    base, cand = suite_records(base_out, label="baseline"), suite_records(cand_out, label="candidate")
    names = _pair_suites(base, cand, suites)
    for name in names:
        _check_items(name, base[name], cand[name])
        if base[name].metrics != cand[name].metrics:
            raise ConfigError(
                f"{name}: the runs logged different metrics ({', '.join(base[name].metrics)} against "
                f"{', '.join(cand[name].metrics)})",
                fix="run the same lm-eval task config on both arms",
            )
    if req.drift_budget is not None and not any(_metric_kind(base[n], cand[n]) == "drift" for n in names):
        raise ConfigError(
            f"--drift-budget {req.drift_budget} sets a perplexity task's budgets, and these runs have none "
            f"({', '.join(names)})",
            fix="drop --drift-budget (it gates loglikelihood_rolling tasks such as wikitext)",
        )
    stamp = datetime.now(timezone.utc).strftime("%Y%m%d-%H%M%S")
    run_id = f"{stamp}-{req.baseline}-vs-{req.candidate}-samples-{secrets.token_hex(2)}"
    run_dir = Path(req.out) if req.out else Path("reports") / run_id
    if (run_dir / "manifest.json").exists() or any((run_dir / "items").glob("*.jsonl")):
        raise ConfigError(f"{run_dir} already holds a run", fix="choose another --out")
    lock = RunLock(run_dir).acquire()
    try:
        _write(run_dir, run_id, req, names, base, cand, base_out, cand_out)
    finally:
        lock.release()
    return run_dir


def _own_aggregates(name: str, info: dict[str, dict[str, Any]]) -> str:
    """A perplexity task's source tail: "; lm-eval's own word_perplexity: 23.4 (baseline), ..."."""
    own = {arm: info[arm]["aggregates"].get(name) or {} for arm in ("baseline", "candidate")}
    metric = next((m for m in ROLLING_UNITS if all(m in own[a] for a in own)), None)
    if metric is None:
        return ""
    return f"; lm-eval's own {metric}: " + ", ".join(f"{own[a][metric]:.6g} ({a})" for a in own)


def _write(
    run_dir: Path, run_id: str, req: CompareRequest, names: list[str],
    base: dict[str, ImportedSuite], cand: dict[str, ImportedSuite],
    base_out: LmEvalOutput, cand_out: LmEvalOutput,
) -> None:  # fmt: skip
    info = {"baseline": _lmeval_info(base_out, base), "candidate": _lmeval_info(cand_out, cand)}
    orders = {
        n: sorted(base[n].items, key=lambda i: (base[n].items[i]["task"], base[n].items[i]["doc_id"]))
        for n in names
    }
    manifest = Manifest.new(
        run_id=run_id,
        engine=ENGINE,
        engine_version=str(info["baseline"]["lm_eval_version"] or "unknown"),
        request=req.model_copy(update={"suites": tuple(names)}),
        variants={arm: VariantInfo(name=getattr(req, arm)) for arm in ("baseline", "candidate")},
        launch={
            arm: LaunchInfo(model=str(info[arm]["model_name"] or info[arm]["model"] or "unknown"))
            for arm in ("baseline", "candidate")
        },
        suites={
            n: SuiteInfo(
                version=base[n].version,
                metrics=base[n].metrics,
                kind=base[n].kind,
                metric_kind=_metric_kind(base[n], cand[n]),
                source=f"lm-eval samples: {', '.join(base[n].tasks)}" + _own_aggregates(n, info),
                n=len(orders[n]),
                item_ids=orders[n],
            )
            for n in names
        },
        arms={arm: ArmInfo(server=ServerFacts(lm_eval=info[arm])) for arm in ("baseline", "candidate")},
        imported={"from": "lm-eval --log_samples", **info},
    )
    write_manifest(run_dir, manifest)
    store = RecordStore(run_dir, run_id=run_id)
    for n in names:
        for arm, suites in (("baseline", base), ("candidate", cand)):
            for record in _records(run_id, arm, getattr(req, arm), suites[n], orders[n]):
                store.append(record)
    manifest.run_finished()
    write_manifest(run_dir, manifest)
