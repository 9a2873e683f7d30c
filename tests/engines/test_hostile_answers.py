"""Issue #32, the server's side: a redirect, an endless body, one server under another spelling, a
``/tokenize`` of non-integers, and chat content null. Each ends in an error naming the cause (an
item error, exit 3, or exit 2 before anything starts), never in a score from another server's
answer, a MemoryError, a PASS of one server against itself, or a traceback.

Driven through ``evalgate compare`` in attach mode against the hostile llama-server stubs
(tests/helpers/hostile_server.py), and on the checks themselves where that is closer.
"""

from __future__ import annotations

import asyncio
import traceback
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from evalgate.cli import main
from evalgate.engines import client as client_module
from evalgate.engines._scoring import check_chat, token_ids
from evalgate.engines.attach import require_two_servers, server_identity
from evalgate.engines.client import HttpClient, RequestFailed, RetryPolicy
from evalgate.engines.llamacpp._scorer import LlamaCppScorer
from evalgate.engines.sglang._scorer import SGLangScorer
from evalgate.engines.vllm._scorer import VLLMScorer
from evalgate.errors import ConfigError, InvalidResponse
from evalgate.store.records import RecordStore
from tests.helpers.background import serving
from tests.helpers.exams import number_exam
from tests.helpers.hostile_server import Hostile, hostile_app

Stub = Callable[..., Hostile]
ARC = ("--suites", "arc_easy", "--limit", "3")


@pytest.fixture
def stub() -> Iterator[Stub]:
    with serving(Hostile, hostile_app) as start:
        yield start


def compare(base: str, cand: str, out: Path, capsys: Any, *flags: str) -> tuple[int, str]:
    """Exit code and everything printed; an exception out of main, or a traceback, fails the test."""
    argv = ["compare", "--baseline", "bf16", "--candidate", "fp8kv", "--skip-kernel-check",
            "--baseline-url", base, "--candidate-url", cand, "--out", str(out), *flags]  # fmt: skip
    try:
        code = main(argv)
    except BaseException:
        pytest.fail("evalgate crashed instead of exiting with a cause:\n" + traceback.format_exc())
    printed = capsys.readouterr()
    text = printed.out + printed.err
    assert "Traceback" not in text and not list(out.glob("logs/traceback-*")), text
    return code, text


def records(out: Path, suite: str, arm: str) -> list[Any]:
    return list(RecordStore(out).load(suite, arm).values())


def exam(folder: Path, answer: str, n: int = 3) -> str:
    return number_exam(folder, answer, n)


# -- 1. a redirect is never followed ---------------------------------------------------------------


def test_a_candidate_redirecting_to_the_baseline_is_an_error_never_its_answers(
    stub: Stub, tmp_path: Path, capsys: Any
) -> None:
    base = stub("good", answer="yes")
    cand = stub("redirect", answer="no", redirect_to=base.url)
    out = tmp_path / "run"
    code, printed = compare(base.url, cand.url, out, capsys, "--suites", exam(tmp_path / "exam", "yes"))
    assert code == 3, printed
    kept = records(out, "private:exam", "candidate")
    assert kept and all(r.error and not r.metrics for r in kept)  # never graded on the baseline's "yes"
    assert all("HTTP 307" in r.error and f"{base.url}/v1/chat/completions" in r.error for r in kept)


# -- 2. a body is read up to a cap -------------------------------------------------------------------


def test_a_3_gib_content_length_is_refused_before_reading(
    stub: Stub, data_dir: Path, tmp_path: Path, capsys: Any
) -> None:
    out = tmp_path / "run"
    code, printed = compare(
        stub("good").url, stub("huge_length").url, out, capsys, *ARC, "--data-dir", str(data_dir)
    )
    assert code == 3, printed
    errors = [r.error for r in records(out, "arc_easy", "candidate")]
    assert errors and all(e and "3221225472 bytes" in e and "67108864 bytes (64 MiB)" in e for e in errors)


def test_a_chunked_body_past_the_cap_is_refused(
    stub: Stub, data_dir: Path, tmp_path: Path, capsys: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No Content-Length: the chunks are counted. The padded answer is valid JSON that the old
    client read whole and scored."""
    monkeypatch.setattr(client_module, "MAX_ANSWER_BYTES", 2**20)
    out = tmp_path / "run"
    code, printed = compare(
        stub("good").url, stub("padded_body").url, out, capsys, *ARC, "--data-dir", str(data_dir)
    )
    assert code == 3, printed
    errors = [r.error for r in records(out, "arc_easy", "candidate")]
    assert errors and all(e and "over 1048576 bytes" in e for e in errors)


def test_json_nested_past_the_parser_is_not_json_never_a_recursion_error(stub: Stub) -> None:
    assert client_module._json(b"") is None
    with pytest.raises(ValueError, match="nested too deeply"):
        client_module._json(b"[" * 200_000)


def test_a_3xx_from_the_client_names_status_and_location(stub: Stub) -> None:
    target = stub("good")
    hop = stub("redirect", grace=0, redirect_to=target.url)

    async def go() -> Any:
        async with HttpClient(hop.url, api_key=None, concurrency=1, retry=RetryPolicy(attempts=1)) as c:
            return await c.post("/v1/completions", {"prompt": "hi"})

    with pytest.raises(
        RequestFailed, match=r"redirect \(HTTP 307 to http://127\.0\.0\.1:\d+/v1/completions\)"
    ):
        asyncio.run(go())
    assert not target.sent("/v1/completions")


# -- 3. one server under another spelling ---------------------------------------------------------


@pytest.mark.parametrize(
    "spelling",
    [
        "http://[::ffff:127.0.0.1]:{p}",
        "http://127.0.0.1:{p}/x/..",
        "http://localhost:{p}",
        "http://127.1:{p}/v1/",
    ],
)
def test_one_server_under_another_spelling_is_refused(
    spelling: str, stub: Stub, data_dir: Path, tmp_path: Path, capsys: Any
) -> None:
    one = stub("good")  # no media marker: the server says nothing of its instance
    other = spelling.format(p=one.url.rsplit(":", 1)[1])
    code, printed = compare(one.url, other, tmp_path / "run", capsys, *ARC, "--data-dir", str(data_dir))
    assert code == 2, printed
    assert "are the same server" in printed and one.url in printed and other in printed
    assert not one.sent("/v1/completions")  # refused before any request


def test_same_server_ok_runs_one_server_against_itself(
    stub: Stub, data_dir: Path, tmp_path: Path, capsys: Any
) -> None:
    one = stub("good")
    other = one.url + "/x/.."
    code, printed = compare(
        one.url, other, tmp_path / "aa", capsys, *ARC, "--data-dir", str(data_dir), "--same-server-ok"
    )
    assert code == 0, printed  # on purpose: an A/A check of the harness


def test_spellings_normalise_and_two_servers_pass() -> None:
    assert server_identity("http://[::FFFF:127.0.0.1]:80/a/./b/../") == server_identity("http://localhost/a")
    assert server_identity("http://h:1/x/%2e%2e/v1") == server_identity("http://H.:1")
    with pytest.raises(ConfigError, match="are the same server"):
        require_two_servers(["http://127.0.0.1:9"], ["http://[::ffff:7f00:1]:9"])
    with pytest.raises(ConfigError, match="are the same server"):
        require_two_servers(["http://10.1.2.3:9/x/.."], ["http://[::ffff:10.1.2.3]:9"])
    require_two_servers(
        ["http://127.0.0.1:9"], ["http://127.0.0.1:10", "http://10.1.2.3:9", "http://[::2]:9"]
    )
    require_two_servers(["http://127.0.0.1:9/a"], ["http://127.0.0.1:9/b"])  # a proxy's two routes


# -- 4. /tokenize answering something that is no token id ------------------------------------------


@pytest.mark.parametrize("bad", ["7", 1.5, True, [1], -3, None])
def test_tokenize_answering_non_integers_is_an_item_error(
    bad: Any, stub: Stub, data_dir: Path, tmp_path: Path, capsys: Any
) -> None:
    out = tmp_path / "run"
    code, printed = compare(
        stub("good").url,
        stub("bad_tokens", bad_token=bad).url,
        out,
        capsys,
        *ARC,
        "--data-dir",
        str(data_dir),
    )
    assert code == 3, printed
    errors = [r.error for r in records(out, "arc_easy", "candidate")]
    assert errors and all(e and "answered /tokenize with a token id of" in e for e in errors)
    assert not [r for r in records(out, "arc_easy", "baseline") if r.error]


class _Answers:
    """The scorers' ``http``: every POST answered with ``data``."""

    def __init__(self, data: Any) -> None:
        self.data = data

    async def post(self, path: str, body: Any) -> Any:
        return self.data


@pytest.mark.parametrize("cls", [LlamaCppScorer, SGLangScorer, VLLMScorer])
@pytest.mark.parametrize(
    "data",
    [{"tokens": ["a"]}, {"tokens": [2.0]}, {"tokens": [False]}, {"tokens": [[3]]}, {"tokens": None}, [1]],
)
def test_every_scorer_checks_its_token_ids(cls: type, data: Any) -> None:
    scorer = cls.__new__(cls)
    scorer.http, scorer.server, scorer.model = _Answers(data), "candidate", None
    with pytest.raises(InvalidResponse, match="the candidate server answered /tokenize with"):
        asyncio.run(scorer._tokenize("text"))
    scorer.http = _Answers({"tokens": [0, 5, 2**20], "count": 3})
    assert asyncio.run(scorer._tokenize("text")) == [0, 5, 2**20]
    assert token_ids({"tokens": []}, "c") == []


# -- 5. chat content null --------------------------------------------------------------------------


def test_chat_content_null_is_an_item_error_not_an_empty_answer(
    stub: Stub, tmp_path: Path, capsys: Any
) -> None:
    """The README: null text is an item error. Before, the candidate's nulls were graded as empty
    answers and the pair BLOCKed on the unanswered row (exit 1)."""
    out = tmp_path / "run"
    base, cand = stub("good", answer="yes"), stub("null_text", answer="yes")
    code, printed = compare(base.url, cand.url, out, capsys, "--suites", exam(tmp_path / "exam", "yes"))
    assert code == 3, printed
    kept = records(out, "private:exam", "candidate")
    assert kept and all(r.error and "null as the content" in r.error for r in kept)


def test_null_content_is_text_only_beside_calls_or_reasoning() -> None:
    def answer(**message: Any) -> dict[str, Any]:
        return {"choices": [{"message": {"role": "assistant", **message}}]}

    for message in (
        {"content": None},
        {"content": None, "tool_calls": []},
        {"content": None, "reasoning": ""},
    ):
        with pytest.raises(InvalidResponse, match="null as the content"):
            check_chat(answer(**message), "c")
    assert check_chat(answer(content=None, tool_calls=[{"id": "1", "type": "function"}]), "c")
    assert check_chat(answer(content=None, reasoning_content="thinking, cut at max_tokens"), "c")
    assert check_chat(answer(content=""), "c")  # an empty answer is an answer (the unanswered row)
