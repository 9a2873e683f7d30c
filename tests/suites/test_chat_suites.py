"""Chat variants of the lm-eval suites, --chat, --thinking and the reasoning kept apart (#20).

Prompts are compared with the messages lm-eval's own request builder makes for a chat-completions
API; answers are SGLang 0.5.23's own response models where they import (the parser install), so
the field names evalgate reads are SGLang's; the loop runs on the fake engine.
"""

from __future__ import annotations

import asyncio
import json
from collections import defaultdict
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from evalgate.cli import main
from evalgate.engines.fake import FakeEngine
from evalgate.errors import ConfigError
from evalgate.suites import Item, SuiteOptions, chat_variants, default_registry
from evalgate.suites._chat import chat_payload, read_chat
from evalgate.suites._lmeval import no_answer

CHAT = ("gsm8k_chat", "arc_easy_chat", "arc_challenge_chat", "mmlu_pro_chat")


def _items(name: str, data_dir: Path, n: int = 3, **options: Any) -> list[Item]:
    return default_registry().get(name).load(SuiteOptions(data_dir=data_dir, **options), n)


@pytest.mark.parametrize("name", CHAT)
def test_messages_are_lm_evals_own(name: str, data_dir: Path) -> None:
    """lm-eval's build_all_requests with --apply_chat_template --fewshot_as_multiturn and its API
    model's apply_chat_template (the messages as JSON) gives each item's messages and settings."""
    from lm_eval.models.api_models import TemplateAPI

    suite = default_registry().get(name)
    options = SuiteOptions(data_dir=data_dir)
    items = suite.load(options, 3)
    api = SimpleNamespace(tokenizer_backend=None, tokenized_requests=False)  # local-chat-completions
    for item in items:
        task, doc, _, args = item.payload
        task.build_all_requests(
            samples=[task.eval_docs.to_list().index(doc)] if hasattr(task.eval_docs, "to_list") else None,
            apply_chat_template=True,
            fewshot_as_multiturn=True,
            chat_template=lambda h, add_generation_prompt=True: TemplateAPI.apply_chat_template(
                api, h, add_generation_prompt
            ),
        )
        ctx, gen = task.instances[0].arguments
        assert json.loads(ctx.prompt) == args[0][0]  # the messages, exactly
        assert {k: v for k, v in gen.items()} == {k: v for k, v in args[0][1].items() if k in gen}
        assert args[0][0][0]["role"] == "user" and len(args[0][0]) <= 2  # zero-shot
    if name.startswith("arc"):  # the config's gen_prefix: a final assistant message to continue
        assert items[0].payload[3][0][0][-1] == {"role": "assistant", "content": "The best answer is"}
        assert items[0].payload[3][0][1]["until"] == ["\n\n", "."]


def test_thinking_is_part_of_what_is_sent_and_hashed(data_dir: Path) -> None:
    auto, on, off = (_items("gsm8k_chat", data_dir, 1, thinking=t)[0] for t in (None, True, False))
    assert len({auto.prompt_hash, on.prompt_hash, off.prompt_hash}) == 3
    gen = off.payload[3][0][1]
    payload = chat_payload(off.payload[3][0][0], gen, seed=7, options=SuiteOptions(thinking=False))
    assert payload["chat_template_kwargs"] == {"enable_thinking": False} and payload["seed"] == 7
    assert "chat_template_kwargs" not in chat_payload(auto.payload[3][0][0], auto.payload[3][0][1], seed=7,
                                                      options=SuiteOptions())  # fmt: skip


SGLANG = r"""
import json, sys, warnings
from sglang.srt.entrypoints.openai import protocol as p
job = json.load(sys.stdin)
req = p.ChatCompletionRequest.model_validate(job["chat"])
with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)  # max_tokens: SGLang still reads it (lm-eval sends it)
    params = req.to_sampling_params(stop=req.stop, model_generation_config={})
def answer(content, reasoning, n):
    usage = p.UsageInfo(prompt_tokens=50, completion_tokens=30, total_tokens=80)
    if n:
        usage.completion_tokens_details = p.CompletionTokensDetails(reasoning_tokens=n)
    message = p.ChatMessage(role="assistant", content=content, reasoning_content=reasoning)
    choice = p.ChatCompletionResponseChoice(index=0, message=message, finish_reason="stop")
    return json.loads(p.ChatCompletionResponse(id="x", model="m", choices=[choice], usage=usage).model_dump_json())
print(json.dumps({"kwargs": req.chat_template_kwargs, "seed": req.seed, "top_p": req.top_p, "top_k": req.top_k,
                  "temperature": req.temperature, "stop": req.stop, "sampling_seed": params["sampling_seed"],
                  "max_new_tokens": params["max_new_tokens"], "answers": [answer(*a) for a in job["answers"]]}))
"""
WRONG = "The final answer is 123456789"


@pytest.fixture(scope="module")
def sglang(data_dir: Path) -> dict[str, Any]:
    """SGLang 0.5.23's own models, in a child (torch and all stay out of this process): ARC chat's
    payload validated as a ChatCompletionRequest, and GSM8K chat answers built as its responses."""
    from tests.helpers import sglang_shim_protocol as sgl
    from tests.helpers.child_process import run_json

    path = sgl.sglang_path()
    if not path:
        pytest.skip("SGLang's protocol is not installed: evalgate setup --parsers")
    item = _items("arc_easy_chat", data_dir, 1, thinking=True, temperature=0.7, sampling=(("top_p", 0.9),))[0]
    messages, gen = item.payload[3][0]
    options = SuiteOptions(thinking=True, temperature=0.7, sampling=(("top_p", 0.9), ("top_k", 20)))
    chat = {**chat_payload(messages, gen, seed=11, options=options), "model": "m"}
    right = f"The final answer is {_items('gsm8k_chat', data_dir, 1)[0].target}"
    answers = [(WRONG, f"Working... {right}", 9), (right, f"Maybe {WRONG}", 0), (None, right, 0)]
    return run_json(SGLANG, {"chat": chat, "answers": answers}, pythonpath=path)


def test_the_chat_request_is_sglangs(sglang: dict[str, Any]) -> None:
    """Every field evalgate sends is one SGLang's ChatCompletionRequest reads: the seed becomes its
    sampling_seed, the thinking switch its chat_template_kwargs."""
    assert sglang["kwargs"] == {"enable_thinking": True}
    assert sglang["seed"] == 11 and sglang["sampling_seed"] == 11 and sglang["max_new_tokens"] == 100
    assert sglang["top_p"] == 0.9 and sglang["top_k"] == 20 and sglang["temperature"] == 0.7
    assert sglang["stop"] == ["\n\n", "."]


class _Stub:
    """A scorer whose every chat answer is ``answer``; counts tokens by whitespace."""

    concurrency = 1

    def __init__(self, answer: dict[str, Any]) -> None:
        self.answer = answer
        self.payloads: list[dict[str, Any]] = []

    async def chat(self, payload: dict[str, Any]) -> dict[str, Any]:
        self.payloads.append(payload)
        return self.answer

    async def tokenize(self, text: str) -> list[int]:
        return list(range(len(text.split())))


def _graded(item: Item, answer: dict[str, Any], **options: Any) -> Any:
    suite = default_registry().get("gsm8k_chat")
    return asyncio.run(suite.run(item, _Stub(answer), SuiteOptions(**options)))  # type: ignore[arg-type]


def test_reasoning_content_is_never_graded(data_dir: Path, sglang: dict[str, Any]) -> None:
    """SGLang's own responses: the right answer only in reasoning_content scores 0, only in the
    content 1; an answer all thinking (no content) is no answer."""
    item = _items("gsm8k_chat", data_dir, 1)[0]
    right = f"The final answer is {item.target}"
    metric = "exact_match,flexible_extract"
    only_thought, only_answer, nothing = (_graded(item, body) for body in sglang["answers"])

    assert only_thought.metrics[metric] == 0.0 and only_thought.metrics["exact_match,strict_match"] == 0.0
    assert only_thought.response == WRONG and only_thought.extra.reasoning_content.endswith(right)
    assert only_thought.tokens["reasoning"] == 9  # the server's own count

    assert only_answer.metrics[metric] == 1.0 and only_answer.metrics["exact_match,strict_match"] == 1.0
    assert only_answer.tokens["reasoning"] == 6  # no count from the server: its tokenizer's (6 words)
    assert only_answer.extra.think_inline is None and only_answer.extra.no_answer is False

    assert nothing.metrics[metric] == 0.0 and nothing.extra.empty and nothing.extra.no_answer


def test_inline_thinking_grades_what_follows_the_last_think_end(data_dir: Path) -> None:
    item = _items("gsm8k_chat", data_dir, 1)[0]
    right, wrong = f"The final answer is {item.target}", "The final answer is 123456789"

    def body(content: str) -> dict[str, Any]:
        return {"choices": [{"message": {"role": "assistant", "content": content}, "finish_reason": "stop"}]}

    after = _graded(item, body(f"<think>{wrong}</think>\n\n{right}"))
    assert after.metrics["exact_match,flexible_extract"] == 1.0 and after.response == right
    assert after.extra.think_inline and after.extra.reasoning_content == wrong
    before = _graded(item, body(f"<think>{right}</think>{wrong}"))
    assert before.metrics["exact_match,flexible_extract"] == 0.0 and before.extra.think_inline
    unclosed = _graded(item, body(f"<think>{right}"))  # cut while thinking: no answer at all
    assert unclosed.response == "" and unclosed.metrics["exact_match,flexible_extract"] == 0.0
    assert unclosed.extra.empty and unclosed.extra.think_inline


def test_read_chat_takes_vllms_reasoning_field_and_cuts_at_stops() -> None:
    data = {
        "choices": [{"message": {"content": " B. because", "reasoning": "hmm"}, "finish_reason": "length"}],
        "usage": {"prompt_tokens": 3, "completion_tokens": 4, "reasoning_tokens": 2},
    }
    answer = read_chat(data, [".", "\n\n"])
    assert answer.content == " B" and answer.finish_reason == "stop" and answer.reasoning == "hmm"
    assert answer.reasoning_tokens == 2 and answer.completion_tokens == 4


def test_reasoning_sent_twice_is_kept_once() -> None:
    """llama-server's --reasoning-format deepseek-legacy keeps the <think> block in the content and
    fills reasoning_content too: the answer is what follows it, the reasoning stored once."""
    message = {
        "content": "<think>\nit is 4\n</think>\n\nThe final answer is 4",
        "reasoning_content": "it is 4",
    }
    answer = read_chat({"choices": [{"message": message, "finish_reason": "stop"}]}, [])
    assert answer.content == "The final answer is 4" and answer.reasoning == "it is 4" and answer.think_inline


def test_a_prefill_the_server_echoes_is_not_part_of_the_answer() -> None:
    """llama-server returns the prefilled assistant text with its continuation; SGLang and vLLM
    the continuation alone: both grade the same answer."""

    def body(content: str) -> dict[str, Any]:
        return {"choices": [{"message": {"content": content}, "finish_reason": "stop"}]}

    prefill = "The best answer is"
    assert read_chat(body("The best answer is D"), [".", "\n\n"], prefill=prefill).content == " D"
    assert read_chat(body(" D. Because"), [".", "\n\n"], prefill=prefill).content == " D"


def test_no_answer_is_the_filters_fallback(data_dir: Path) -> None:
    """lm-eval's RegexFilter answers "[invalid]" when it finds nothing; ARC chat's whitespace filter
    has no fallback, so there nothing left is no answer."""
    gsm = _items("gsm8k", data_dir, 1)[0]
    task = gsm.payload[0]
    assert no_answer(task, "exact_match,flexible-extract", {"flexible-extract": "[invalid]"})
    assert not no_answer(task, "exact_match,flexible-extract", {"flexible-extract": "12"})
    arc = _items("arc_easy_chat", data_dir, 1)[0]
    assert no_answer(arc.payload[0], "exact_match,remove_whitespace", {"remove_whitespace": ""})
    assert not no_answer(arc.payload[0], "exact_match,remove_whitespace", {"remove_whitespace": "B"})


def test_completion_records_say_no_answer(tmp_path: Path, data_dir: Path, use: Any) -> None:
    use(FakeEngine(lambda arm, prompt: "no digits here" if arm == "candidate" else "so 42"))
    out = tmp_path / "run"
    code = main(["compare", "--engine", "fake", "--baseline", "bf16", "--candidate", "fp8", "--suites",
                 "gsm8k", "--limit", "3", "--data-dir", str(data_dir), "--out", str(out)])  # fmt: skip
    assert code in (0, 1)
    for arm, expected in (("baseline", False), ("candidate", True)):
        recs = [json.loads(x) for x in (out / "items" / f"gsm8k.{arm}.jsonl").read_text().splitlines()]
        assert [r["extra"]["no_answer"] for r in recs] == [expected] * 3


def test_chat_maps_each_suite_and_names_the_variants() -> None:
    assert chat_variants(("gsm8k", "arc_easy", "gsm8k_chat")) == ("gsm8k_chat", "arc_easy_chat")
    with pytest.raises(ConfigError) as exc:
        chat_variants(("gsm8k", "mmlu", "tool_calls"))
    assert "mmlu has no chat variant" in str(exc.value)
    # suites that speak chat already stay themselves
    native = ("tool_calls", "long_context", "private:exams/x")
    assert chat_variants(("arc_challenge", *native)) == ("arc_challenge_chat", *native)
    assert "gsm8k -> gsm8k_chat" in exc.value.fix and "mmlu_pro -> mmlu_pro_chat" in exc.value.fix


def _compare(tmp_path: Path, data_dir: Path, *flags: str) -> tuple[int, Path]:
    out = tmp_path / "run"
    args = ["compare", "--engine", "fake", "--baseline", "bf16", "--candidate", "fp8", "--limit", "4",
            "--data-dir", str(data_dir), "--out", str(out), *flags]  # fmt: skip
    return main(args), out


def test_chat_flag_runs_the_chat_variants(
    tmp_path: Path, data_dir: Path, use: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    engine = use(FakeEngine(lambda arm, prompt: "The final answer is 3"))
    code, out = _compare(tmp_path, data_dir, "--suites", "gsm8k,arc_easy", "--chat", "--thinking", "off")
    assert code == 0
    assert "suites gsm8k_chat, arc_easy_chat" in " ".join(capsys.readouterr().out.split())
    manifest = json.loads((out / "manifest.json").read_text())
    assert set(manifest["suites"]) == {"gsm8k_chat", "arc_easy_chat"}
    assert manifest["request"]["chat"] is True and manifest["request"]["thinking"] == "off"
    kinds = {c.kind for c in engine.calls}
    assert kinds == {"chat"} | ({"loglikelihood"} & kinds)  # preflight only: every item is a chat
    by_arm = defaultdict(list)
    for arm, payload in engine.chats:
        by_arm[arm].append(payload)
        assert payload["chat_template_kwargs"] == {"enable_thinking": False}
    assert len(by_arm["baseline"]) == len(by_arm["candidate"]) == 8
    rec = json.loads((out / "items" / "arc_easy_chat.candidate.jsonl").read_text().splitlines()[0])
    assert rec["extra"]["finish_reason"] == "stop" and rec["extra"]["empty"] is False


def test_chat_without_a_variant_and_thinking_without_chat_are_refused(
    tmp_path: Path, data_dir: Path, use: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    use(FakeEngine())
    code, _ = _compare(tmp_path, data_dir, "--suites", "gsm8k,mmlu", "--chat")
    assert code == 2 and "mmlu has no chat variant" in capsys.readouterr().err
    code, _ = _compare(tmp_path, data_dir, "--suites", "gsm8k", "--thinking", "on")
    assert code == 2 and "--thinking on reaches only chat suites" in capsys.readouterr().err


def test_thinking_auto_sends_no_template_switch(tmp_path: Path, data_dir: Path, use: Any) -> None:
    engine = use(FakeEngine(lambda arm, prompt: "The final answer is 3"))
    code, _ = _compare(tmp_path, data_dir, "--suites", "gsm8k_chat")
    assert code == 0 and engine.chats
    assert all("chat_template_kwargs" not in p for _, p in engine.chats)


def test_repeats_sample_a_chat_suite_with_one_seed_per_repeat(
    tmp_path: Path, data_dir: Path, use: Any
) -> None:
    engine = use(FakeEngine(sampled=lambda arm, prompt, seed: f"The final answer is {seed % 3}"))
    code, out = _compare(
        tmp_path, data_dir, "--suites", "gsm8k_chat", "--repeats", "2", "--temperature", "0.7"
    )
    assert code == 0
    seeds: dict[str, dict[str, list[int]]] = defaultdict(lambda: defaultdict(list))
    for c in engine.calls:
        if c.kind == "chat" and c.temperature:
            seeds[c.arm][c.prompt].append(int(c.seed or 0))
    assert len(seeds["baseline"]) == 4
    for prompt, base in seeds["baseline"].items():
        assert sorted(base) == sorted(seeds["candidate"][prompt]) and len(set(base)) == 2
    recs = [json.loads(x) for x in (out / "items" / "gsm8k_chat.baseline.jsonl").read_text().splitlines()]
    assert sorted(r["repeat"] for r in recs) == [0, 0, 0, 0, 1, 1, 1, 1]
    assert all(p["temperature"] == 0.7 for _, p in engine.chats)


def test_reasoning_is_stored_apart_in_the_records(tmp_path: Path, data_dir: Path, use: Any) -> None:
    use(FakeEngine(lambda arm, prompt: "The final answer is 1", reasoning=lambda arm, prompt: "I think so"))
    code, out = _compare(tmp_path, data_dir, "--suites", "gsm8k_chat")
    assert code == 0
    rec = json.loads((out / "items" / "gsm8k_chat.baseline.jsonl").read_text().splitlines()[0])
    assert rec["response"] == "The final answer is 1" and rec["extra"]["reasoning_content"] == "I think so"
    assert rec["tokens"]["reasoning"] > 0


def test_llamacpp_reasoning_format_is_a_launch_flag_on_both_arms() -> None:
    from dataclasses import replace

    from evalgate.config import LlamaCppConfig
    from evalgate.engines.llamacpp import LlamaCppEngine
    from evalgate.variants import parse_variant

    def args(config: LlamaCppConfig, name: str) -> dict[str, Any]:
        spec = LlamaCppEngine(config).launch_spec(replace(parse_variant(name), model=f"/{name}.gguf"))
        return dict(spec.args)

    assert all(args(LlamaCppConfig(reasoning_format="none"), v)["--reasoning-format"] == "none"
               for v in ("bf16", "int4"))  # fmt: skip
    assert "--reasoning-format" not in args(LlamaCppConfig(), "bf16")  # unset: llama-server's default


VLLM_CHAT = r"""
import json, sys
from vllm.entrypoints.openai.chat_completion.protocol import ChatCompletionRequest, ChatMessage
job = json.load(sys.stdin)
req = ChatCompletionRequest.model_validate(job["chat"])
message = ChatMessage(role="assistant", content=job["content"], reasoning=job["reasoning"])
print(json.dumps({"kwargs": req.chat_template_kwargs, "seed": req.seed, "top_k": req.top_k, "min_p": req.min_p,
                  "stop": req.stop, "message": json.loads(json.dumps(message.model_dump()))}))
"""


def test_the_chat_request_and_reasoning_field_are_vllms(data_dir: Path) -> None:
    """vLLM's own ChatCompletionRequest reads every field evalgate sends, and its ChatMessage's
    ``reasoning`` (vLLM renamed ``reasoning_content``) is kept apart and not graded."""
    from tests.engines.test_vllm_parser import run_with_vllm

    item = _items("gsm8k_chat", data_dir, 1, thinking=False)[0]
    messages, gen = item.payload[3][0]
    options = SuiteOptions(thinking=False, temperature=0.6, sampling=(("top_k", 20), ("min_p", 0.05)))
    chat = {**chat_payload(messages, gen, seed=5, options=options), "model": "m"}
    out = run_with_vllm(VLLM_CHAT, {"chat": chat, "content": "The final answer is 1", "reasoning": "it is 2"})
    assert out["kwargs"] == {"enable_thinking": False} and out["seed"] == 5
    assert out["top_k"] == 20 and out["min_p"] == 0.05
    answer = read_chat({"choices": [{"message": out["message"], "finish_reason": "stop"}]}, [])
    assert answer.content == "The final answer is 1" and answer.reasoning == "it is 2"


def test_a_private_exam_grades_the_answer_and_keeps_its_reasoning_only_when_revealed() -> None:
    """The private suite reads a chat answer by the same rule: reasoning counted, its text dropped
    unless --reveal-private (it may quote the item), no_answer where the grader extracts nothing,
    and --thinking in the request it hashes."""
    from evalgate.suites.private import private

    example = Path(__file__).resolve().parents[2] / "suites" / "private" / "example"
    suite = private(f"private:{example}")
    items = {it.item_id: it for it in suite.load(SuiteOptions(seed=3), None)}
    numeric = items["ex-numeric-1"]

    def run(content: str | None, reasoning: str | None, **options: Any) -> Any:
        message = {"role": "assistant", "content": content, "reasoning_content": reasoning}
        scorer = _Stub({"choices": [{"message": message, "finish_reason": "stop"}]})
        return asyncio.run(suite.run(numeric, scorer, SuiteOptions(seed=3, **options)))  # type: ignore[arg-type]

    hidden = run("no idea", "12 times 12 is 144")
    assert hidden.metrics == {"pass": 0.0} and hidden.extra.no_answer is True
    assert hidden.extra.reasoning_content is None and hidden.tokens["reasoning"] == 5
    shown = run("It is 144.", "12 times 12", reveal_private=True)
    assert shown.metrics == {"pass": 1.0} and shown.extra.reasoning_content == "12 times 12"
    assert shown.extra.no_answer is False
    inline = run("<think>it is 144</think>no idea", None)
    assert (
        inline.metrics == {"pass": 0.0}
        and inline.extra.think_inline
        and inline.extra.reasoning_content is None
    )
    off = suite.load(SuiteOptions(seed=3, thinking=False), None)[0]
    assert off.payload[1]["chat_template_kwargs"] == {"enable_thinking": False}
    assert off.prompt_hash != items[off.item_id].prompt_hash


def test_a_chat_suites_token_budget_is_its_own_option(tmp_path: Path, data_dir: Path, use: Any) -> None:
    """A reasoning model needs more than the task's 1,024 new tokens: --suite-opt gsm8k_chat.max_tokens
    sets the budget on both arms (with --chat too); --max-gen-tokens still caps it."""
    engine = use(FakeEngine(lambda arm, prompt: "The final answer is 3"))
    code, _ = _compare(
        tmp_path, data_dir, "--suites", "gsm8k", "--chat", "--suite-opt", "gsm8k_chat.max_tokens=8192"
    )
    assert code == 0 and {p["max_tokens"] for _, p in engine.chats} == {8192}
    assert {a for a, _ in engine.chats} == {"baseline", "candidate"}
    capped = _items("gsm8k_chat", data_dir, 1, max_gen_tokens=300)[0].payload[3][0][1]
    assert capped["max_gen_toks"] == 300
    assert default_registry().get("gsm8k_chat", options={"max_tokens": 8192}).gen_budget() == 8192


def test_dry_run_plans_the_chat_variants(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], data_dir: Path
) -> None:
    """--dry-run resolves the suites as the run does: --chat's variants, and its refusals."""
    from tests.engines.test_sglang_dry_run import dry

    code, out = dry(tmp_path, capsys, data_dir, "--chat", "--thinking", "off")
    assert code == 0, out
    assert "arc_easy_chat: 7 items" in out and "gsm8k_chat: 7 items" in out
    from evalgate.request import CompareRequest
    from evalgate.run.plan import resolve_suites

    with pytest.raises(ConfigError, match="--thinking on reaches only chat suites"):
        resolve_suites(CompareRequest(suites=("arc_easy", "gsm8k"), thinking="on"))
    assert [s.name for s in resolve_suites(CompareRequest(suites=("gsm8k",), chat=True))] == ["gsm8k_chat"]
