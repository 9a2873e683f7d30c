"""Suites whose prompts, filters and metrics are lm-eval's own task definitions.

evalgate loads the installed lm-eval task YAML, points it at a local copy of the data when
``--data-dir`` is given (same columns as the Hub), and asks lm-eval's task object to build
each item's requests and to score each item's responses. So prompts and numbers line up with
lm-eval's published definitions; evalgate only decides which items run and sends requests.

One deliberate difference: few-shot examples are drawn with a seed per item (from the run
seed and the item id) rather than from one generator that advances over the whole run. An
item then gets the same prompt whatever other items are selected, which is what makes
subsets, sharding and resume safe (lm-eval's own order-dependent sampling is a known pitfall).
Tasks with a ``first_n`` sampler (MMLU, MMLU-Pro) are unaffected.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cache, lru_cache
from pathlib import Path
from typing import Any

from evalgate.engines.api import Generation
from evalgate.errors import ConfigError
from evalgate.store.facts import RecordExtra
from evalgate.suites._base import (
    Item,
    ItemResult,
    Scorer,
    Suite,
    SuiteOptions,
    prompt_hash,
    select_indices,
    stable_seed,
)

__all__ = ["LmEvalSuite", "lm_eval_task_dir", "lmeval_tasks", "load_fix", "no_answer"]


def lm_eval_task_dir() -> Path:
    import lm_eval.tasks

    return Path(lm_eval.tasks.__file__).parent


@dataclass(frozen=True)
class LocalData:
    """Where a task's splits live under ``--data-dir`` (the layout of ``shared/data``)."""

    files: tuple[tuple[str, str], ...]
    """(lm-eval split name, file under the data dir) pairs."""
    row_filter: tuple[str, str] | None = None
    """(column, value): keep rows whose column equals value (e.g. one MMLU subject)."""


@dataclass(frozen=True)
class Member:
    """One lm-eval task of a suite; a suite like MMLU has one member per subject."""

    label: str
    yaml: str
    """Path of the task YAML inside lm-eval's tasks folder."""
    local: LocalData
    overrides: tuple[tuple[str, Any], ...] = ()
    """lm-eval config keys set the way lm-eval's CLI would (e.g. ``num_fewshot``)."""


@dataclass
class LmEvalSuite(Suite):
    name: str
    version: int
    metrics: tuple[str, ...]
    kind: str
    members: tuple[Member, ...]
    hub: str
    item_id: Callable[[dict[str, Any], int], str] = field(default=lambda doc, i: f"test-{i}")
    private: bool = False
    recorded: tuple[str, ...] = ()
    """Document columns copied into each record's ``extra`` (MMLU-Pro: ``src``, the source exam
    that correlates items within a category; the gate's per-category intervals cluster on it)."""

    @property
    def samples(self) -> bool:
        """Generation can be sampled (``--repeats``, ``--temperature``); log-likelihoods cannot."""
        return self.kind in ("generate", "chat")

    # -- data ---------------------------------------------------------------------------
    def item_key(self, member: Member, doc: dict[str, Any], index: int) -> str:
        """The item id a record carries: the suite's id of the document, prefixed with the
        member's label when the suite pools several lm-eval tasks (MMLU's subjects)."""
        item_id = self.item_id(doc, index)
        return f"{member.label}/{item_id}" if len(self.members) > 1 else item_id

    def source(self, options: SuiteOptions) -> str:
        if options.data_dir:
            return str(Path(options.data_dir) / self.members[0].local.files[-1][1])
        return f"hub:{self.hub}"

    def task(self, options: SuiteOptions, member: Member | None = None) -> Any:
        m = member or self.members[0]
        return _load_task(m.yaml, str(options.data_dir) if options.data_dir else None, m.local, m.overrides)

    def docs(self, options: SuiteOptions) -> list[tuple[Member, Any, int]]:
        """(member, task, index in that task's test docs) for every test item of the suite."""
        out = []
        for m in self.members:
            task = self.task(options, m)
            out += [(m, task, i) for i in range(len(task.eval_docs))]
        return out

    def size(self, options: SuiteOptions) -> int:
        return len(self.docs(options))

    def load(self, options: SuiteOptions, n: int | None) -> list[Item]:
        everything = self.docs(options)
        grouped = len(self.members) > 1
        strata = [m.label for m, _, _ in everything] if grouped else None
        indices = select_indices(len(everything), n, seed=options.seed, suite=self.name, strata=strata)
        items = []
        for k in indices:
            member, task, i = everything[k]
            doc = task.eval_docs[i]
            item_id = self.item_key(member, doc, i)
            seed = stable_seed(options.seed, self.name, item_id)
            instances = build_instances(task, doc, i, seed=seed, chat=self.kind == "chat")
            chat, budget = self.kind == "chat", self.gen_budget()
            args = [_jsonable_args(inst.arguments, options, chat=chat, budget=budget) for inst in instances]
            extra = {"subject": member.label} if grouped else {}
            extra |= {key: str(doc[key]) for key in self.recorded if doc.get(key) is not None}
            display = {
                "prompt": _shown(args[0][0]),
                "choices": [a[1] for a in args] if instances[0].request_type == "loglikelihood" else None,
            }
            payload = (task, doc, instances, args)
            meta = RecordExtra.model_validate(extra)  # a recorded column must be a RecordExtra field
            items.append(Item(item_id, prompt_hash(args), task.doc_to_target(doc), payload, meta, display))
        return items

    def gen_budget(self) -> int | None:
        """New tokens per answer in place of the task's ``max_gen_toks`` (None: the task's own);
        a chat suite's ``max_tokens`` option. ``--max-gen-tokens`` still caps it."""
        return None

    # -- running --------------------------------------------------------------------------
    async def run(self, item: Item, scorer: Scorer, options: SuiteOptions) -> ItemResult:
        task, doc, instances, args = item.payload
        extra = RecordExtra()
        if instances[0].request_type == "loglikelihood":
            if len({a[0] for a in args}) == 1:  # one context: one request where the engine batches
                outs = await scorer.loglikelihood_many(args[0][0], [a[1] for a in args])
            else:
                outs = await asyncio.gather(*(scorer.loglikelihood(a[0], a[1]) for a in args))
            resps = [(ll, greedy) for ll, greedy, _ in outs]
            tokens = {"completion": sum(n for _, _, n in outs)}
            response: Any = [[round(ll, 6), bool(g)] for ll, g in resps]
        elif instances[0].request_type == "generate_until":
            ctx, gen = args[0]
            temperature = (
                options.temperature if options.temperature is not None else gen.get("temperature", 0.0)
            )
            how = Generation(
                max_tokens=int(gen["max_gen_toks"]),
                stop=tuple(gen["until"]),
                temperature=float(temperature),
                # common random numbers: repeat r of an item samples with one seed on both arms
                seed=stable_seed(options.seed, self.name, item.item_id, item.repeat),
                sampling=dict(options.sampling) or None,
            )
            out = await scorer.generate(ctx, how)
            resps = [out["text"]]
            tokens = {"prompt": out.get("prompt_tokens", 0), "completion": out.get("completion_tokens", 0)}
            response = out["text"]
            # what the gate's unanswered test reads (agreement.unanswered): empty, or cut at max tokens
            extra = RecordExtra(  # None: not said, not written
                empty=not response.strip(),
                finish_reason=out.get("finish_reason"),
                truncated_tokens=int(out["truncated_tokens"]) if out.get("truncated_tokens") else None,
            )
        else:
            raise ConfigError(
                f"{self.name}: request type {instances[0].request_type} is not supported", fix=""
            )
        metrics, extracted = score(task, doc, instances, resps)
        if instances[0].request_type == "loglikelihood":
            extracted = _choice_predictions(task, doc, resps)
        else:  # what the per-arm no_answer rate reads
            extra = extra.updated(no_answer=no_answer(task, self.metrics[0], extracted))
        return ItemResult(response, extracted, metrics, tokens, extra=extra)


@cache
def _compile_templates_once() -> None:
    """lm-eval's ``apply_template`` compiles its Jinja template on every call (~1.5 ms), and
    ``process_results`` calls it for the target and the choices of every document: scoring cost
    more than the HTTP. Same templates, same output, each compiled once."""
    import lm_eval.utils

    compiled = lru_cache(maxsize=4096)(lm_eval.utils.env.from_string)

    def apply_template(template: str, doc: dict[str, Any]) -> str:
        return str(compiled(template).render(**doc))

    lm_eval.utils.apply_template = apply_template


@cache
def _load_task(
    yaml: str, data_dir: str | None, local: LocalData, overrides: tuple[tuple[str, Any], ...] = ()
) -> Any:
    """Build lm-eval's ConfigurableTask from its own YAML, optionally on local files (cached)."""
    logging.getLogger("lm_eval").setLevel(logging.WARNING)
    _compile_templates_once()
    import datasets

    datasets.disable_progress_bars()  # evalgate draws its own progress; datasets' bars are noise
    datasets.logging.set_verbosity_error()
    from lm_eval.api.task import ConfigurableTask
    from lm_eval.tasks._yaml_loader import load_yaml

    cfg = dict(load_yaml(lm_eval_task_dir() / yaml, resolve_func=True))
    for key in ("tag", "group", "task_list"):
        cfg.pop(key, None)
    cfg.update(dict(overrides))
    if data_dir is not None:
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
        files = {}
        for split, rel in local.files:
            path = Path(data_dir) / rel
            if not path.exists():
                raise ConfigError(
                    f"{path} does not exist",
                    fix="point --data-dir at a folder laid out like shared/data, or omit it to use the Hub",
                )
            files[split] = str(path)
        cfg["dataset_path"] = "json"
        cfg["dataset_name"] = None
        cfg["dataset_kwargs"] = {"data_files": files}
        if local.row_filter:
            column, value = local.row_filter
            user_process = cfg.get("process_docs")

            def process(dataset: Any, _c: str = column, _v: str = value, _p: Any = user_process) -> Any:
                dataset = dataset.filter(lambda row: row[_c] == _v)
                return _p(dataset) if callable(_p) else dataset

            cfg["process_docs"] = process
    try:
        return ConfigurableTask(config=cfg)
    except Exception as exc:  # datasets raises many types for missing data
        raise ConfigError(
            f"could not load the lm-eval task {yaml}: {type(exc).__name__}: {exc}",
            fix=load_fix(data_dir),
        ) from exc


def load_fix(data_dir: str | Path | None) -> str:
    """What to do when a task's data does not load: the Hub is in question only when it was asked."""
    if data_dir is not None:
        return (
            f"the files under --data-dir {data_dir} were found but could not be read as this task's "
            "data: check them against shared/data's layout and format (JSON lines), or copy them again"
        )
    return "pass --data-dir with a local copy of the data (the Hub may be unreachable)"


def build_instances(
    task: Any, doc: dict[str, Any], doc_id: int, *, seed: int, chat: bool = False
) -> list[Any]:
    """lm-eval's own context and requests for one document, with a per-item few-shot seed.

    ``chat``: the context is the list of chat messages lm-eval makes with ``--apply_chat_template
    --fewshot_as_multiturn`` for a chat-completions API (``local-chat-completions``: its
    ``apply_chat_template`` hands the messages on as ``JsonChatStr``; a ``gen_prefix`` is a final
    assistant message the server continues). The server's own chat template renders them."""
    task.set_fewshot_seed(seed)
    chat_kwargs: dict[str, Any] = {}
    if chat:
        from lm_eval.models.api_models import JsonChatStr

        def as_messages(history: list[dict[str, str]], add_generation_prompt: bool = True) -> Any:
            return JsonChatStr(json.dumps(history, ensure_ascii=False))

        chat_kwargs = {
            "apply_chat_template": True,
            "fewshot_as_multiturn": True,
            "chat_template": as_messages,
        }
    ctx = task.fewshot_context(
        doc,
        num_fewshot=task.config.num_fewshot or 0,
        gen_prefix=task.doc_to_prefix(doc),
        **chat_kwargs,
    )
    metadata = (task.config.task, doc_id, task.config.repeats)
    inst = task.construct_requests(doc=doc, ctx=ctx, metadata=metadata, apply_chat_template=chat)
    return inst if isinstance(inst, list) else [inst]


def score(
    task: Any, doc: dict[str, Any], instances: list[Any], resps: list[Any]
) -> tuple[dict[str, float], Any]:
    """Apply lm-eval's filters and ``process_results`` to one document's responses."""
    for inst, resp in zip(instances, resps, strict=True):
        inst.resps = [resp]
        inst.filtered_resps = {}
    for ensemble in task._filters:
        ensemble.apply(instances)
    keys = list(instances[0].filtered_resps)
    metrics: dict[str, float] = {}
    extracted: dict[str, Any] = {}
    for key in keys:
        values = task.process_results(doc, [inst.filtered_resps[key] for inst in instances])
        for metric, value in values.items():
            metrics[metric if key == "none" else f"{metric},{key}"] = float(value)
        if key != "none":
            extracted[key] = instances[0].filtered_resps[key]
    return metrics, extracted


def no_answer(task: Any, metric: str, extracted: dict[str, Any]) -> bool:
    """Whether the filter of ``metric`` (``exact_match,flexible-extract``: the part after the comma)
    found no answer: it gave its regex's fallback (lm-eval's ``RegexFilter``: "[invalid]"), or, for
    a filter with no extraction step (ARC chat's remove_whitespace), nothing at all."""
    key = metric.partition(",")[2] or "none"
    value = extracted.get(key, "")
    value = value[0] if isinstance(value, list) and value else value
    if not isinstance(value, str) or not value.strip():
        return True
    from lm_eval.filters.extraction import RegexFilter

    for ensemble in task._filters:
        if ensemble.name == key:
            built = [f() for f in ensemble.filters]
            return any(isinstance(f, RegexFilter) and value == f.fallback for f in built)
    return False


def _shown(prompt: Any) -> str:
    """A prompt as the report shows it: the text, or a chat's messages one per paragraph."""
    if isinstance(prompt, list):
        return "\n\n".join(f"[{m.get('role')}] {m.get('content')}" for m in prompt)
    return str(prompt)


def _choice_predictions(task: Any, doc: dict[str, Any], resps: list[tuple[float, bool]]) -> dict[str, Any]:
    lls = [ll for ll, _ in resps]
    choices = task.doc_to_choice(doc)
    lens = [max(1, len(c)) for c in choices] if isinstance(choices, list) else [1] * len(lls)
    pred = max(range(len(lls)), key=lambda i: lls[i])
    pred_norm = max(range(len(lls)), key=lambda i: lls[i] / lens[i])
    return {"pred": pred, "pred_norm": pred_norm}


def _jsonable_args(
    arguments: tuple[Any, ...], options: SuiteOptions, *, chat: bool = False, budget: int | None = None
) -> list[Any]:
    """Request arguments as sent (generation caps applied), for hashing and records; a chat's
    thinking switch is part of what is sent."""
    out = []
    for a in arguments:
        if type(a).__name__ == "JsonChatStr":  # a chat's messages (build_instances with chat=True)
            a = json.loads(a.prompt)
        elif hasattr(a, "kwargs"):  # lm-eval's GenerationKwargs-like objects
            a = dict(a.kwargs)
        if isinstance(a, dict):
            a = dict(a)
            a.setdefault("max_gen_toks", 256)
            if budget is not None:
                a["max_gen_toks"] = budget
            if options.max_gen_tokens is not None:
                a["max_gen_toks"] = min(int(a["max_gen_toks"]), options.max_gen_tokens)
            if options.temperature is not None:  # sampling settings are part of what is sent
                a["temperature"] = options.temperature
            a.update(options.sampling)
            if chat and options.thinking is not None:
                a["chat_template_kwargs"] = {"enable_thinking": options.thinking}
        out.append(a)
    return out


def lmeval_tasks(registry: Any) -> dict[str, tuple[LmEvalSuite, Member]]:
    """lm-eval task name (its YAML's stem) -> the suite of ``registry`` and the member that run
    it: how an lm-eval sample log is mapped onto evalgate's suites, and back."""
    out = {}
    for name in registry.names():
        if ":" in name:  # a prefix suite (private:PATH) is the user's own; it has no lm-eval task
            continue
        suite = registry.get(name)
        # chat variants are left out: their prompts are messages, not an lm-eval completion log's
        # text, and their YAML stems repeat the base tasks' (llama3/instruct/gsm8k/gsm8k.yaml)
        if isinstance(suite, LmEvalSuite) and suite.kind != "chat":
            out.update({Path(m.yaml).stem: (suite, m) for m in suite.members})
    return out
