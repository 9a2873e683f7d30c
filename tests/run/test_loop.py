"""`evalgate compare` end to end on the fake engine (evalgate.engines.fake): every path of the one
loop in seconds, with a private exam as the suite and the fake servers' answers scripted per arm.

Resume after a kill, errors counted as wrong, --aa, a --sequential stop, a kernel-check BLOCK,
arms on their own devices, and an arm sharded over several servers. The real engines are proven
by the e2e tests; these pin what the loop does with whatever an engine answers.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from evalgate.cli import main
from evalgate.engines.fake import FakeEngine
from evalgate.store.records import RecordStore
from tests.helpers.exams import yes_exam
from tests.helpers.guards import compare

N = 40
Script = Callable[[str, str], "str | None"]


@pytest.fixture
def exam(tmp_path: Path) -> Path:
    """N items q0..q(N-1); the right answer to each is "yes"."""
    return yes_exam(tmp_path / "exam", N)


def resume(out: Path) -> int:
    return main(["compare", "--resume", str(out)])


def verdict(out: Path) -> dict[str, Any]:
    return dict(json.loads((out / "verdict.json").read_text()))


def records(out: Path, arm: str) -> dict[str, Any]:
    return {r.item_id: r for r in RecordStore(out).load("private:exam", arm).values()}


def asked(engine: FakeEngine, arm: str) -> Counter[str]:
    """How often each item was asked of ``arm``'s servers (the preflight's probes left out)."""
    return Counter(c.prompt for c in engine.calls if c.arm == arm and c.kind == "chat")


def yes_except(wrong: dict[str, set[int]]) -> Script:
    """Every arm answers "yes" (right), except the items ``wrong[arm]`` lists, answered "no"."""
    return lambda arm, prompt: "no" if int(prompt[1:]) in wrong.get(arm, set()) else "yes"


def test_a_killed_run_resumes_where_it_stopped(exam: Path, tmp_path: Path, use: Any) -> None:
    kill = {"after": 15}
    answered: Counter[str] = Counter()

    def answer(arm: str, prompt: str) -> str:
        if arm == "candidate" and kill["after"] is not None and answered[arm] >= kill["after"]:
            raise KeyboardInterrupt  # Ctrl-C, or SIGTERM from CI, in the middle of the candidate
        answered[arm] += 1
        return "yes"

    engine = use(FakeEngine(answer))
    out = tmp_path / "run"
    assert compare(out, exam) == 3  # interrupted: infrastructure, records kept
    assert engine.launched == [["baseline"], ["candidate"]]
    assert len(records(out, "baseline")) == N and len(records(out, "candidate")) == 15
    kept = set(records(out, "candidate"))
    with open(RecordStore(out).path("private:exam", "candidate"), "a") as f:
        f.write('{"schema": 1, "item_id": "q39", "arm": "cand')  # the kill tore the last line
    first = asked(engine, "candidate")

    kill["after"] = None
    engine.launched.clear()
    assert resume(out) == 0
    assert engine.launched == [["candidate"]]  # the baseline is complete: it does not launch again
    assert len(records(out, "candidate")) == N and not any(
        r.error for r in records(out, "candidate").values()
    )
    again = asked(engine, "candidate") - first  # what the resumed run asked
    assert sorted(again) == sorted(f"q{i}" for i in range(N) if f"q{i}" not in kept)
    assert set(again.values()) == {1}  # each missing item once; no recorded item again
    assert verdict(out)["verdict"] == "PASS"


def test_failed_items_stop_the_verdict_unless_they_count_as_wrong(
    exam: Path, tmp_path: Path, use: Any
) -> None:
    broken = {3, 8, 13, 17, 21, 25, 29, 33, 36, 39}

    def answer(arm: str, prompt: str) -> str | None:
        return None if arm == "candidate" and int(prompt[1:]) in broken else "yes"

    use(FakeEngine(answer))
    assert compare(tmp_path / "strict", exam) == 3  # 10 items failed after retries: no verdict on gaps
    assert sum(1 for r in records(tmp_path / "strict", "candidate").values() if r.error) == len(broken)

    use(FakeEngine(answer))
    assert compare(tmp_path / "wrong", exam, "--errors-as-wrong") == 1  # 10 regressions: BLOCK
    v = verdict(tmp_path / "wrong")
    row = v["suites"][0]
    assert v["verdict"] == "BLOCK" and (row["n"], row["n10"], row["n01"]) == (N, len(broken), 0)


def test_aa_runs_the_baseline_twice_and_sets_the_flip_budget(exam: Path, tmp_path: Path, use: Any) -> None:
    engine = use(FakeEngine(yes_except({"candidate": {5}})))
    out = tmp_path / "run"
    assert compare(out, exam, "--aa") == 0
    assert engine.launched == [["baseline"], ["candidate"], ["aa"]]  # one server at a time
    assert asked(engine, "aa") == asked(engine, "baseline") == Counter(f"q{i}" for i in range(N))
    v = verdict(out)
    assert v["reliable"] and v["aa"] and v["aa"][0]["flips"] == 0.0
    assert "A/A" in json.dumps(v["agreement"])  # the budget is the A/A flip rate plus the margin


def test_sequential_stops_at_the_first_look_that_decides(exam: Path, tmp_path: Path, use: Any) -> None:
    engine = use(FakeEngine(yes_except({"candidate": set(range(N))})))
    out = tmp_path / "run"
    assert compare(out, exam, "--sequential", "--chunk", "10") == 1
    assert engine.launched == [["baseline", "candidate"]]  # a sequential run keeps both arms up
    assert sum(asked(engine, "baseline").values()) == sum(asked(engine, "candidate").values()) == 10
    assert verdict(out)["verdict"] == "BLOCK"
    engine.launched.clear()
    assert resume(out) == 1 and engine.launched == []  # decided: a resume launches nothing


def test_a_failed_kernel_check_blocks_before_any_server_starts(
    exam: Path, tmp_path: Path, use: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    failed = {
        "kernels": ["fp8_kv"],
        "passed": False,
        "rows": [{"name": "fp8_kv", "impl": "triton", "passed": False}],
    }
    monkeypatch.setattr("evalgate.cli.compare.kernel_check_for", lambda candidate, skip=False: failed)
    engine = use(FakeEngine())
    out = tmp_path / "run"
    assert compare(out, exam) == 1
    assert engine.launched == [] and engine.calls == []
    v = verdict(out)
    assert v["verdict"] == "BLOCK" and "kernels failed the numerics check" in v["reason"]


def test_arms_on_their_own_devices_run_together(exam: Path, tmp_path: Path, use: Any) -> None:
    engine = use(FakeEngine(concurrent=True))
    out = tmp_path / "run"
    assert compare(out, exam) == 0
    assert engine.launched == [["baseline", "candidate"]]
    assert len(records(out, "baseline")) == len(records(out, "candidate")) == N


def test_an_arm_sharded_over_servers_asks_each_item_of_one(exam: Path, tmp_path: Path, use: Any) -> None:
    engine = use(FakeEngine(urls=3))
    out = tmp_path / "run"
    assert compare(out, exam) == 0
    where = {
        arm: {c.prompt: c.url.split("/")[1] for c in engine.calls if c.arm == arm and c.kind == "chat"}
        for arm in ("baseline", "candidate")
    }
    per_url = Counter(where["candidate"].values())
    assert len(where["candidate"]) == N and sorted(per_url) == ["0", "1", "2"] and min(per_url.values()) >= 5
    assert where["baseline"] == where["candidate"]  # the same item goes to the same shard on both arms
    assert sum(asked(engine, "candidate").values()) == N  # each item asked once, of one server
    preflight = json.loads((out / "manifest.json").read_text())["arms"]["candidate"]["preflight"]
    assert {c["url"] for c in preflight} == {"candidate/0", "candidate/1", "candidate/2"}  # every URL checked

    path = RecordStore(out).path("private:exam", "candidate")
    path.write_text("".join(path.read_text().splitlines(keepends=True)[:10]))  # lose 30 records
    engine.calls.clear()
    assert resume(out) == 0
    redone = {c.prompt: c.url.split("/")[1] for c in engine.calls if c.kind == "chat"}
    assert len(redone) == N - 10 and all(where["candidate"][p] == u for p, u in redone.items())  # sticky
