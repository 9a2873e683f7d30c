"""Issue #32: what a hostile matrix still turned into PASS.

- Both arms answering nothing agree on every item: a reference arm (the baseline, or the A/A arm)
  with no answer on more than ``NO_ANSWER_LIMIT`` of a generation suite's records is an ERROR
  (exit 3) naming the arm and the share, in every mode (plain, --repeats, --chat, --aa).
- Values that cannot be a metric: a known metric's value outside its range (``METRIC_RANGES``:
  an lm-eval ``acc`` of 7 or -1, which an import would read as a graded metric) is the suite's
  ERROR naming the metric, the value and the item.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from evalgate.cli import main
from evalgate.engines.fake import FakeEngine
from evalgate.gate import NO_ANSWER_LIMIT, GatePolicy, decide
from evalgate.gate._rows import METRIC_RANGES, metric_range
from evalgate.store.records import Pair, Record

N = 8
Capture = pytest.CaptureFixture[str]
LMEVAL = Path(__file__).resolve().parents[1] / "fixtures" / "lmeval"


def _gsm8k(tmp_path: Path, data_dir: Path, use: Any, engine: FakeEngine, *flags: str) -> tuple[int, dict]:
    use(engine)
    out = tmp_path / "run"
    argv = ["compare", "--engine", "fake", "--baseline", "bf16", "--candidate", "fp8", "--suites", "gsm8k",
            "--limit", str(N), "--data-dir", str(data_dir), "--out", str(out), *flags]  # fmt: skip
    code = main(argv)
    return code, json.loads((out / "verdict.json").read_text())


def _silent(code: int, verdict: dict, arm: str, share: str = "100%") -> None:
    reason = verdict["reason"]
    assert code == 3 and verdict["verdict"] == "ERROR", reason
    assert f"the {arm} gave no answer" in reason and share in reason and "no reference" in reason, reason
    primary = next(r for r in verdict["suites"] if r["primary"])
    assert primary["status"] == "error" and f"the {arm} gave no answer" in primary["reason"]


def nothing(arm: str, prompt: str) -> str:
    return ""


def test_both_arms_answering_nothing_is_an_error(tmp_path: Path, data_dir: Path, use: Any) -> None:
    code, verdict = _gsm8k(tmp_path, data_dir, use, FakeEngine(nothing))
    _silent(code, verdict, "baseline")


def test_both_arms_answering_nothing_is_an_error_with_repeats(
    tmp_path: Path, data_dir: Path, use: Any
) -> None:
    engine = FakeEngine(nothing, sampled=lambda arm, prompt, seed: "")
    code, verdict = _gsm8k(tmp_path, data_dir, use, engine, "--repeats", "2", "--temperature", "0.7")
    _silent(code, verdict, "baseline")


def test_both_arms_answering_nothing_is_an_error_in_chat(tmp_path: Path, data_dir: Path, use: Any) -> None:
    code, verdict = _gsm8k(tmp_path, data_dir, use, FakeEngine(lambda arm, prompt: "  \n"), "--chat")
    _silent(code, verdict, "baseline")


def test_an_aa_arm_that_answers_nothing_is_no_noise_floor(tmp_path: Path, data_dir: Path, use: Any) -> None:
    engine = FakeEngine(lambda arm, prompt: "" if arm == "aa" else "The answer is 7.\n#### 7")
    code, verdict = _gsm8k(tmp_path, data_dir, use, engine, "--aa")
    _silent(code, verdict, "aa")


def test_a_reference_that_answers_most_items_is_still_one(tmp_path: Path, data_dir: Path, use: Any) -> None:
    """Below the limit the baseline is a reference: the gate judges as before (here: the arms
    answer alike, so PASS)."""
    asked: dict[str, int] = {}

    def some(arm: str, prompt: str) -> str:
        i = asked.setdefault(prompt, len(asked))
        return "" if i < int(N * NO_ANSWER_LIMIT) else "The answer is 7.\n#### 7"

    code, verdict = _gsm8k(tmp_path, data_dir, use, FakeEngine(some))
    assert code == 0 and verdict["verdict"] == "PASS", verdict["reason"]
    assert verdict["answers"][0]["baseline"]["no_answer"] == NO_ANSWER_LIMIT


# -- values a metric cannot take ------------------------------------------------------------------


def _pairs(metric: str, base: list[float], cand: list[float]) -> list[Pair]:
    def rec(arm: str, i: int, v: float) -> Record:
        return Record(
            run_id="r", arm=arm, variant=arm, suite="s", suite_version=1, item_id=f"d{i}", repeat=0,
            prompt_hash="h", target=None, response=None, extracted=None, metrics={metric: v},
        )  # fmt: skip

    return [
        Pair(f"d{i}", 0, rec("baseline", i, b), rec("candidate", i, c))
        for i, (b, c) in enumerate(zip(base, cand, strict=True))
    ]


@pytest.mark.parametrize(
    "metric", ["acc", "acc_norm", "exact_match,strict-match", "pass", "string_match_all"]
)
@pytest.mark.parametrize("bad", [7.0, -1.0, 1.5])
def test_a_known_metric_outside_its_range_is_an_error_whatever_the_kind(metric: str, bad: float) -> None:
    values = [1.0, 0.0] * 20
    cand = [*values[:-3], bad, *values[-2:]]
    for kind in ("binary", "continuous"):
        v = decide({"s": ([metric], _pairs(metric, values, cand))}, policy=GatePolicy(), kinds={"s": kind})
        assert v.verdict == "ERROR", (kind, v.reason)
        assert repr(metric) in v.reason and repr(bad) in v.reason and "item d37" in v.reason, v.reason


def test_an_unknown_metric_is_graded_when_finite_and_an_error_when_not() -> None:
    base = [10.0 + i % 7 for i in range(40)]
    v = decide({"s": (["bleu"], _pairs("bleu", base, base))}, policy=GatePolicy(), kinds={"s": "continuous"})
    assert v.verdict == "PASS", v.reason
    inf = [*base[:-1], float("inf")]
    v = decide({"s": (["bleu"], _pairs("bleu", base, inf))}, policy=GatePolicy(), kinds={"s": "continuous"})
    assert v.verdict == "ERROR" and "not finite" in v.reason


def test_the_ranges_cover_every_built_in_suites_metrics() -> None:
    from evalgate.suites import default_registry

    registry = default_registry()
    for name in ("arc_easy", "arc_challenge", "gsm8k", "mmlu", "mmlu_pro", "tool_calls", "long_context"):
        for metric in registry.get(name).metrics:
            assert metric_range(metric) == (0.0, 1.0), (name, metric)
    assert set(METRIC_RANGES) >= {"acc", "acc_norm", "exact_match"}


def _import(tmp_path: Path, change: Any = None) -> tuple[int, Path]:
    """lm-eval's own arc_easy samples (bf16 vs int4), ``change`` applied to both arms' rows."""
    folders = []
    for arm in ("bf16", "int4"):
        dst = tmp_path / arm
        shutil.copytree(LMEVAL / arm, dst)
        for p in dst.rglob("samples_gsm8k_*.jsonl"):
            p.unlink()
        (src,) = dst.rglob("samples_arc_easy_*.jsonl")
        rows = [json.loads(line) for line in src.read_text().splitlines()]
        src.write_text("".join(json.dumps(change(r) if change else r) + "\n" for r in rows))
        folders.append(dst)
    out = tmp_path / "run"
    code = main(["compare", "--baseline-samples", str(folders[0]), "--candidate-samples", str(folders[1]),
                 "--out", str(out)])  # fmt: skip
    return code, out


@pytest.mark.parametrize("bad", [7, -1])
def test_an_imported_lm_eval_acc_outside_0_1_never_passes(bad: int, tmp_path: Path, capsys: Capture) -> None:
    """acc rewritten on three documents of both arms: the import (which read such values as a
    graded metric, and passed the pair with a delta of 0) refuses it, or the gate does."""
    code, _ = _import(tmp_path, lambda r: {**r, "acc": bad} if r["doc_id"] < 3 else r)
    printed = capsys.readouterr()
    text = " ".join((printed.out + printed.err).split())
    assert code in (2, 3), text
    assert "acc" in text and (f"= {bad}" in text or f"value {float(bad)!r}" in text), text


@pytest.mark.parametrize("bad", [7.0, -1.0])
def test_a_run_folder_with_acc_outside_0_1_is_an_error_on_report(bad: float, tmp_path: Path) -> None:
    """The gate checks the range itself, whatever wrote the folder: an imported run whose records
    hold acc = 7 (and whose manifest calls the metric graded, as the import did for such values)
    is an ERROR on ``evalgate report``, naming the metric, the value and the item."""
    code, out = _import(tmp_path)
    assert code in (0, 1)
    manifest = json.loads((out / "manifest.json").read_text())
    manifest["suites"]["arc_easy"]["metric_kind"] = "continuous"
    (out / "manifest.json").write_text(json.dumps(manifest))
    for path in (out / "items").glob("arc_easy.*.jsonl"):
        rows = [json.loads(line) for line in path.read_text().splitlines()]
        for r in rows[:3]:
            r["metrics"]["acc"] = bad
        path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert main(["report", str(out)]) == 3
    verdict = json.loads((out / "verdict.json").read_text())
    assert verdict["verdict"] == "ERROR", verdict["reason"]
    assert "'acc' is outside its range [0, 1]" in verdict["reason"] and f"value {bad!r}" in verdict["reason"]
    assert "first: item" in verdict["reason"]
