"""The long_context suite (#21): generation, token-exact prompts, scoring, lengths and refusals.

The fake engine's tokenizer is one token per character, so its lengths are in characters; the
real tokenizer's lengths are checked in tests/e2e/test_e2e_long_context.py."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from evalgate.cli import main
from evalgate.engines import ServerHandle
from evalgate.engines.attach import ShardedScorer
from evalgate.engines.client import RetryPolicy
from evalgate.engines.fake import FakeEngine, FakeScorer
from evalgate.engines.llamacpp import LlamaCppEngine
from evalgate.engines.sglang import SGLangScorer
from evalgate.engines.vllm import VLLMScorer
from evalgate.errors import ConfigError
from evalgate.request import parse_context_lengths
from evalgate.suites import Registry, SuiteOptions, default_registry
from evalgate.suites import _haystack as hs
from evalgate.suites.long_context import (
    ANSWER_ROOM,
    LongContextSuite,
    build_prompt,
    default_lengths,
    plan_lengths,
)
from evalgate.variants import LaunchSpec
from tests.engines.test_engine_sglang import checkpoint

LENGTHS = (3000, 6000)  # characters on the fake engine


def _items(seed: int = 1234, n: int = 10, data_dir: Path | None = None) -> list[Any]:
    return LongContextSuite().load(SuiteOptions(seed=seed, context_lengths=LENGTHS, data_dir=data_dir), n)


def _text(item: Any, budget: int | None = None) -> tuple[str, int]:
    scorer = FakeScorer(FakeEngine(), "baseline", "u")
    spec = item.payload
    return asyncio.run(build_prompt(spec, scorer, budget=budget or spec.length - ANSWER_ROOM, chat=False))


def test_items_are_deterministic_per_seed() -> None:
    a, b, c = _items(), _items(), _items(seed=99)
    assert [it.item_id for it in a] == [it.item_id for it in b] == [it.item_id for it in c]
    assert [it.prompt_hash for it in a] == [it.prompt_hash for it in b]
    assert [it.payload for it in a] == [it.payload for it in b]
    assert not {it.prompt_hash for it in a} & {it.prompt_hash for it in c}
    assert _text(a[0]) == _text(b[0]) and _text(a[0]) != _text(c[0])


def test_limit_is_items_per_length_with_tasks_rotated(data_dir: Path) -> None:
    items = _items(n=10)
    assert len(items) == 20 and {it.extra.context_length for it in items} == set(LENGTHS)
    tasks = ("niah_single", "niah_multikey", "niah_multivalue", "vt")
    assert [it.item_id for it in items[:5]] == [f"{t}/3000/0000" for t in tasks] + ["niah_single/3000/0001"]
    with_qa = _items(n=10, data_dir=data_dir)  # the local GSM8K text: natural filler, and qa joins
    assert [it.extra.task for it in with_qa[:5]] == [*tasks, "qa"]
    assert with_qa[0].payload.filler != items[0].payload.filler
    with pytest.raises(ConfigError, match=r"gsm8k/train\.jsonl, which does not exist"):
        _items(data_dir=Path("/nonexistent"))


def test_depth_spread_evenly_over_each_task_and_length() -> None:
    items = LongContextSuite().load(SuiteOptions(context_lengths=(4096,)), 12)
    by_task: dict[str, list[float]] = {}
    for it in items:
        by_task.setdefault(it.extra.task, []).append(it.extra.depth)
    assert by_task["niah_single"] == [1 / 6, 0.5, 5 / 6]
    assert by_task["vt"] == [None, None, None]  # the chain spreads over the whole text


@pytest.mark.parametrize("task", ["niah_single", "niah_multikey", "niah_multivalue", "vt", "qa"])
def test_every_answer_sits_in_the_haystack_where_its_depth_says(task: str) -> None:
    passages = [
        hs.gsm8k_passage(f"Problem {i} asks about {i} apples?", f"Add them.\n#### {i}") for i in range(30)
    ]
    for depth in (0.05, 0.5, 0.95):
        spec = hs.make_spec(task, 8192, depth, np.random.default_rng(7), passages=passages, source="t")
        body = hs.assemble(spec, 3000)
        start, end = body.haystack
        for needle, offset in zip(spec.needles, body.offsets, strict=True):
            assert body.text[offset : offset + len(needle.text)] == needle.text
            where = (offset - start) / (end - start)
            assert abs(where - needle.depth) < 0.06, (task, needle.depth, where)
        haystack = body.text[start:end]
        assert all(a in haystack for a in spec.answers)
        if spec.depth is not None:
            assert spec.needles[0].depth == depth and spec.answers[0] in spec.needles[0].text


def test_vt_chain_binds_every_name_to_the_value() -> None:
    spec = hs.make_spec("vt", 4096, 0.5, np.random.default_rng(3))
    value = spec.question.split("value ")[1].split(" ")[0]
    chain = [n.text for n in spec.needles[:5]]
    assert chain[0] == f"VAR {spec.answers[0]} = {value}."
    for prev, cur, name in zip(spec.answers, chain[1:], spec.answers[1:], strict=False):
        assert cur == f"VAR {name} = VAR {prev}."
    assert not set(spec.answers) & {n.text.split()[1] for n in spec.needles[5:]}  # the distractor chain


@pytest.mark.parametrize(
    ("answers", "response", "score"),
    [
        (("4820193",), " 4820193.", 1.0),  # niah_single
        (("4820193",), " The number is 4820193, I think", 1.0),  # extra text
        (("4820193",), " 4820139.", 0.0),
        (("1111111", "2222222", "3333333", "4444444"), " 1111111, 2222222, 3333333, 4444444", 1.0),
        (("1111111", "2222222", "3333333", "4444444"), " 1111111, 2222222, 4444444", 0.0),  # partial
        (("ABCDE", "FGHIJ", "KLMNO"), " abcde, fghij and KLMNO", 1.0),  # case-insensitive
        (("ABCDE", "FGHIJ", "KLMNO"), " ABCDE FGHIJ", 0.0),
        (("18",), " 18", 1.0),  # qa
        (("18",), "", 0.0),
    ],
)
def test_string_match_all(answers: tuple[str, ...], response: str, score: float) -> None:
    assert hs.string_match_all(response, answers) == score


def test_prompt_fits_its_budget_within_a_word() -> None:
    for item in _items(n=5):
        budget = item.payload.length - ANSWER_ROOM
        text, n = _text(item)
        assert n == len(text) and budget - 12 <= n <= budget  # one token per character: about a word
        assert item.payload.answers[0] in text
        assert text.endswith(f"{item.payload.question}\n{item.payload.answer_prefix}")
        assert text.count(item.payload.answer_prefix) == 1


def test_a_length_too_short_for_the_prompt_is_refused() -> None:
    with pytest.raises(ConfigError, match="no room for a haystack"):
        _text(_items()[0], budget=100)


def test_context_lengths_parse_and_refuse_bad_values() -> None:
    assert parse_context_lengths("1k, 2k,4096") == (1024, 2048, 4096)
    assert parse_context_lengths("8k,1k") == (1024, 8192)
    for bad, says in (
        ("0", "'0' is not a length"),
        ("abc", "'abc' is not"),
        ("1k,1024", "1024 twice"),
        ("", "''"),
    ):
        with pytest.raises(ConfigError, match=says):
            parse_context_lengths(bad)


def test_context_lengths_flag_errors_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["compare", "--engine", "fake", "--suites", "long_context", "--context-lengths", "2k,x"]) == 2
    assert "'x' is not a length in tokens" in capsys.readouterr().err
    assert main(["compare", "--engine", "fake", "--suites", "long_context", "--context-lengths", "100"]) == 2
    assert "at least 512 tokens" in capsys.readouterr().err


def test_default_lengths_follow_the_slot_and_the_preset() -> None:
    assert default_lengths(None, "smoke") == (1024, 2048, 4096)
    assert default_lengths(4096, "smoke") == (1024, 2048, 4096)
    assert default_lengths(8192, "smoke") == (1024, 2048, 4096)
    assert default_lengths(8192, "quick") == (1024, 2048, 4096, 8192)
    assert default_lengths(6000, "quick") == (1024, 2048, 4096)
    assert default_lengths(1 << 20, "quick")[-1] == 32768
    assert default_lengths(1 << 17, "full")[-1] == 1 << 17
    with pytest.raises(ConfigError, match="a slot holds 512 tokens") as short:
        default_lengths(512, "smoke")
    assert "ctx_per_slot" in short.value.fix
    assert plan_lengths(None, {"baseline": 8192, "candidate": 4096}, "quick") == (1024, 2048, 4096)
    with pytest.raises(ConfigError, match="does not fit the candidate") as err:
        plan_lengths((1024, 8192), {"baseline": 8192, "candidate": 4096}, "quick")
    assert "ctx_per_slot" in err.value.fix and "--context-lengths" in err.value.fix


def test_llamacpp_slot_context_is_its_context_over_its_slots() -> None:
    spec = LaunchSpec("llamacpp", "m.gguf", (("-c", "16384"), ("-np", "4")), (), frozenset())
    assert LlamaCppEngine().slot_context(spec) == 4096


def _run(out: Path, *flags: str) -> int:
    base = [
        "compare",
        "--engine",
        "fake",
        "--baseline",
        "bf16",
        "--candidate",
        "fp8",
        "--suites",
        "long_context",
    ]
    return main([*base, "--out", str(out), *flags])


def _records(run: Path, arm: str) -> dict[str, dict[str, Any]]:
    lines = (run / "items" / f"long_context.{arm}.jsonl").read_text().splitlines()
    return {r["item_id"]: r for r in map(json.loads, lines)}


def _answer(arm: str, prompt: str) -> str:
    """A perfect reader of the needles for the key asked (the candidate misses multivalue's rest)."""
    last = prompt.rsplit("\n", 1)[-1]
    if " for " not in last:
        return " no idea"
    key = last.split(" for ", 1)[1].split(" mentioned", 1)[0]
    mark = f"One of the special magic numbers for {key} is: "
    values = [part.split(".", 1)[0] for part in prompt.split(mark)[1:]]
    if arm == "candidate" and "numbers for" in last:
        values = values[:1]
    return " " + ", ".join(values)


def test_both_arms_and_both_runs_send_identical_prompts(tmp_path: Path, use: Any) -> None:
    engine = use(FakeEngine(_answer))
    flags = ("--context-lengths", "3000,5000", "--limit", "4")
    assert _run(tmp_path / "a", *flags) in (0, 1)
    assert _run(tmp_path / "b", *flags) in (0, 1)
    runs = [_records(tmp_path / r, arm) for r in ("a", "b") for arm in ("baseline", "candidate")]
    assert len(runs[0]) == 8
    for key in ("prompt_hash",):
        assert len({tuple(sorted((i, r[key]) for i, r in recs.items())) for recs in runs}) == 1
    sent = {tuple(sorted((i, r["extra"]["sent_hash"]) for i, r in recs.items())) for recs in runs}
    assert len(sent) == 1
    base = runs[0]
    for item_id, rec in base.items():
        task, length, _ = item_id.split("/")
        assert rec["extra"]["task"] == task and rec["extra"]["context_length"] == int(length)
        assert int(length) - ANSWER_ROOM - 12 <= rec["extra"]["prompt_tokens"] <= int(length) - ANSWER_ROOM
    assert base["niah_single/3000/0000"]["metrics"]["string_match_all"] == 1.0
    assert runs[1]["niah_multivalue/3000/0000"]["metrics"]["string_match_all"] == 0.0  # candidate: partial
    asked = [c.prompt for c in engine.calls if c.kind == "generate"]
    assert len(asked) == 32 and all(len(p) <= 5000 - ANSWER_ROOM for p in asked)
    shown = [
        json.loads(line)
        for line in (tmp_path / "a" / "prompts" / "long_context.jsonl").read_text().splitlines()
    ]
    assert len(shown) == 8 and all(len(json.dumps(row)) < 600 for row in shown)  # never the haystack
    manifest = json.loads((tmp_path / "a" / "manifest.json").read_text())
    assert manifest["request"]["context_lengths"] == [3000, 5000]


def test_default_lengths_are_recorded_and_kept_on_resume(tmp_path: Path, use: Any) -> None:
    use(FakeEngine(context=2048))
    assert _run(tmp_path / "r", "--limit", "1") in (0, 1)
    manifest = json.loads((tmp_path / "r" / "manifest.json").read_text())
    assert manifest["request"]["context_lengths"] == [1024, 2048]  # powers of two up to the slot
    assert main(["compare", "--resume", str(tmp_path / "r")]) in (0, 1)


def test_a_slot_too_small_is_refused_before_launch(tmp_path: Path, use: Any, capsys: Any) -> None:
    engine = use(FakeEngine(context=4096))
    assert _run(tmp_path / "x", "--context-lengths", "1k,8k") == 2
    err = capsys.readouterr().err
    assert "long_context at 8192 tokens does not fit the baseline: a slot holds 4096 tokens" in err
    assert "ctx_per_slot" in err and engine.launched == []


def test_a_slot_too_small_is_refused_in_the_preflight(tmp_path: Path, use: Any, capsys: Any) -> None:
    engine = use(FakeEngine(context=4000))
    engine.slot_context = lambda spec: None  # type: ignore[method-assign]  # attach mode: unknown before launch
    assert _run(tmp_path / "x", "--context-lengths", "3000,5000", "--limit", "1") == 2
    err = capsys.readouterr().err
    assert "does not fit the baseline server: a slot holds 4000 tokens" in err
    assert engine.launched == [["baseline"]] and not [c for c in engine.calls if c.kind == "generate"]


def test_suites_list_shows_tasks_and_lengths(capsys: pytest.CaptureFixture[str], monkeypatch: Any) -> None:
    only = Registry()  # the other suites load lm-eval: seconds
    only.register("long_context", default_registry()._factories["long_context"])
    monkeypatch.setattr("evalgate.cli.suites.default_registry", lambda: only)
    assert main(["suites", "list"]) == 0
    out = capsys.readouterr().out
    assert "long_context" in out and "niah_multivalue" in out and "1k,2k,4k" in out


def test_registry_has_the_suite() -> None:
    suite = default_registry().get("long_context")
    assert suite.metrics[0] == "string_match_all" and suite.kind == "generate"
    assert not getattr(suite, "samples", True)


@pytest.mark.parametrize("card", [{"max_model_len": 32768}, {}, {"max_model_len": None}])
def test_sglang_and_vllm_scorers_read_the_context_from_v1_models(card: dict[str, Any]) -> None:
    """Both list ``max_model_len`` on each model card (SGLang 0.5.23 http_server.py's ModelCard:
    the model config's context_len; vLLM: --max-model-len or the model's)."""

    async def models(request: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [{"id": "m", "object": "model", **card}]})

    async def main() -> list[int | None]:
        app = web.Application()
        app.router.add_get("/v1/models", models)
        async with TestServer(app, host="127.0.0.1") as server:
            url = str(server.make_url("")).rstrip("/")
            handle = ServerHandle("arm", url, "k", [], Path("x.log"), info={"served_model": "m"})
            retry = RetryPolicy(attempts=1, timeout_s=5)
            scorers = [
                SGLangScorer(handle, concurrency=1, retry=retry),
                VLLMScorer(handle, concurrency=1, retry=retry),
            ]
            try:
                both = ShardedScorer(scorers, ["a", "b"])
                return [
                    *(await asyncio.gather(*(s.context_length() for s in scorers))),
                    await both.context_length(),
                ]
            finally:
                for s in scorers:
                    await s.aclose()

    want = card.get("max_model_len")
    assert asyncio.run(main()) == [want, want, want]


def test_tasks_option_chooses_and_checks_the_tasks() -> None:
    suite = default_registry().get("long_context", options={"tasks": "niah_single, vt"})
    items = suite.load(SuiteOptions(context_lengths=(4096,)), 4)
    assert [it.item_id for it in items] == [
        "niah_single/4096/0000",
        "vt/4096/0000",
        "niah_single/4096/0001",
        "vt/4096/0001",
    ]
    assert [it.extra.depth for it in items[::2]] == [0.25, 0.75]
    for bad in ("niah", "vt,vt", ""):
        with pytest.raises(ConfigError, match=r"long_context\.tasks") as err:
            default_registry().get("long_context", options={"tasks": bad})
        assert "niah_single" in err.value.fix
    qa_only = default_registry().get("long_context", options={"tasks": "qa"})
    with pytest.raises(ConfigError, match="needs the GSM8K text"):
        qa_only.load(SuiteOptions(), 2)


def test_chat_mode_wraps_the_prompt_in_the_servers_template() -> None:
    item = _items()[0]
    scorer = FakeScorer(FakeEngine(), "baseline", "u")
    budget = item.payload.length - ANSWER_ROOM
    text, n = asyncio.run(build_prompt(item.payload, scorer, budget=budget, chat=True))
    assert text.startswith("<|user|>A special magic number is hidden")
    assert text.endswith(f"<|end|><|assistant|>{item.payload.answer_prefix}") and budget - 12 <= n <= budget
    assert text.count(item.payload.answer_prefix) == 1  # the assistant's turn starts the answer, once


def test_dry_run_settles_the_lengths_from_the_engines_context(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    model = checkpoint(tmp_path, "Llama-BF16")
    (Path(model) / "config.json").write_text(json.dumps({"model_type": "llama", "num_hidden_layers": 2}))
    toml = tmp_path / "evalgate.toml"
    toml.write_text(f"[sglang]\nmodel_path = {json.dumps(model)}\ncontext_length = 8192\n")
    base = ["compare", "--engine", "sglang", "--dry-run", "--config", str(toml), "--suites", "long_context"]
    assert main([*base, "--preset", "quick", "--limit", "2"]) == 0
    assert "8 items;" in capsys.readouterr().out  # 1k, 2k, 4k, 8k: up to [sglang] context_length
    assert main([*base, "--limit", "2"]) == 0
    assert "lengths 1k,2k,4k;" in capsys.readouterr().out  # smoke: at most 4k
    assert main([*base, "--context-lengths", "16k"]) == 2
    assert "a slot holds 8192 tokens" in capsys.readouterr().err


def test_context_lengths_without_the_suite_are_refused(tmp_path: Path, use: Any, capsys: Any) -> None:
    use(FakeEngine())
    flags = ["--suites", "gsm8k", "--context-lengths", "2k", "--out", str(tmp_path / "x")]
    assert main(["compare", "--engine", "fake", *flags]) == 2
    assert "does not include it" in capsys.readouterr().err
