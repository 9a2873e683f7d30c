"""Tool-call validity on BFCL v4 single-turn cases (Patil et al. 2024, Berkeley Function Calling
Leaderboard; data in ``<data-dir>/tool_calls``, see shared/data/SOURCES.md).

Each case goes to ``/v1/chat/completions`` as OpenAI ``tools``; the engine's own tool-call
parser turns the output into ``tool_calls``. Metrics, each 0/1 per item so they pair:
``valid`` (primary: well-formed calls where calls are expected, none where none are),
``match`` (BFCL's AST-style accuracy) and ``decision`` (called iff a call was expected).

Prefill (the suite's ``prefill`` option, ``--suite-opt tool_calls.prefill=false`` or
``[suites.tool_calls]`` in evalgate.toml): a small model on the CPU engine never calls a tool by
itself, so there the assistant turn is prefilled with ``<tool_call>\\n`` and ``tool_choice`` is
``required``. It is on by default only for the llama.cpp engine, reported in the suite's
source line and in every record, and part of each prompt hash.

SGLang and vLLM fill ``tool_calls`` only through a tool-call parser named at launch: without
one, SGLang 0.5.23 leaves every call in the text, even with ``tool_choice: required``
(``_tool_call_parsing_active`` in ``sglang/srt/entrypoints/openai/serving_chat.py``), and vLLM
0.33 answers no calls whatever the tool_choice (``_extract_tool_calls`` in
``vllm/parser/abstract_parser.py``: no tool parser, no calls). Both arms would then score zero calls and PASS. So the engines refuse the
suite without a parser before launch (``require_tool_parser``), and ``preflight`` proves on each
server that one call really comes back parsed before any item runs.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from evalgate.engines import TOOL_PARSING_ENGINES
from evalgate.engines.client import RequestFailed
from evalgate.errors import ConfigError, PreflightError
from evalgate.store.facts import RecordExtra
from evalgate.suites import _bfcl
from evalgate.suites._base import Item, ItemResult, Scorer, Suite, SuiteOptions, prompt_hash, select_indices

__all__ = ["CATEGORIES", "ToolCallSettings", "ToolCallSuite", "tool_calls", "tool_prefill"]

# File stems under <data-dir>/tool_calls, in a fixed order (item order is file order, then row).
CATEGORIES = (
    "simple_python",
    "multiple",
    "parallel",
    "parallel_multiple",
    "live_simple",
    "live_multiple",
    "live_parallel",
    "live_parallel_multiple",
    "live_relevance",
    "irrelevance",
    "live_irrelevance",
)
PREFILL = "<tool_call>\n"
PREFILL_ENGINES = TOOL_PARSING_ENGINES
MAX_TOKENS = 512


def expectation(case: dict[str, Any]) -> str:
    """'no_call' (irrelevance), 'any_call' (live_relevance: no ground truth) or 'call'."""
    if "irrelevance" in case["category"]:
        return "no_call"
    return "call" if case.get("ground_truth") else "any_call"


class ToolCallSettings(BaseModel):
    """The suite's own options: ``[suites.tool_calls]``, or ``--suite-opt tool_calls.KEY=VALUE``."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    prefill: bool | None = Field(
        None, description="prefill <tool_call> with tool_choice=required; None: on for llamacpp only"
    )


def tool_prefill(options: SuiteOptions, settings: ToolCallSettings | None = None) -> bool:
    """The prefill setting: ``settings.prefill`` when set, else on for llama.cpp only."""
    explicit = settings.prefill if settings is not None else None
    return bool(explicit) if explicit is not None else options.engine in PREFILL_ENGINES


def build_request(case: dict[str, Any], *, prefill: bool, max_tokens: int) -> dict[str, Any]:
    """The chat request for one case, exactly as sent (minus the run seed)."""
    messages = [{"role": m["role"], "content": m["content"]} for m in case["question"][0]]
    payload: dict[str, Any] = {"messages": messages, "temperature": 0.0, "max_tokens": max_tokens}
    if case["function"]:
        payload["tools"] = _bfcl.openai_tools(case["function"])
        payload["tool_choice"] = "required" if prefill else "auto"
        if prefill:
            payload["messages"] = [*messages, {"role": "assistant", "content": PREFILL}]
    return payload


def score(
    message: dict[str, Any], case: dict[str, Any], tools: list[dict[str, Any]]
) -> tuple[dict[str, float], dict[str, Any]]:
    """Metrics and the extracted calls for one assistant message (pure; no server)."""
    expect = expectation(case)
    calls = _bfcl.parse_calls(message)
    problems = _bfcl.validity(calls, tools, expect)
    matched = _bfcl.match(calls, case["function"], case.get("ground_truth"), expect)
    decided = bool(calls) == (expect != "no_call")
    metrics = {"valid": float(not problems), "match": float(matched), "decision": float(decided)}
    extracted = {"calls": [{c.name: c.arguments} for c in calls], "problems": problems}
    return metrics, extracted


def recorded_message(message: dict[str, Any], finish_reason: Any) -> dict[str, Any]:
    """What a record keeps of the reply: content and calls (not the random call ids)."""
    calls = [
        {
            "name": (tc.get("function") or {}).get("name"),
            "arguments": (tc.get("function") or {}).get("arguments"),
        }
        for tc in message.get("tool_calls") or []
    ]
    return {"content": message.get("content"), "tool_calls": calls, "finish_reason": finish_reason}


@dataclass
class ToolCallSuite(Suite):
    name: str = "tool_calls"
    version: int = 1
    metrics: tuple[str, ...] = ("valid", "match", "decision")
    kind: str = "chat"
    private: bool = False
    settings: ToolCallSettings = field(default_factory=ToolCallSettings)
    needs_tool_parser = True  # not a field: a fact of the suite (Suite.needs_tool_parser)

    @property
    def takes_thinking(self) -> bool:
        """Its requests carry no ``enable_thinking``: ``--thinking`` does not reach it."""
        return False

    def _folder(self, options: SuiteOptions) -> Path:
        if options.data_dir is None:
            raise ConfigError(
                "tool_calls needs the BFCL case files, and there is no Hub copy of the combined set",
                fix="pass --data-dir pointing at a folder with tool_calls/BFCL_v4_*.jsonl (layout of shared/data)",
            )
        folder = Path(options.data_dir) / "tool_calls"
        missing = [c for c in CATEGORIES if not (folder / f"BFCL_v4_{c}.jsonl").exists()]
        if missing:
            raise ConfigError(
                f"{folder} lacks BFCL_v4_{missing[0]}.jsonl ({len(missing)} category file(s) missing)",
                fix="point --data-dir at a folder laid out like shared/data",
            )
        return folder

    def cases(self, options: SuiteOptions) -> list[dict[str, Any]]:
        return _read_cases(str(self._folder(options)))

    def size(self, options: SuiteOptions) -> int:
        return len(self.cases(options))

    def source(self, options: SuiteOptions) -> str:
        prefill = tool_prefill(options, self.settings)
        mode = f"prefill {PREFILL!r} + tool_choice=required" if prefill else "tool_choice=auto"
        where = Path(options.data_dir) / "tool_calls" if options.data_dir else "(needs --data-dir)"
        return f"{where} (BFCL v4); {mode}; max_tokens {self._max_tokens(options)}"

    def _max_tokens(self, options: SuiteOptions) -> int:
        cap = options.max_gen_tokens
        return MAX_TOKENS if cap is None else min(MAX_TOKENS, cap)

    def load(self, options: SuiteOptions, n: int | None) -> list[Item]:
        cases = self.cases(options)
        strata = [c["category"] for c in cases]
        indices = select_indices(len(cases), n, seed=options.seed, suite=self.name, strata=strata)
        prefill = tool_prefill(options, self.settings)
        items = []
        for i in indices:
            case = cases[i]
            request = build_request(case, prefill=prefill, max_tokens=self._max_tokens(options))
            user = [m["content"] for m in case["question"][0] if m["role"] == "user"]
            items.append(
                Item(
                    item_id=str(case["id"]),
                    prompt_hash=prompt_hash(request),
                    target={"expect": expectation(case), "ground_truth": case.get("ground_truth")},
                    payload=(case, request),
                    extra=RecordExtra(category=case["category"], tool_prefill=prefill),
                    display={"prompt": user[-1] if user else "", "choices": None},
                )
            )
        return items

    async def preflight(self, scorer: Scorer, options: SuiteOptions, *, server: str) -> dict[str, Any] | None:
        """Before this suite's items on a server: one call must come back parsed (``probe_tool_call``).
        Skipped on llama.cpp, whose server always parses calls with the model's template (--jinja)."""
        if options.engine in PREFILL_ENGINES:
            return None
        return await probe_tool_call(scorer, prefill=tool_prefill(options, self.settings), server=server)

    async def run(self, item: Item, scorer: Scorer, options: SuiteOptions) -> ItemResult:
        case, request = item.payload
        try:
            data = await scorer.chat({**request, "seed": options.seed})
        except RequestFailed as exc:
            if not _is_parse_failure(str(exc)):
                raise
            # The engine's tool-call parser rejected the output: an invalid response, not an outage.
            response = {"content": None, "tool_calls": [], "parse_error": str(exc)[:300]}
            attempted = float(expectation(case) != "no_call")  # the parser saw a call it could not read
            metrics = {"valid": 0.0, "match": 0.0, "decision": attempted}
            return ItemResult(
                response, {"calls": [], "problems": ["the engine could not parse the output"]}, metrics
            )
        choice = (data.get("choices") or [{}])[0]  # checked by the scorer
        message = choice.get("message") or {}
        metrics, extracted = score(message, case, request.get("tools", []))
        usage = data.get("usage") if isinstance(data.get("usage"), dict) else {}
        tokens = {k: v for k in ("prompt", "completion") if isinstance(v := usage.get(f"{k}_tokens", 0), int)}
        recorded = recorded_message(message, choice.get("finish_reason"))
        # what the gate's unanswered test reads: neither text nor a call, or cut at max tokens
        finish = recorded["finish_reason"]
        extra = RecordExtra(
            empty=not (recorded["content"] or "").strip() and not recorded["tool_calls"],
            finish_reason=finish if isinstance(finish, str) else None,
        )
        return ItemResult(recorded, extracted, metrics, tokens, extra=extra)


PROBE_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather for a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}
_MARKUP = ("<tool_call>", '{"name"', "[TOOL_CALLS]", "<function", "<|python_tag|>", '"arguments"')


def probe_request(*, prefill: bool, tool_choice: str) -> dict[str, Any]:
    """The preflight's chat: one obvious call, in the suite's own mode (prefill or not)."""
    messages: list[dict[str, Any]] = [
        {"role": "user", "content": "What is the weather in Paris right now? Use the get_weather tool."}
    ]
    if prefill:
        messages.append({"role": "assistant", "content": PREFILL})
    return {
        "messages": messages,
        "tools": [PROBE_TOOL],
        "tool_choice": "required" if prefill else tool_choice,
        "temperature": 0.0,
        "max_tokens": 128,
        "seed": 0,
    }


async def probe_tool_call(scorer: Scorer, *, prefill: bool, server: str) -> dict[str, Any]:
    """Prove the server turns a model's call into ``tool_calls``; a preflight row, or PreflightError.

    The suite's own mode first (``auto`` without prefill); a model that answers without a parsed
    call there is asked again with ``required``, which both engines constrain to a call. Call markup
    left in the text means the server's parser is missing or is not the model's."""
    text = ""
    for choice in ("auto", "required"):
        data = await scorer.chat(probe_request(prefill=prefill, tool_choice=choice))
        message = ((data.get("choices") or [{}])[0] or {}).get("message") or {}
        calls = _bfcl.parse_calls(message)
        if calls:
            return {
                "check": "tool call parsed",
                "ok": True,
                "detail": f"tool_choice={'required' if prefill else choice}: {calls[0].name}({calls[0].arguments})",
            }
        text = str(message.get("content") or "")
        if prefill:  # already tool_choice=required
            break
    markup = " with call markup left in its text" if any(mark in text for mark in _MARKUP) else ""
    raise PreflightError(
        f"preflight check 'tool call parsed' failed on the {server} server: it answered no parsed tool "
        f"call to a request for one{markup} (text: {text[:160]!r})",
        fix="start the server with the tool-call parser of this model (SGLang: [sglang] tool_call_parser, "
        "i.e. --tool-call-parser; vLLM: [vllm] tool_call_parser, i.e. --enable-auto-tool-choice "
        "--tool-call-parser), or drop the tool_calls suite",
    )


@cache
def _read_cases(folder: str) -> list[dict[str, Any]]:
    out = []
    for cat in CATEGORIES:
        path = Path(folder) / f"BFCL_v4_{cat}.jsonl"
        with open(path, encoding="utf-8") as f:
            for lineno, line in enumerate(f, 1):
                if not line.strip():
                    continue
                try:
                    out.append(json.loads(line))
                except json.JSONDecodeError as exc:
                    raise ConfigError(f"{path}:{lineno} is not JSON: {exc}", fix="restore the file") from exc
    return out


def _is_parse_failure(error: str) -> bool:
    """llama-server answers HTTP 500 when its tool-call parser cannot read the model's output."""
    return "HTTP 500" in error and "does not match the expected" in error


def tool_calls(name: str = "tool_calls") -> ToolCallSuite:
    return ToolCallSuite(name=name)
