"""`evalgate compare` never turns a crash into BLOCK, a bad value into a launched run, or another
run's records into this one's: whole compares on the fake engine (tests/helpers/guards.py).

Exit 1 is BLOCK and nothing else: an unexpected exception is exit 3 with its traceback saved; a
bad value is exit 2 before any server starts; one run folder has one writer and one run's records.
"""

from __future__ import annotations

import json
import shutil
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from evalgate.cli import main
from evalgate.engines import llamacpp, sglang, vllm
from evalgate.engines.attach import require_two_instances
from evalgate.engines.fake import FakeEngine
from evalgate.errors import ConfigError
from evalgate.store.records import RecordStore
from tests.helpers.background import background_apps
from tests.helpers.guards import EXAMPLE, Capture, N, compare, exam
from tests.helpers.hostile_server import Hostile, hostile_app

__all__ = ["exam"]  # fixtures


# -- exit 1 is BLOCK only; values are checked before any server starts -----------------------------
def test_an_unexpected_exception_is_exit_3_with_its_traceback_saved(
    exam: Path, tmp_path: Path, use: Any, capsys: Capture
) -> None:
    def broken(arm: str, prompt: str) -> str:
        raise ZeroDivisionError("a bug deep in a scorer")

    use(FakeEngine(broken))
    out = tmp_path / "run"
    assert compare(out, exam) == 3
    err = capsys.readouterr().err
    assert "error: unexpected ZeroDivisionError: a bug deep in a scorer" in err and "fix:" in err
    assert "Traceback (most recent call last)" not in err  # saved, not dumped
    (saved,) = (out / "logs").glob("traceback-*.txt")
    assert f"traceback: {saved}" in err and "ZeroDivisionError" in saved.read_text()


def test_bad_paths_and_files_exit_2(exam: Path, tmp_path: Path, use: Any, capsys: Capture) -> None:
    engine = use(FakeEngine())
    assert compare(tmp_path / "run", exam, "--config", str(tmp_path)) == 2
    assert "is not a file" in capsys.readouterr().err
    (tmp_path / "file").write_text("x")
    assert compare(tmp_path / "file", exam) == 2
    assert "--out" in capsys.readouterr().err
    cfg = tmp_path / "cfg" / "evalgate.toml"
    cfg.parent.mkdir()
    cfg.write_bytes(b"[client]\ntries = 2\n# na\xefve\n")
    assert compare(tmp_path / "run", exam, "--config", str(cfg)) == 2
    assert "evalgate.toml:3: not UTF-8 text" in capsys.readouterr().err
    cfg.write_text("[client]\ntimeout_s = 0\n")
    assert compare(tmp_path / "run", exam, "--config", str(cfg)) == 2
    assert "client.timeout_s" in capsys.readouterr().err
    with open(exam / "items.jsonl", "ab") as f:
        f.write(b'{"id": "bad", "prompt": "caf\xe9", "answer": "x", "grader": "exact"}\n')
    assert compare(tmp_path / "run", exam) == 2
    assert f"items.jsonl:{N + 1}: is not UTF-8 text" in capsys.readouterr().err
    assert engine.launched == []


# -- same server, no pair ------------------------------------------------------------------------
def test_one_server_on_both_arms_is_refused(tmp_path: Path, capsys: Capture) -> None:
    urls = ["--baseline-url", "http://LOCALHOST:9/", "--candidate-url", "http://127.0.0.1:9/v1"]
    assert main(["compare", "--suites", "arc_easy", "--out", str(tmp_path / "r"), *urls]) == 2
    err = capsys.readouterr().err
    assert "are the same server" in err and "--same-server-ok" in err
    assert (
        main(["compare", "--suites", "arc_easy", "--out", str(tmp_path / "r"), *urls, "--same-server-ok"])
        == 3
    )
    assert "cannot connect" in capsys.readouterr().err  # allowed: on to the (absent) server


def test_one_server_behind_two_urls_is_refused_by_its_instance(tmp_path: Path, capsys: Capture) -> None:
    """A proxy's port in front of the baseline's llama-server: the URLs differ, the random media
    marker llama-server draws at start (its /props) does not."""
    apps = background_apps()
    serve = next(apps)
    try:
        one = f"<__media_{'Q81AHLRQ7fzwfNK0vT8mQ5mkKCWUDkhS'}__>"
        urls = [serve(hostile_app(Hostile(answer="yes", marker=m))) for m in (one, one, one[::-1])]
        suite = _exam(tmp_path / "exam")
        argv = [
            "compare",
            "--baseline",
            "bf16",
            "--candidate",
            "fp8kv",
            "--skip-kernel-check",
            "--suites",
            suite,
        ]
        same = ["--baseline-url", urls[0], "--candidate-url", urls[1]]
        assert main([*argv, *same, "--out", str(tmp_path / "r1")]) == 2
        err = capsys.readouterr().err
        assert f"--baseline-url {urls[0]} and --candidate-url {urls[1]} reach one llamacpp server" in err
        assert "--same-server-ok" in err and not (tmp_path / "r1" / "items").exists()
        assert main([*argv, *same, "--out", str(tmp_path / "r2"), "--same-server-ok"]) == 0  # an A/A check
        other = ["--baseline-url", urls[0], "--candidate-url", urls[2]]
        assert main([*argv, *other, "--out", str(tmp_path / "r3")]) == 0  # two servers
        marker = json.loads((tmp_path / "r3" / "manifest.json").read_text())
        assert one not in json.dumps(marker)  # recorded as a digest, never the marker itself
    finally:
        apps.close()


def test_which_engines_report_an_instance() -> None:
    props = {"total_slots": 1, "default_generation_settings": {"n_ctx": 512}}
    fp = llamacpp.DIALECT.fingerprint(
        {**props, "media_marker": "<__media_ymt4EvWajNYqWhsMy1TMXphTs8W3kVk6__>"}, []
    )
    assert llamacpp.DIALECT.instance(fp) and len(fp["instance_sha256"]) == 16
    for legacy in ("<__media__>", None):  # older builds, or LLAMA_MEDIA_MARKER pinned to the default
        assert (
            llamacpp.DIALECT.instance(llamacpp.DIALECT.fingerprint({**props, "media_marker": legacy}, []))
            is None
        )
    args = {"model_path": "m", "port": 30000, "random_seed": 81234567}
    a = sglang.DIALECT.fingerprint({**args, "version": "0.5.23"}, [])
    b = sglang.DIALECT.fingerprint({**args, "random_seed": 7, "version": "0.5.23"}, [])
    assert sglang.DIALECT.instance(a) == sglang.DIALECT.instance(dict(a)) != sglang.DIALECT.instance(b)
    assert vllm.DIALECT.instance(vllm.DIALECT.fingerprint({"version": "0.11"}, [{"root": "m"}])) is None
    with pytest.raises(ConfigError, match="reach one sglang server"):
        require_two_instances(
            {**a, "url": "http://h:1", "protocol": "sglang"}, {**a, "url": "http://h:2", "protocol": "sglang"}
        )
    require_two_instances(
        {**a, "url": "http://h:1", "protocol": "sglang"}, {**b, "url": "http://h:2", "protocol": "sglang"}
    )


def _exam(folder: Path) -> str:
    folder.mkdir()
    rows = [
        {"id": f"q{i}", "prompt": f"Is {i} a number?", "answer": "yes", "grader": "exact"} for i in range(6)
    ]
    (folder / "items.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return f"private:{folder}"


def test_url_credentials_never_reach_the_terminal(tmp_path: Path, capsys: Capture) -> None:
    urls = [
        "--baseline-url",
        "http://ann:hunter2@127.0.0.1:9",
        "--candidate-url",
        "http://ann:hunter2@127.0.0.1:10",
    ]
    assert main(["compare", "--suites", "arc_easy", "--out", str(tmp_path / "r"), *urls]) == 3
    captured = capsys.readouterr()
    assert "hunter2" not in captured.err + captured.out and "***@127.0.0.1" in captured.err


def test_url_credentials_are_not_recorded_and_a_resume_takes_them_again(tmp_path: Path) -> None:
    from evalgate.cli.compare import request_from_args
    from evalgate.errors import ConfigError
    from evalgate.store.manifest import load_manifest, write_manifest

    run = tmp_path / "run"
    m = load_manifest(EXAMPLE)
    urls = {"baseline_url": ("http://ann:hunter2@10.0.0.1:8000",), "candidate_url": ("http://10.0.0.2:8000",)}
    write_manifest(run, m.model_copy(update={"request": m.request.model_copy(update=urls)}))
    text = (run / "manifest.json").read_text()
    assert "hunter2" not in text and "http://***@10.0.0.1:8000" in text

    def resume(*flags: str) -> Any:
        return request_from_args(_compare_parser().parse_args(["--resume", str(run), *flags]))

    with pytest.raises(ConfigError, match="held credentials, which are not recorded"):
        resume()
    req = resume("--baseline-url", urls["baseline_url"][0], "--deadline", "60")
    assert req.baseline_url == urls["baseline_url"] and req.deadline_s == 60
    with pytest.raises(ConfigError) as err:
        resume("--baseline-url", "http://ann:other@10.0.0.9:8000")
    assert (
        "--baseline-url http://***@10.0.0.9:8000 (the run used http://***@10.0.0.1:8000)" in err.value.cause
    )


def _compare_parser() -> Any:
    from evalgate.cli import build_parser

    sub = next(a for a in build_parser()._actions if a.dest == "command")
    return sub.choices["compare"]  # type: ignore[attr-defined]


# -- one run, one folder, one writer -------------------------------------------------------------
def test_records_of_another_run_are_refused(exam: Path, tmp_path: Path, use: Any, capsys: Capture) -> None:
    use(FakeEngine())
    first, second = tmp_path / "first", tmp_path / "second"
    assert compare(first, exam) == 0
    shutil.copytree(first / "items", second / "items")  # no manifest: a stray items/ folder
    engine = use(FakeEngine())
    assert compare(second, exam) == 2
    assert "items/ of another run but no manifest.json" in capsys.readouterr().err
    assert engine.calls == []
    shutil.rmtree(second)
    assert compare(second, exam, "--limit", str(N)) == 0
    theirs = RecordStore(first).path("private:exam", "candidate")
    shutil.copy(theirs, RecordStore(second).path("private:exam", "candidate"))  # another run's records
    assert main(["compare", "--resume", str(second)]) == 2
    assert "holds records of run" in capsys.readouterr().err


def test_old_records_without_a_run_id_still_render(tmp_path: Path) -> None:
    run = tmp_path / "example"
    shutil.copytree(EXAMPLE, run)
    for path in (run / "items").glob("*.jsonl"):
        rows = [json.loads(line) for line in path.read_text().splitlines()]
        path.write_text(
            "".join(json.dumps({k: v for k, v in r.items() if k != "run_id"}) + "\n" for r in rows)
        )
    expected = json.loads((EXAMPLE / "verdict.json").read_text())["verdict"]
    assert main(["report", str(run)]) == {"PASS": 0, "BLOCK": 1}[expected]


def test_a_second_resume_of_one_run_fails_at_once(
    exam: Path, tmp_path: Path, use: Any, capsys: Capture
) -> None:
    out = tmp_path / "run"
    stop = {"after": 5}

    def killed(arm: str, prompt: str) -> str:
        if arm == "candidate" and stop["after"] is not None:
            stop["after"] -= 1
            if stop["after"] < 0:
                raise KeyboardInterrupt
        return "yes"

    use(FakeEngine(killed))
    assert compare(out, exam) == 3  # the candidate has 5 of N records
    stop["after"] = None
    inside, second_done = threading.Event(), threading.Event()

    def held(arm: str, prompt: str) -> str:  # the first resume waits inside its run for the second
        inside.set()
        second_done.wait(10)
        return "yes"

    engine = use(FakeEngine(held))
    codes: list[int] = []
    resume = ["compare", "--resume", str(out), "--tries", "3"]  # how long to wait may change on resume
    first = threading.Thread(target=lambda: codes.append(main(resume)))
    first.start()
    assert inside.wait(10)
    t0 = time.monotonic()
    assert main(["compare", "--resume", str(out)]) == 2
    assert time.monotonic() - t0 < 5
    second_done.set()
    first.join(30)
    assert codes == [0]
    assert "in use by pid" in capsys.readouterr().err
    lines = RecordStore(out).path("private:exam", "candidate").read_text().splitlines()
    ids = [json.loads(line)["item_id"] for line in lines]
    assert len(ids) == len(set(ids)) == N  # every item once: nothing sent or recorded twice
    assert sum(1 for c in engine.calls if c.kind == "chat") == N - 5


def test_a_backtracking_regex_answer_is_an_exam_error(
    exam: Path, tmp_path: Path, use: Any, capsys: Capture
) -> None:
    with open(exam / "items.jsonl", "a") as f:
        f.write(json.dumps({"id": "slow", "prompt": "say a", "answer": "(a+)+$", "grader": "regex"}) + "\n")
    use(FakeEngine(lambda arm, prompt: "a" * 5000 + "!" if prompt == "say a" else "yes"))
    t0 = time.monotonic()
    assert compare(tmp_path / "run", exam) == 2
    assert time.monotonic() - t0 < 6
    err = capsys.readouterr().err
    assert "private exam item 'slow'" in err and "more than 1 s" in err
