"""The one compare loop, full and --sequential, on the fake engine (evalgate.engines.fake) with a
suite double: which arms launch, which items run, what the manifest records, and that a resumed
run redoes nothing. tests/run/test_loop.py drives the same loop through `evalgate compare`.

Items are scored from a table (arm, item index) -> right or wrong; the fake servers answer the
preflight probes like working ones. They never stand in for a real server end to end
(tests/e2e/test_e2e.py does that); they pin the loop's bookkeeping.
"""

from __future__ import annotations

import io
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from rich.console import Console

from evalgate.engines import Scorer
from evalgate.engines.api import Generation
from evalgate.engines.client import RequestFailed
from evalgate.engines.fake import FakeEngine as _FakeEngine
from evalgate.errors import PreflightError
from evalgate.gate import sequential_rule
from evalgate.run.loop import run_arms
from evalgate.run.plan import CompareRequest, RunPlan
from evalgate.stats.sequential import SequentialOutcome, outcomes, shuffled
from evalgate.store.manifest import Manifest, SequentialInfo, SuiteInfo, VariantInfo, load_manifest
from evalgate.store.records import RecordStore, errors_as_wrong, pair_records
from evalgate.suites import Item, ItemResult, SuiteOptions

Outcome = Callable[[str, int], "int | None"]
"""(arm, item index) -> 1 right, 0 wrong, None: the request fails after retries."""


def FakeEngine(outcome: Outcome, *, concurrent_arms: bool = False, odd_tokenizer: str = "") -> _FakeEngine:
    """The fake engine answering item ``qN`` on each arm as ``outcome`` says."""

    def answer(arm: str, prompt: str) -> str | None:
        ok = outcome(arm, int(prompt[1:]))
        return None if ok is None else ("right" if ok else "wrong")

    return _FakeEngine(answer, concurrent=concurrent_arms, odd_tokenizer=odd_tokenizer)


@dataclass
class FakeSuite:
    name: str = "s"
    version: int = 1
    metrics: tuple[str, ...] = ("acc",)
    kind: str = "loglikelihood"
    private: bool = False
    metric_kind: str = "binary"  # a suite's declared facts (suites._base.Suite) that the loop reads

    async def run(self, item: Item, scorer: Scorer, options: SuiteOptions) -> ItemResult:
        out = await scorer.generate(item.item_id, Generation(max_tokens=1))
        return ItemResult(response=None, extracted=None, metrics={"acc": float(out["text"] == "right")})


def _asked(plan: RunPlan) -> list[tuple[str, str]]:
    """(arm, item id) of every item the fake servers were asked, sorted."""
    assert isinstance(plan.engine, _FakeEngine)
    return sorted((c.arm, c.prompt) for c in plan.engine.calls if c.kind == "generate")


def _plan(
    tmp_path: Path, engine: _FakeEngine, *, n: int = 60, chunk: int | None = None, **req: Any
) -> RunPlan:
    suite = FakeSuite()
    items = [Item(f"q{i}", f"h{i}", None, None) for i in range(n)]
    if chunk:
        items = shuffled(items, seed=1234, suite=suite.name)
    request = CompareRequest(
        baseline="bf16", candidate="q4", suites=(suite.name,), sequential=bool(chunk), chunk=chunk,
        agreement_gate=False, **req,
    )  # fmt: skip
    arms = ("baseline", "candidate")
    manifest = Manifest(
        run_id="run-1",
        created_utc="2026-01-01T00:00:00Z",
        command=["evalgate", "compare"],
        engine=engine.name,
        engine_version="0",
        request=request,
        variants={arm: VariantInfo(name=arm) for arm in arms},
        launch={},
        suites={
            suite.name: SuiteInfo(
                version=1, metrics=["acc"], kind=suite.kind, n=n, item_ids=[it.item_id for it in items]
            )
        },
        arm_names=list(arms),
        sequential=SequentialInfo(chunk=chunk) if chunk else None,
    )
    plan = RunPlan(
        request=request,
        run_dir=tmp_path / "run",
        run_id="run-1",
        engine=engine,
        specs=dict.fromkeys(arms),  # type: ignore[arg-type]  # the double launches without a spec
        suites=[suite],  # type: ignore[list-item]
        items={suite.name: items},
        options=SuiteOptions(engine="fake"),
        manifest=manifest,
    )
    plan.save()
    return plan


def _run(plan: RunPlan) -> list[list[str]]:
    """One ``run_arms`` on the plan as a resumed run would read it back; returns the launches."""
    plan.manifest = load_manifest(plan.run_dir)
    plan.engine.launched.clear()
    plan.engine.calls.clear()
    run_arms(plan, Console(file=io.StringIO()))
    return plan.engine.launched


def _rerendered(plan: RunPlan) -> SequentialOutcome:
    """The decision a report re-render reaches from the files alone (as ``evalgate report`` does)."""
    m = load_manifest(plan.run_dir)
    store = RecordStore(plan.run_dir)
    recs = {arm: store.load("s", arm) for arm in ("baseline", "candidate")}
    if m.request.errors_as_wrong:
        recs = {arm: errors_as_wrong(done, ["acc"]) for arm, done in recs.items()}
    pairs = pair_records(recs["baseline"].values(), recs["candidate"].values(), suite="s")
    return outcomes(SimpleNamespace(manifest=m, pairs={"s": pairs}), sequential_rule(m))["s"]


def _decided(plan: RunPlan) -> dict[str, Any]:
    """The suites the manifest records as decided (--sequential)."""
    seq = load_manifest(plan.run_dir).sequential
    assert seq is not None
    return seq.suites


def _ids(plan: RunPlan, arm: str) -> list[str]:
    return sorted(r.item_id for r in RecordStore(plan.run_dir).load("s", arm).values())


def test_full_run_scores_every_item_once_and_a_resume_launches_nothing(tmp_path: Path) -> None:
    plan = _plan(tmp_path, FakeEngine(lambda arm, i: int(i % 3 != 0)))
    assert _run(plan) == [["baseline"], ["candidate"]]  # one server at a time
    assert _asked(plan) == sorted((a, f"q{i}") for a in ("baseline", "candidate") for i in range(60))
    m = load_manifest(plan.run_dir)
    for arm in ("baseline", "candidate"):
        assert len(_ids(plan, arm)) == 60
        info = m.arms[arm]
        assert info.command == ["fake-server", arm] and info.tokenizer_fingerprint
        assert info.preflight and "s" in info.durations_s and info.ended_utc
    assert m.finished_utc and m.sequential is None
    assert _run(plan) == [] and plan.engine.calls == []  # everything is recorded: no server starts


def test_full_run_retries_only_missing_and_failed_items(tmp_path: Path) -> None:
    fails = {("candidate", 5), ("candidate", 7)}
    plan = _plan(tmp_path, FakeEngine(lambda arm, i: None if (arm, i) in fails else 1), n=20)
    assert _run(plan) == [["baseline"], ["candidate"]]
    fails.clear()
    assert _run(plan) == [["candidate"]]  # the baseline is complete: it does not launch
    assert _asked(plan) == [("candidate", "q5"), ("candidate", "q7")]
    assert not any(r.error for r in RecordStore(plan.run_dir).load("s", "candidate").values())


def test_arms_on_their_own_gpus_launch_together(tmp_path: Path) -> None:
    plan = _plan(tmp_path, FakeEngine(lambda arm, i: 1, concurrent_arms=True), n=10)
    assert _run(plan) == [["baseline", "candidate"]]
    assert len(_ids(plan, "baseline")) == len(_ids(plan, "candidate")) == 10


@pytest.mark.parametrize("concurrent", [False, True])
def test_sequential_runs_chunks_until_the_rule_decides(tmp_path: Path, concurrent: bool) -> None:
    plan = _plan(tmp_path, FakeEngine(lambda arm, i: 1, concurrent_arms=concurrent), n=100, chunk=10)
    assert _run(plan) == [["baseline", "candidate"]]  # both up at once, whatever the engine
    m = load_manifest(plan.run_dir)
    assert m.sequential is not None
    seq = m.sequential.suites["s"]
    # nothing flips: futile at the first look past 20 % of the items (see test_sequential)
    assert (seq["decision"], seq["used"], seq["planned"], seq["looks"]) == ("futile", 20, 100, 2)
    first = m.suites["s"].item_ids[:20]
    assert _ids(plan, "baseline") == _ids(plan, "candidate") == sorted(first)
    assert _rerendered(plan).to_dict() == seq  # a re-render reaches the same decision
    assert m.finished_utc and m.arms["candidate"].durations_s["s"] >= 0
    assert _run(plan) == [] and plan.engine.calls == []  # decided: a resume launches nothing


def test_sequential_blocks_a_regression_at_the_first_look(tmp_path: Path) -> None:
    plan = _plan(tmp_path, FakeEngine(lambda arm, i: int(arm == "baseline")), n=100, chunk=10)
    _run(plan)
    seq = _decided(plan)["s"]
    assert (seq["decision"], seq["used"], seq["blocked_by"], seq["regressions"]) == (
        "block",
        10,
        "accuracy",
        10,
    )
    assert len(_ids(plan, "candidate")) == 10


def test_sequential_ends_on_a_failed_item_unless_errors_count_as_wrong(tmp_path: Path) -> None:
    fail = {"on": True}
    engine = FakeEngine(lambda arm, i: None if (fail["on"] and arm == "candidate" and i == first) else 1)
    plan = _plan(tmp_path, engine, n=100, chunk=10)
    first = int(plan.manifest.suites["s"].item_ids[0][1:])  # in the first chunk
    with pytest.raises(RequestFailed, match="1 s item") as err:
        _run(plan)
    assert f"--resume {plan.run_dir}" in err.value.fix
    assert "s" not in _decided(plan)  # undecided
    fail["on"] = False
    _run(plan)  # the resume retries the failed item and goes on
    assert _decided(plan)["s"]["decision"] == "futile"

    fail["on"] = True
    wrong = _plan(tmp_path / "w", engine, n=100, chunk=10, errors_as_wrong=True)
    _run(wrong)  # the failed item counts as a regression, and the run goes on
    seq = _decided(wrong)["s"]
    assert (seq["regressions"], seq["improvements"], seq["decision"]) == (1, 0, "futile")
    assert _rerendered(wrong).to_dict() == seq


def test_arms_that_tokenize_differently_stop_before_the_second_arm_runs(tmp_path: Path) -> None:
    plan = _plan(tmp_path, FakeEngine(lambda arm, i: 1, odd_tokenizer="candidate"), n=10)
    with pytest.raises(PreflightError, match="tokenize differently"):
        _run(plan)
    assert len(_ids(plan, "baseline")) == 10 and _ids(plan, "candidate") == []
