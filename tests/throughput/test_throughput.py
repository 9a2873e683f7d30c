"""The load sweep against a scripted streaming stub on 127.0.0.1 (on llama-server: tests/e2e/test_e2e_bench.py).

The stub (tests/helpers/throughput_stub.py) records what it was sent and how many requests it held at once,
so the tests can check the generator's bounds (count, time, concurrency, targets) and its
capacity-limit rows.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import html5lib
import pytest

from evalgate.cli import main
from evalgate.engines.sglang import bench_serving_command, parse_bench_serving, run_levels
from evalgate.errors import ConfigError, InfraError
from evalgate.report import render_run
from evalgate.store.manifest import ArmInfo, load_manifest, write_manifest
from evalgate.throughput import (
    BenchSettings,
    Target,
    capped_levels,
    check_target,
    finish_compare,
    run_sweep,
    throughput_doc,
    write_throughput,
)
from tests.helpers.runs import SynthSuite, build_run
from tests.helpers.throughput_stub import Script, Stub, stub_servers

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "capacity"


@pytest.fixture
def serve() -> Iterator[Callable[..., Stub]]:
    yield from stub_servers()


def fast(**kw: Any) -> BenchSettings:
    base: dict[str, Any] = {"levels": (1, 2, 4), "input_len": 12, "output_len": 5, "requests_per_level": 6}
    return BenchSettings(**{**base, **kw})


def test_sweep_measures_each_level_with_fixed_lengths(serve: Any) -> None:
    stub = serve(Script(ttft_s=0.05, itl_s=0.01))
    result = run_sweep(Target("baseline", stub.url, "key-1"), fast())
    assert result["levels_run"] == [1, 2, 4] and result["limit"] is None and result["model"] == "stub-model"
    assert [r["status"] for r in result["levels"]] == ["ok", "ok", "ok"]
    for row in result["levels"]:
        assert row["ok"] == row["requests"] == 6 and row["output_tokens"] == 30
        assert row["output_tok_s"] > 0 and row["request_s"] > 0
        assert 50 <= row["ttft_p50_ms"] < 1000 and row["ttft_p50_ms"] <= row["ttft_p99_ms"]
        assert 8 <= row["itl_p50_ms"] < 500
    sent = stub.completions()
    assert len(sent) == 1 + 18  # the warm-up, then 6 per level
    assert all(s["auth"] == "Bearer key-1" and s["peer"] == "127.0.0.1" for s in sent)
    bodies = [s["body"] for s in sent[1:]]
    assert all(
        b["stream"] and b["ignore_eos"] and b["temperature"] == 0.0 and b["max_tokens"] == 5 for b in bodies
    )
    assert all(b["model"] == "stub-model" and len(b["prompt"]) == 12 for b in bodies)
    prompts = [tuple(b["prompt"]) for b in bodies] + [tuple(sent[0]["body"]["prompt"])]
    assert len(set(prompts)) == len(prompts)  # nothing repeats across levels: no prefix-cache hits

    def shared(a: tuple[int, ...], b: tuple[int, ...]) -> int:
        return next((i for i, (x, y) in enumerate(zip(a, b, strict=True)) if x != y), len(a))

    assert max(shared(a, b) for i, a in enumerate(prompts) for b in prompts[i + 1 :]) <= 4
    assert stub.max_active <= 4


def test_levels_are_capped_at_the_servers_slots(serve: Any) -> None:
    stub = serve(Script(slots=2))
    result = run_sweep(Target("b", stub.url), fast(levels=(1, 4, 8, 16)))
    assert result["slots"] == 2 and result["levels_run"] == [1, 2]
    assert stub.max_active <= 2
    assert capped_levels([1, 4, 8, 64], 4) == [1, 4] and capped_levels([8, 1], None) == [1, 8]


def test_rejections_are_the_capacity_limit_and_stop_the_sweep(serve: Any) -> None:
    stub = serve(Script(slots=None, reject_above=2))
    result = run_sweep(Target("b", stub.url), fast(levels=(1, 2, 4, 8)))
    rows = {r["concurrency"]: r for r in result["levels"]}
    assert rows[1]["status"] == rows[2]["status"] == "ok"
    assert rows[4]["status"] == "limit" and rows[4]["rejected"] > 0 and "rejected" in rows[4]["reason"]
    assert rows[8]["status"] == "skipped" and result["limit"] == 4
    assert max(r["body"]["max_tokens"] for r in stub.completions()) == 5


def test_queueing_beyond_the_timeout_is_the_capacity_limit(serve: Any) -> None:
    stub = serve(Script(slots=None, queue_above=1))
    t0 = time.monotonic()
    result = run_sweep(Target("b", stub.url), fast(levels=(1, 2), requests_per_level=3, queue_timeout_s=0.3))
    rows = {r["concurrency"]: r for r in result["levels"]}
    assert rows[1]["status"] == "ok" and rows[2]["status"] == "limit" and rows[2]["queued"] >= 1
    assert result["limit"] == 2 and time.monotonic() - t0 < 10


def test_each_level_is_bounded_in_time_and_the_server_is_released(serve: Any) -> None:
    stub = serve(Script(itl_s=0.05))
    t0 = time.monotonic()
    result = run_sweep(Target("b", stub.url), fast(levels=(2,), output_len=200, max_seconds_per_level=0.6))
    elapsed = time.monotonic() - t0
    row = result["levels"][0]
    assert row["status"] == "limit" and row["cut"] == 2 and row["ok"] == 0 and "0.6 s" in row["reason"]
    assert row["output_tokens"] > 0 and row["duration_s"] < 1.5 and elapsed < 5
    deadline = time.monotonic() + 3
    while stub.active and time.monotonic() < deadline:
        time.sleep(0.02)
    assert stub.active == 0 and stub.disconnects >= 2  # the cut streams were closed, not left running


def test_each_level_is_bounded_in_count(serve: Any) -> None:
    stub = serve()
    result = run_sweep(
        Target("b", stub.url), fast(levels=(1, 2), requests_per_level=50, max_requests_per_level=3)
    )
    assert [r["requests"] for r in result["levels"]] == [3, 3]
    assert len(stub.completions()) == 1 + 6
    assert BenchSettings().requests_for(1) == 8 and BenchSettings().requests_for(64) == 256


def test_tokens_counted_from_the_stream_when_usage_is_absent(serve: Any) -> None:
    stub = serve(Script(usage=False))
    result = run_sweep(Target("b", stub.url), fast(levels=(1,)))
    assert result["levels"][0]["output_tokens"] == 30


def test_redirects_are_not_followed(serve: Any) -> None:
    stub = serve(Script(redirect=True))
    with pytest.raises(InfraError, match="warm-up"):
        run_sweep(Target("b", stub.url), fast(levels=(1,)))


@pytest.mark.parametrize(
    ("url", "explicit", "ok"),
    [
        ("http://127.0.0.1:8000", False, True),
        ("http://127.0.0.2:8000", False, True),
        ("http://localhost:1", False, True),
        ("http://[::1]:8000", False, True),
        ("http://10.0.0.5:8000", False, False),
        ("http://example.com", False, False),
        ("http://10.0.0.5:8000", True, True),
        ("file:///etc/passwd", True, False),
        ("ftp://127.0.0.1/", False, False),
    ],
)
def test_targets_are_loopback_unless_given(url: str, explicit: bool, ok: bool) -> None:
    target = Target("b", url, explicit=explicit)
    if ok:
        check_target(target)
    else:
        with pytest.raises(ConfigError):
            check_target(target)


def test_unreachable_server_is_an_infra_error() -> None:
    with pytest.raises(InfraError, match="did not answer"):
        run_sweep(Target("b", "http://127.0.0.1:9"), fast())


def _arm(levels: list[tuple[int, float | None, str]], **extra: Any) -> dict[str, Any]:
    return {"levels": [{"concurrency": c, "output_tok_s": v, "status": s} for c, v, s in levels], **extra}


def test_doc_ratio_per_level_and_capacity(tmp_path: Path) -> None:
    base = _arm(
        [(1, 100.0, "ok"), (4, 200.0, "ok"), (8, None, "limit")], capacity={"kv_tokens": 100, "kv_mib": 10}
    )
    cand = _arm(
        [(1, 150.0, "ok"), (4, 300.0, "ok"), (8, 320.0, "ok")], capacity={"kv_tokens": 100, "kv_mib": 5}
    )
    doc = throughput_doc({"baseline": base, "candidate": cand}, fast())
    assert [lv["ratio"] for lv in doc["levels"]] == [1.5, 1.5, None]
    assert doc["levels"][2]["baseline_status"] == "limit"
    assert doc["capacity"]["ratio"] == 2.0 and "per MiB" in doc["capacity"]["basis"]
    path = write_throughput(tmp_path / "out", doc)
    assert json.loads(path.read_text())["schema"] == 1


def test_finish_compare_moves_sweeps_into_the_manifest(tmp_path: Path) -> None:
    run_dir = build_run(tmp_path / "run", [SynthSuite("arc_easy", (4, 0, 0, 4))])
    manifest = load_manifest(run_dir)
    manifest.arms["baseline"].throughput = _arm([(1, 10.0, "ok")])
    manifest.arms["aa"] = ArmInfo()
    finish_compare(run_dir, manifest)
    assert manifest.arms["baseline"].throughput is None
    manifest.arms["candidate"].throughput = _arm([(1, 20.0, "ok")])  # a resumed run adds the other arm
    doc = finish_compare(run_dir, manifest)
    assert manifest.throughput == doc
    assert doc["levels"][0]["ratio"] == 2.0 and list(doc["arms"]) == ["baseline", "candidate"]
    assert json.loads((run_dir / "throughput.json").read_text())["levels"][0]["ratio"] == 2.0
    write_manifest(run_dir, manifest)
    assert load_manifest(run_dir).throughput == manifest.throughput  # the document as it was written


def test_cli_attaches_to_given_urls_prints_ratio_and_writes_json(
    serve: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    slow, quick = serve(Script(itl_s=0.03)), serve(Script(itl_s=0.003))
    monkeypatch.setenv("EVALGATE_API_KEY", "secret-key")
    out = tmp_path / "bench"
    argv = ["bench", "--baseline-url", slow.url, "--candidate-url", quick.url, "--levels", "1,2"]
    code = main(
        [*argv, "--input-len", "8", "--output-len", "10", "--requests-per-level", "4", "--out", str(out)]
    )
    assert code == 0
    printed = capsys.readouterr().out
    assert "output tok/s by concurrency" in printed and "throughput.json" in printed
    doc = json.loads((out / "throughput.json").read_text())
    assert [lv["concurrency"] for lv in doc["levels"]] == [1, 2]
    for lv in doc["levels"]:  # the ratio is candidate over baseline tok/s, whatever the machine's noise
        assert lv["ratio"] == pytest.approx(lv["candidate_tok_s"] / lv["baseline_tok_s"], rel=2e-3)
        assert (
            lv["ratio"] > 1.0
        )  # a stub that streams 10x faster (not a timing claim: speed lives in benchmarks/)
    assert f"{doc['levels'][0]['ratio']:.2f}x" in printed
    assert doc["engine"] == "external" and "secret-key" not in json.dumps(doc)
    assert slow.completions()[0]["auth"] == "Bearer secret-key"


@pytest.mark.parametrize(
    "extra",
    [
        ["--baseline-url", "http://127.0.0.1:1"],
        ["--levels", "1,x"],
        ["--levels", "0"],
        ["--output-len", "0"],
        ["--baseline-url", "ftp://h/", "--candidate-url", "http://127.0.0.1:1"],
    ],
)
def test_cli_usage_errors_exit_2(extra: list[str], tmp_path: Path) -> None:
    assert main(["bench", *extra, "--out", str(tmp_path / "o")]) == 2


def test_report_renders_throughput_table_chart_and_capacity(tmp_path: Path) -> None:
    cap_b = {"kv_tokens": 16384, "kv_mib": 360.0, "kv_types": "K f16, V f16", "source": "llama-server log"}
    cap_c = {"kv_tokens": 16384, "kv_mib": 191.25, "kv_types": "K q8_0, V q8_0", "source": "llama-server log"}
    base = _arm(
        [(1, 100.0, "ok"), (2, 150.0, "ok"), (4, None, "limit")], capacity=cap_b, variant="bf16", limit=4
    )
    cand = _arm(
        [(1, 120.0, "ok"), (2, 210.0, "ok"), (4, 260.0, "ok")], capacity=cap_c, variant="<b>fp8kv</b>"
    )
    doc = throughput_doc({"baseline": base, "candidate": cand}, fast())
    run_dir = build_run(tmp_path / "run", [SynthSuite("arc_easy", (40, 1, 1, 8))], extra={"throughput": doc})
    render_run(run_dir)
    page = (run_dir / "report.html").read_text(encoding="utf-8")
    html5lib.HTMLParser(strict=True, namespaceHTMLElements=False).parse(page)
    assert '<h2 id="throughput">Throughput</h2>' in page and '<h2 id="kv-capacity">KV capacity</h2>' in page
    assert '<svg xmlns="http://www.w3.org/2000/svg" class="throughput"' in page and "<polyline" in page
    assert "1.20\u2060×" in page and "1.40\u2060×" in page  # per level
    assert "1.88\u2060×" in page and "× capacity limit" in page  # KV tokens per MiB; the limit marker
    assert "limit" in page and "<b>fp8kv</b>" not in page and "&lt;b&gt;fp8kv" in page


def test_sglang_bench_serving_jsonl_parses_into_level_rows() -> None:
    text = (FIXTURES / "sglang_bench_serving.jsonl").read_text()
    rows = parse_bench_serving(text, planned={1: 64, 8: 64})
    assert [r["concurrency"] for r in rows] == [1, 8]
    assert rows[0]["status"] == "ok" and rows[0]["output_tok_s"] == 97.83 and rows[0]["ttft_p50_ms"] == 18.92
    assert rows[1]["status"] == "errors" and rows[1]["errors"] == 2 and rows[1]["itl_p99_ms"] == 9.84
    cmd = bench_serving_command(
        "http://127.0.0.1:30000", concurrency=8, num_prompts=64, input_len=128, output_len=64,
        output_file=Path("o.jsonl"), model="m",
    )  # fmt: skip
    flat = " ".join(cmd)
    assert "-m sglang.bench_serving --backend sglang --base-url http://127.0.0.1:30000" in flat
    assert "--dataset-name random-ids" in flat and "--max-concurrency 8 --request-rate inf" in flat
    assert "--random-range-ratio 1.0" in flat and "--num-prompts 64" in flat


def test_sglang_generator_runs_bench_serving_per_level(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake = tmp_path / "fake" / "sglang"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text("")
    line = (FIXTURES / "sglang_bench_serving.jsonl").read_text().splitlines()[0]
    (fake / "bench_serving.py").write_text(
        "import json, os, sys\n"
        "a = sys.argv\n"
        "row = json.loads(" + repr(line) + ")\n"
        "row['max_concurrency'] = int(a[a.index('--max-concurrency') + 1])\n"
        "row['completed'] = int(a[a.index('--num-prompts') + 1])\n"
        "row['key'] = os.environ.get('OPENAI_API_KEY')\n"
        "open(a[a.index('--output-file') + 1], 'a').write(json.dumps(row) + '\\n')\n"
    )
    monkeypatch.syspath_prepend(str(fake.parent))
    monkeypatch.setenv("PYTHONPATH", str(fake.parent))
    rows = run_levels(Target("b", "http://127.0.0.1:1", "k"), fast(generator="sglang"), [1, 2], "m")
    assert [(r["concurrency"], r["status"], r["ok"]) for r in rows] == [(1, "ok", 6), (2, "ok", 6)]
