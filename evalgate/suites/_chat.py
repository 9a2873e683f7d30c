"""Chat variants of the lm-eval suites: the prompt goes through the server's chat template.

lm-eval builds the messages (``build_instances(chat=True)``: what ``--apply_chat_template
--fewshot_as_multiturn`` sends to a chat-completions API), evalgate sends them to
``/v1/chat/completions`` with the task's generation settings and the run's sampling (the same seed
per item and repeat on both arms), and lm-eval's filters and ``process_results`` grade the answer.

What is graded is ``message.content`` and nothing else. A server that separates the reasoning
(SGLang or vLLM with a reasoning parser, llama-server's ``--reasoning-format``) returns it in
``message.reasoning_content`` (vLLM now: ``reasoning``): it is stored apart in the record
(``extra.reasoning_content``, never for a private suite unless revealed) and counted in
``tokens["reasoning"]`` (the server's ``reasoning_tokens``, else its tokenizer's count). A server
that returns the thinking inline instead (no parser set) answers with what follows the last
``</think>`` (lm-eval's ``think_end_token`` rule), and an answer that opens ``<think>`` and never
closes it was cut while thinking: its answer is empty. Either way the record says
``extra.think_inline`` (True).

``--thinking on|off`` is the chat template's switch, ``chat_template_kwargs: {"enable_thinking":
...}``: SGLang (protocol.py ``ChatCompletionRequest.chat_template_kwargs``), vLLM and llama-server
(``oaicompat_chat_params_parse`` merges it into the template's kwargs and reads ``enable_thinking``)
pass it to the template. ``auto`` sends nothing: the template's default.

The task's token budget (1,024 new tokens; ARC 100) is made for answers without a thinking phase: a
reasoning model needs its own, ``--suite-opt gsm8k_chat.max_tokens=32768`` (``ChatSettings``), the
same on both arms; ``--max-gen-tokens`` still caps it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from evalgate.engines import check_chat, first_choice
from evalgate.store.facts import RecordExtra
from evalgate.suites._base import Item, ItemResult, Scorer, SuiteOptions, stable_seed
from evalgate.suites._lmeval import LmEvalSuite, no_answer, score

__all__ = ["THINK_END", "ChatAnswer", "ChatSettings", "LmEvalChatSuite", "chat_payload", "read_chat"]

THINK_END = "</think>"
THINK_START = "<think>"


@dataclass(frozen=True)
class ChatAnswer:
    """One chat completion, split into the graded answer and the reasoning kept apart."""

    content: str
    """What is graded: ``message.content``, after the inline-thinking rule and the stop strings."""
    reasoning: str | None
    think_inline: bool
    finish_reason: str | None
    prompt_tokens: int
    completion_tokens: int
    reasoning_tokens: int | None
    """The server's own count, when it gives one above 0."""


def chat_payload(
    messages: list[dict[str, Any]], gen: dict[str, Any], *, seed: int, options: SuiteOptions
) -> dict[str, Any]:
    """The ``/v1/chat/completions`` request for one item: lm-eval's messages and generation settings
    (``max_gen_toks``, ``until`` as ``stop``, at most 4 as lm-eval sends), the run's temperature and
    sampling, the seed of this item and repeat, and the thinking switch when one is set."""
    temperature = options.temperature if options.temperature is not None else gen.get("temperature", 0.0)
    payload: dict[str, Any] = {
        "messages": messages,
        "max_tokens": int(gen["max_gen_toks"]),
        "temperature": float(temperature),
        "seed": seed,
        **dict(options.sampling),
    }
    stop = [s for s in gen.get("until") or [] if s]
    if stop:
        payload["stop"] = stop[:4]
    if gen.get("chat_template_kwargs"):  # --thinking on|off (``_jsonable_args``: in the prompt hash)
        payload["chat_template_kwargs"] = dict(gen["chat_template_kwargs"])
    return payload


def read_chat(
    data: Any, stop: Sequence[str], *, prefill: str | None = None, server: str = "inference"
) -> ChatAnswer:
    """The graded answer and the reasoning of a chat completion (the module's rule); the scorer
    has checked its shape already (``check_chat``), this checks it again for any scorer.

    ``prefill``: the final assistant message the server continued. SGLang (0.5.23 serving_chat.py
    appends it to the prompt ids, ``_append_assistant_prefix_to_prompt_ids``) and vLLM
    (``continue_final_message``) answer with the continuation alone; llama-server answers with the
    whole message, prefill included (measured: "The best answer is D" for ARC's prefill "The best
    answer is"), so a content that starts with the prefill is graded on what follows it: the same
    answer on every engine."""
    data = check_chat(data, server)
    choice = first_choice(data, server, "/v1/chat/completions")
    message = choice["message"]
    content = message.get("content") or ""
    if prefill and content.startswith(prefill):
        content = content[len(prefill) :]
    reasoning = message.get("reasoning_content")
    if not isinstance(reasoning, str):
        reasoning = message.get("reasoning") if isinstance(message.get("reasoning"), str) else None
    inline = THINK_END in content or content.lstrip().startswith(THINK_START)
    if inline:
        head, sep, tail = content.rpartition(THINK_END)
        thought = head if sep else content  # <think> never closed: cut while thinking
        content = tail.lstrip() if sep else ""
        thought = thought.lstrip().removeprefix(THINK_START)
        if not reasoning or thought.strip() != reasoning.strip():  # deepseek-legacy sends it twice
            reasoning = "\n".join(t for t in (reasoning, thought) if t)
    finish = choice.get("finish_reason")
    for s in stop:
        if s and s in content:
            content, finish = content[: content.index(s)], "stop"
    usage = data.get("usage") if isinstance(data.get("usage"), dict) else {}
    details = usage.get("completion_tokens_details")
    counted = (details or {}).get("reasoning_tokens") if isinstance(details, dict) else None
    counted = counted or usage.get("reasoning_tokens")
    return ChatAnswer(
        content=content,
        reasoning=reasoning or None,
        think_inline=inline,
        finish_reason=finish if isinstance(finish, str) else None,
        prompt_tokens=_count(usage.get("prompt_tokens")),
        completion_tokens=_count(usage.get("completion_tokens")),
        reasoning_tokens=_count(counted) or None,
    )


def _count(value: Any) -> int:
    return int(value) if isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0 else 0


class ChatSettings(BaseModel):
    """A chat suite's own options: ``--suite-opt gsm8k_chat.max_tokens=32768`` or ``[suites.gsm8k_chat]``."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    max_tokens: int | None = Field(
        None,
        ge=1,
        description="new tokens per answer, thinking included, in place of the task's (1,024; ARC 100): "
        "a reasoning model needs many more; --max-gen-tokens still caps it",
    )


@dataclass
class LmEvalChatSuite(LmEvalSuite):
    """An lm-eval task run as a chat (``kind`` "chat": ``load`` builds messages); the data, items
    and scoring are ``LmEvalSuite``'s."""

    settings: ChatSettings = field(default_factory=ChatSettings)

    def gen_budget(self) -> int | None:
        return self.settings.max_tokens

    async def run(self, item: Item, scorer: Scorer, options: SuiteOptions) -> ItemResult:
        task, doc, instances, args = item.payload
        messages, gen = args[0]
        # common random numbers: repeat r of an item samples with one seed on both arms
        seed = stable_seed(options.seed, self.name, item.item_id, item.repeat)
        payload = chat_payload(messages, gen, seed=seed, options=options)
        last = messages[-1]
        prefill = str(last.get("content") or "") if last.get("role") == "assistant" else None
        answer = read_chat(await scorer.chat(payload), list(gen.get("until") or []), prefill=prefill)
        metrics, extracted = score(task, doc, instances, [answer.content])
        tokens = {"prompt": answer.prompt_tokens, "completion": answer.completion_tokens}
        if answer.reasoning is not None:
            tokens["reasoning"] = answer.reasoning_tokens or len(await scorer.tokenize(answer.reasoning))
        extra = RecordExtra(  # None: not said, not written
            empty=not answer.content.strip(),
            finish_reason=answer.finish_reason,
            no_answer=no_answer(task, self.metrics[0], extracted),
            reasoning_content=answer.reasoning if not self.private or options.reveal_private else None,
            think_inline=answer.think_inline or None,
        )
        return ItemResult(answer.content, extracted, metrics, tokens, extra=extra)
