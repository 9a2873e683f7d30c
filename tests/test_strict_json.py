"""Records are strict JSON (issue 31, item 5): no bare NaN or Infinity, which jq, JavaScript and
most data tools reject, in any record committed under reports/ or written by a run. A non-finite
value is written as null with its kind in ``extra["nonfinite"]``, and read back as that float, so
the gate still sees it (a non-finite primary metric is an ERROR)."""

from __future__ import annotations

import json
import math
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from evalgate.engines.fake import FakeEngine
from evalgate.gate import check_suite, load_run, verdict_for
from evalgate.store.facts import READ, RecordExtra
from evalgate.store.records import Record, RecordStore, pair_records
from tests.helpers.guards import compare, exam
from tests.helpers.runs import SynthSuite, build_run

__all__ = ["exam"]  # fixtures

REPORTS = Path(__file__).resolve().parents[1] / "reports"


def _refuse(constant: str) -> Any:
    raise ValueError(f"{constant} is not JSON")


def strict(raw: bytes) -> Any:
    """One line as a strict parser reads it: UTF-8, and no NaN, Infinity or -Infinity."""
    return json.loads(raw.decode("utf-8"), parse_constant=_refuse)


def strict_lines(folder: Path) -> list[Any]:
    paths = sorted(folder.rglob("items/*.jsonl"))
    return [strict(line) for p in paths for line in p.read_bytes().splitlines() if line.strip()]


def test_the_strict_parser_refuses_what_the_old_writer_wrote() -> None:
    with pytest.raises(ValueError, match="NaN is not JSON"):
        strict(json.dumps({"acc": math.nan}).encode())


def test_every_committed_record_is_strict_json() -> None:
    rows = strict_lines(REPORTS)
    assert rows and all(r["schema"] == 1 for r in rows)


def _record(arm: str, acc: float, **kw: Any) -> Record:
    fields: dict[str, Any] = {
        "run_id": "r", "arm": arm, "variant": arm, "suite": "s", "suite_version": 1, "item_id": "a",
        "repeat": 0, "prompt_hash": "h", "target": 0, "response": None, "extracted": None,
        "metrics": {"acc": acc, "f1": 0.5},
    }  # fmt: skip
    return Record(**{**fields, **kw})


def test_a_non_finite_value_is_written_as_null_with_its_reason(tmp_path: Path) -> None:
    store = RecordStore(tmp_path)
    record = _record(
        "baseline",
        math.nan,
        response=[[-math.inf, True], [np.float64("nan"), False]],
        latency_s=math.inf,
        # a key with a dot, as a file written by another evalgate may hold (a read keeps it)
        extra=RecordExtra.model_validate({"kld.mean": np.float32("inf"), "subject": "x"}, context=READ),
    )
    store.append(record)  # the old write put bare NaN and Infinity in the line
    (row,) = strict_lines(tmp_path)
    assert row["metrics"] == {"acc": None, "f1": 0.5}
    assert row["response"] == [[None, True], [None, False]] and row["latency_s"] is None
    assert row["extra"]["nonfinite"] == {
        "metrics.acc": "nan", "response.0.0": "-inf", "response.1.0": "nan", "latency_s": "inf",
        "extra.kld.mean": "inf",
    }  # fmt: skip
    back = store.load("s", "baseline")[("s", "a", 0)]
    assert math.isnan(back.metrics["acc"]) and back.metrics["f1"] == 0.5
    assert back.response[0][0] == -math.inf and math.isnan(back.response[1][0])
    assert back.latency_s == math.inf and back.extra.model_extra == {"kld.mean": math.inf}
    store.append(back)  # written again (a resumed run's reload) it is the same line
    first, second = store.path("s", "baseline").read_bytes().splitlines()
    assert strict(first) == strict(second)


def test_the_gate_still_sees_a_non_finite_primary_metric(tmp_path: Path) -> None:
    store = RecordStore(tmp_path)
    store.append(_record("baseline", 1.0))
    store.append(_record("candidate", math.inf))
    pairs = pair_records(
        store.load("s", "baseline").values(), store.load("s", "candidate").values(), suite="s"
    )
    reason = check_suite("s", "acc", pairs, "binary")
    assert reason is not None and "is not finite" in reason


def test_a_record_with_nan_in_a_run_folder_gives_an_error_row_not_a_verdict(tmp_path: Path) -> None:
    run = build_run(tmp_path / "run", [SynthSuite("gsm8k", (3, 0, 0, 2), metrics=("acc",))])
    store = RecordStore(run)
    first = store.load("gsm8k", "candidate")[("gsm8k", "gsm8k-0000", 0)]
    store.append(replace(first, metrics={"acc": math.nan}))  # a later line supersedes the first
    verdict = verdict_for(load_run(run))
    row = next(r for r in verdict.suites if r.suite == "gsm8k" and r.primary)
    assert row.status == "error" and "not finite" in row.reason
    strict_lines(run)


def test_every_record_of_a_run_is_strict_json(exam: Path, tmp_path: Path, use: Any) -> None:
    use(FakeEngine(lambda arm, prompt: "yes"))
    out = tmp_path / "run"
    assert compare(out, exam, "--aa") == 0
    rows = strict_lines(out)
    assert len(rows) == 3 * 12
