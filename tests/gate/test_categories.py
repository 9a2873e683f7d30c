"""Per-category rows (#44): a 0/1 suite's paired items by subject (MMLU), category and source exam
(MMLU-Pro) or BFCL category (tool_calls), informational, with the overall delta's interval
item-level beside clustered by category; and the coverage benchmark at a small size."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from typing import Any

import pytest

from evalgate import stats
from evalgate.gate import Verdict
from evalgate.gate._categories import UNITS, suite_categories
from evalgate.store.records import Pair, Record
from evalgate.suites import SuiteOptions, default_registry

BENCH = Path(__file__).resolve().parents[2] / "benchmarks" / "clustered_coverage.py"


def _record(suite: str, arm: str, item: str, right: bool, extra: dict[str, Any]) -> Record:
    return Record(
        run_id="r", arm=arm, variant=arm, suite=suite, suite_version=1, item_id=item, repeat=0,
        prompt_hash=f"h-{item}", target=0, response=None, extracted=None, metrics={"acc": float(right)},
        extra=extra,
    )  # fmt: skip


def _pairs(suite: str, spec: list[tuple[dict[str, Any], bool, bool]]) -> list[Pair]:
    return [
        Pair(
            f"i{i}",
            0,
            _record(suite, "baseline", f"i{i}", b, extra),
            _record(suite, "candidate", f"i{i}", c, extra),
        )
        for i, (extra, b, c) in enumerate(spec)
    ]


def _subject(name: str, same: int, lost: int, gained: int = 0) -> list[tuple[dict[str, Any], bool, bool]]:
    s = {"subject": name}
    return [(s, True, True)] * same + [(s, True, False)] * lost + [(s, False, True)] * gained


def test_mmlu_rows_by_subject_with_the_gate_s_item_level_interval() -> None:
    pairs = _pairs(
        "mmlu", _subject("chemistry", 10, 5) + _subject("law", 14, 0, 1) + _subject("art", 8, 1, 1)
    )
    out = suite_categories("mmlu", "acc", pairs)
    assert out is not None and (out.unit, out.within, out.confidence) == ("subject", "item", 0.95)
    assert [r.category for r in out.rows] == ["art", "chemistry", "law"]  # sorted: a stable order
    chem = out.rows[1]
    assert (chem.n, chem.n10, chem.n01, chem.clusters) == (15, 5, 0, 15)
    assert (chem.baseline, chem.candidate, chem.delta) == (1.0, 10 / 15, -5 / 15)
    tango = stats.paired_diff_ci(10, 5, 0, 0, confidence=0.95)
    assert (chem.ci_low, chem.ci_high) == (tango.low, tango.high) and chem.ci_high < 0
    assert "3 subject rows, informational: never gated, outside the Holm family" in out.note
    assert "unadjusted 95% intervals, so about 0.15 of 3 would exclude 0 by chance" in out.note
    assert out.note.endswith("(1 do)")


def test_a_change_concentrated_in_one_subject_widens_the_clustered_interval() -> None:
    spec = _subject("chemistry", 4, 6)
    for name in ("art", "law", "math", "music", "physics"):
        spec += _subject(name, 10, 0)
    pairs = _pairs("mmlu", spec)
    out = suite_categories("mmlu", "acc", pairs)
    assert out is not None
    o = out.overall
    b = [float(p.baseline.metrics["acc"]) for p in pairs]
    c = [float(p.candidate.metrics["acc"]) for p in pairs]
    item = stats.clustered_diff_ci(b, c, [p.item_id for p in pairs])
    by_subject = stats.clustered_diff_ci(b, c, [p.baseline.extra.subject for p in pairs])
    assert o.estimate == pytest.approx(-6 / 60)
    assert (o.item_low, o.item_high) == pytest.approx((item.low, item.high))
    assert (o.clustered_low, o.clustered_high) == pytest.approx((by_subject.low, by_subject.high))
    assert o.n_clusters == 6 and o.width_ratio is not None and o.width_ratio > 2
    assert o.item_high < 0 < o.clustered_high  # item-level excludes 0; clustered by subject does not


def test_mmlu_pro_rows_cluster_on_the_source_exam_and_old_records_fall_back_to_items() -> None:
    assert UNITS["mmlu_pro"].within_label == "src" and UNITS["mmlu_pro_chat"].within_label == "src"
    a, b2 = {"subject": "physics", "src": "stemez-Physics"}, {"subject": "physics", "src": "scibench-x"}
    spec = [(a, True, False)] * 6 + [(a, True, True)] * 2 + [(b2, True, True)] * 8
    spec += [({"subject": "law", "src": "ori_mmlu-law"}, True, True)] * 5
    out = suite_categories("mmlu_pro", "acc", _pairs("mmlu_pro", spec))
    assert out is not None and out.within == "src" and out.unit == "category"
    physics = next(r for r in out.rows if r.category == "physics")
    b = [1.0] * 16
    c = [0.0] * 6 + [1.0] * 10
    robust = stats.clustered_diff_ci(b, c, ["s"] * 8 + ["t"] * 8)
    tango = stats.paired_diff_ci(10, 6, 0, 0)
    assert physics.clusters == 2
    assert (physics.ci_low, physics.ci_high) == (min(tango.low, robust.low), max(tango.high, robust.high))
    assert physics.ci_low < tango.low  # two sources: wider than the items alone say
    old = [({"subject": "physics"}, True, False)] * 3 + [({"subject": "law"}, True, True)] * 3
    rows = suite_categories("mmlu_pro", "acc", _pairs("mmlu_pro", old))
    assert rows is not None and [r.clusters for r in rows.rows] == [3, 3]  # each item its own unit


def test_an_item_without_a_usable_value_is_left_out() -> None:
    pairs = _pairs("mmlu", _subject("law", 3, 1) + _subject("art", 2, 0))
    pairs[0].candidate.metrics["acc"] = float("nan")
    del pairs[1].baseline.metrics["acc"]
    out = suite_categories("mmlu", "acc", pairs)
    assert out is not None and [(r.category, r.n) for r in out.rows] == [("art", 2), ("law", 2)]


def test_no_item_changed_gives_tango_s_interval_not_a_zero_width_one() -> None:
    out = suite_categories("mmlu", "acc", _pairs("mmlu", _subject("law", 20, 0) + _subject("art", 30, 0)))
    assert out is not None
    o = out.overall
    tango = stats.paired_diff_ci(50, 0, 0, 0)
    assert (o.item_low, o.item_high) == (o.clustered_low, o.clustered_high) == (tango.low, tango.high)
    assert o.item_low < 0 < o.item_high and o.width_ratio is None and o.estimate == 0.0


def test_mmlu_pro_items_record_their_source_exam(data_dir: Path) -> None:
    suite = default_registry().get("mmlu_pro")
    items = suite.load(SuiteOptions(data_dir=data_dir), 28)
    extras = [it.extra for it in items]
    assert all(e.src and e.subject for e in extras)  # new records carry it
    assert {str(e.src).split("-")[0] for e in extras} >= {"ori_mmlu", "stemez"}


def test_tool_calls_group_by_bfcl_category() -> None:
    spec = [({"category": "simple_python", "tool_prefill": True}, True, False)] * 2
    spec += [({"category": "irrelevance", "tool_prefill": True}, False, False)] * 3
    out = suite_categories("tool_calls", "acc", _pairs("tool_calls", spec))
    assert out is not None and out.unit == "BFCL category"
    assert [(r.category, r.n, r.n10) for r in out.rows] == [("irrelevance", 3, 0), ("simple_python", 2, 2)]


def test_no_section_without_two_categories() -> None:
    assert suite_categories("arc_easy", "acc", _pairs("arc_easy", [({}, True, False)] * 4)) is None
    assert suite_categories("mmlu", "acc", _pairs("mmlu", _subject("law", 3, 1))) is None
    mixed = _subject("law", 3, 1) + [({}, True, True)] * 2  # an item without one: its own row, named
    out = suite_categories("mmlu", "acc", _pairs("mmlu", mixed))
    assert out is not None and [r.category for r in out.rows] == ["(not recorded)", "law"]


def test_the_section_is_written_only_when_there_is_one() -> None:
    plain = Verdict(verdict="PASS", alpha=0.05, policy="difference", reason="")
    assert "categories" not in plain.to_dict()
    section = suite_categories("mmlu", "acc", _pairs("mmlu", _subject("a", 2, 1) + _subject("b", 2, 0)))
    assert section is not None
    doc = Verdict(verdict="PASS", alpha=0.05, policy="difference", reason="", categories=[section]).to_dict()
    assert doc["categories"][0]["rows"][0]["category"] == "a"
    assert set(doc["categories"][0]["overall"]) >= {"item_low", "clustered_low", "width_ratio"}


def test_the_coverage_benchmark_at_a_small_size(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    spec = importlib.util.spec_from_file_location("clustered_coverage_t", BENCH)
    assert spec is not None and spec.loader is not None
    bench = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, spec.name, bench)  # its dataclasses look their module up
    spec.loader.exec_module(bench)
    flat, clustered = bench.main(["--seed", "0", "--reps", "150", "--designs", "14x40", "--sigmas", "0,1.5"])
    printed = capsys.readouterr().out
    assert "| 14 x 40 | 1.5 |" in printed and "item-level" in printed
    assert flat.delta == pytest.approx(0.4 * 0.03 - 0.6 * 0.05)
    assert abs(flat.item - 0.95) < 0.06 and abs(flat.clustered - 0.95) < 0.06  # no cluster effect: both hold
    assert clustered.item < 0.85 < clustered.clustered  # a clustered change: only the clustered one holds
    assert clustered.width_ratio > 1.5 > flat.width_ratio
