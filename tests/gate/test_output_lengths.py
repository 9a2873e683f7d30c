"""Accuracy by output length (#42): a generation suite's paired items bucketed by the baseline's
completion length, with the exact trend test; a candidate fine on short answers and wrong on long
ones shows it there."""

from __future__ import annotations

from evalgate import stats
from evalgate.gate._output_lengths import suite_output_lengths
from evalgate.store.records import Pair, Record

METRIC = "exact_match,flexible-extract"


def _record(arm: str, i: int, right: bool, completion: int | None) -> Record:
    return Record(
        run_id="r", arm=arm, variant=arm, suite="gsm8k", suite_version=1, item_id=f"test-{i}", repeat=0,
        prompt_hash=f"h{i}", target="1", response="#### 1", extracted=None, metrics={METRIC: float(right)},
        tokens={} if completion is None else {"prompt": 900, "completion": completion},
    )  # fmt: skip


def _pairs(spec: list[tuple[int, bool, bool]]) -> list[Pair]:
    return [
        Pair(f"test-{i}", 0, _record("baseline", i, b, n), _record("candidate", i, c, n))
        for i, (n, b, c) in enumerate(spec)
    ]


def test_a_candidate_that_decays_with_length_shows_a_trend() -> None:
    short = [(30, True, True)] * 20 + [(30, False, True)] * 2 + [(30, True, False)] * 1
    mid = [(120, True, True)] * 10 + [(120, True, False)] * 4
    long = [(400, True, True)] * 3 + [(400, True, False)] * 6
    out = suite_output_lengths("gsm8k", METRIC, _pairs(short + mid + long))
    assert out is not None
    assert [r.span for r in out.rows] == ["0-63", "64-255", "256-1023"]
    assert [(r.n, r.n10, r.n01) for r in out.rows] == [(23, 1, 2), (14, 4, 0), (9, 6, 0)]
    assert out.rows[2].baseline == 1.0 and out.rows[2].candidate == 3 / 9
    expected = stats.discordant_trend([1, 4, 6], [2, 0, 0]).pvalue
    assert out.trend_p == expected and out.trend_p < 0.05
    assert "not gated" in out.note and "256-1023" in out.note


def test_no_lengths_no_section_and_one_flipping_bucket_no_trend() -> None:
    assert suite_output_lengths("gsm8k", METRIC, _pairs([(None, True, False)] * 3)) is None  # type: ignore[list-item]
    out = suite_output_lengths("gsm8k", METRIC, _pairs([(10, True, False), (300, True, True)]))
    assert out is not None and out.trend_p is None
