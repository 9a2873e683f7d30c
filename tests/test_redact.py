"""Pure checks of the guards a run relies on: redaction, server identity, the run lock, the
request's value checks, text decoding, run ids on records, and the regex grader's time limit."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from evalgate.engines.attach import require_two_servers, server_identity
from evalgate.errors import ConfigError
from evalgate.redact import PRIVATE, excerpt, payload_texts, redact, redact_url
from evalgate.request import CompareRequest, check_request
from evalgate.store.lock import RunLock
from evalgate.store.records import RecordStore, parse_record
from evalgate.suites.private import ExamItem, RegexTimeout, regex_match
from evalgate.user_files import read_text

KEY = "sk-live-0123456789abcdef"
EXAMPLE = Path(__file__).resolve().parents[1] / "reports" / "example"


def test_keys_and_credentials_are_masked_in_every_form() -> None:
    body = json.dumps({"headers": {"Authorization": f"Bearer {KEY}"}, "echo": KEY})
    out = redact(body + " http://alice:hunter2@10.0.0.1:8000/v1", secrets=[KEY])
    assert KEY not in out and "hunter2" not in out and "alice" not in out
    assert "Bearer ***" in out and "http://***@10.0.0.1:8000/v1" in out
    assert redact("token abcdefghij and Basic dXNlcjpwYXNz") == "token *** and Basic ***"
    assert redact_url("https://h:443/x") == "https://h:443/x"  # nothing to mask


def test_private_text_is_masked_whole_escaped_and_in_fragments() -> None:
    prompt = 'What is the "launch code" of Project Ünicorn?\nAnswer briefly.'
    echoed = json.dumps({"messages": [{"role": "user", "content": prompt}]})  # escaped quotes, \n, \u00dc
    assert "launch code" not in redact(echoed, private=[prompt])
    partial = "upstream said: " + prompt[5:40] + " ..."  # an echo cut short
    out = redact(partial, private=[prompt])
    assert prompt[5:40] not in out and PRIVATE in out and out.startswith("upstream said:")
    assert redact("answer B or 42", private=["B", "42"]) == f"answer {PRIVATE} or {PRIVATE}"
    assert redact("Bob", private=["B"]) == "Bob"  # a short answer only as a whole word


def test_excerpt_and_payload_texts() -> None:
    assert excerpt("a\n  b") == "a b" and len(excerpt("x" * 500, 120)) == 120
    assert redact("y" * 500, limit=50).endswith("…")
    payload = {"messages": [{"role": "system", "content": "You are a grader."}], "max_tokens": 5}
    assert payload_texts(payload) == ["You are a grader."]  # role names are too short to matter


@pytest.mark.parametrize(
    "a, b",
    [
        ("http://LOCALHOST:8000/", "http://127.0.0.1:8000"),
        ("http://localhost:80/v1", "http://127.0.0.2"),
        ("HTTPS://Example.com", "https://example.com:443/"),
        ("http://user:pw@[::1]:9000", "http://0.0.0.0:9000/v1/"),
    ],
)
def test_one_server_under_many_names(a: str, b: str) -> None:
    assert server_identity(a) == server_identity(b)
    with pytest.raises(ConfigError, match="are the same server") as err:
        require_two_servers([b, "http://other:1"], [a])
    assert "--same-server-ok" in err.value.fix and "pw" not in err.value.cause


def test_different_servers_pass() -> None:
    assert server_identity("http://h:8000") != server_identity("http://h:8001")
    assert server_identity("http://a:80") != server_identity("https://a:80")
    require_two_servers(["http://127.0.0.1:8000"], ["http://127.0.0.1:8001", "http://10.0.0.2:8000"])


def test_a_second_writer_fails_at_once(tmp_path: Path) -> None:
    first = RunLock(tmp_path / "run").acquire()
    t0 = time.monotonic()
    with pytest.raises(ConfigError, match=r"in use by pid \d+"):
        RunLock(tmp_path / "run").acquire()
    assert time.monotonic() - t0 < 1
    first.release()
    RunLock(tmp_path / "run").acquire().release()  # free again


@pytest.mark.parametrize(
    "values, message",
    [
        ({"flip_budget": 5.0}, "--flip-budget 5 is not a rate between 0 and 1"),
        ({"flip_budget": 0.0}, "--flip-budget 0 is not a rate"),
        ({"max_gen_tokens": -5}, "--max-gen-tokens -5 must be at least 1"),
        ({"max_gen_tokens": 0}, "--max-gen-tokens 0 must be at least 1"),
        ({"request_timeout_s": 0.0}, "--request-timeout 0 must be more than 0"),
        ({"tries": 0}, "--tries 0 must be at least 1"),
        ({"deadline_s": -1.0}, "--deadline -1 must be more than 0"),
        ({"alpha": 1.0}, "--alpha 1 is not between 0 and 1"),
        ({"limit": 0}, "--limit must be at least 1"),
    ],
)
def test_request_values_are_checked(values: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError, match=message.replace("(", r"\(")):
        check_request(CompareRequest(**values))  # type: ignore[arg-type]


def test_out_must_be_a_folder(tmp_path: Path) -> None:
    (tmp_path / "f").write_text("x")
    with pytest.raises(ConfigError, match="is a file"):
        check_request(CompareRequest(out=tmp_path / "f"))
    check_request(CompareRequest(out=tmp_path / "new"))


def test_text_that_is_not_utf8_names_file_and_line(tmp_path: Path) -> None:
    path = tmp_path / "evalgate.toml"
    path.write_bytes(b"[llamacpp]\nthreads = 2\n# caf\xe9\n")
    with pytest.raises(ConfigError, match=r"evalgate.toml:3: not UTF-8 text \(byte 0xe9\)"):
        read_text(path)


def test_records_without_a_run_id_belong_to_the_folders_run(tmp_path: Path) -> None:
    line = (EXAMPLE / "items" / "arc_easy.baseline.jsonl").read_text().splitlines()[0]
    old = {k: v for k, v in json.loads(line).items() if k != "run_id"}
    assert parse_record(json.dumps(old)).run_id == ""
    store = RecordStore(tmp_path, run_id="this-run")
    path = store.path("arc_easy", "baseline")
    path.parent.mkdir()
    path.write_text(json.dumps(old) + "\n")
    assert len(store.load("arc_easy", "baseline")) == 1
    path.write_text(line + "\n")  # another run's record
    with pytest.raises(ConfigError, match=f"holds records of run {json.loads(line)['run_id']}"):
        store.load("arc_easy", "baseline")


def test_a_backtracking_regex_is_an_exam_error_within_its_limit() -> None:
    t0 = time.monotonic()
    with pytest.raises(RegexTimeout, match=r"more than 0\.2 s"):
        regex_match(timeout_s=0.2)("a" * 5000 + "!", r"(a+)+$")
    assert time.monotonic() - t0 < 2
    item = ExamItem("slow-1", "prompt", r"(a+)+$", "regex")
    with pytest.raises(RegexTimeout, match="private exam item 'slow-1'") as err:
        item.grade("a" * 5000 + "!")
    assert err.value.exit_code == 2 and "(a+)+" in err.value.fix
    assert regex_match()("aaaa", r"(a+)+$") == (True, "aaaa")  # fine on text it does not explode on


def test_a_key_and_url_credentials_on_one_arm_are_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    from evalgate.engines.attach import ExternalEngine

    urls = {"baseline": ["http://ann:pw@10.0.0.1:1"], "candidate": ["http://10.0.0.2:1"]}
    ExternalEngine(urls)  # credentials alone: sent as HTTP basic auth
    monkeypatch.setenv("EVALGATE_BASELINE_API_KEY", KEY)
    with pytest.raises(ConfigError, match="both EVALGATE_BASELINE_API_KEY and credentials in its URL"):
        ExternalEngine(urls)
