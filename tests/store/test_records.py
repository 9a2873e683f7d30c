from __future__ import annotations

import json
from pathlib import Path

import pytest

from evalgate.errors import ConfigError
from evalgate.store.records import Record, RecordStore, pair_records


def rec(item: str, arm: str = "baseline", h: str = "h", error: str | None = None, acc: float = 1.0) -> Record:
    return Record(
        run_id="r",
        arm=arm,
        variant="bf16",
        suite="s",
        suite_version=1,
        item_id=item,
        repeat=0,
        prompt_hash=h,
        target=0,
        response=None,
        extracted=None,
        metrics={"acc": acc},
        error=error,
    )


def test_schema_first_and_roundtrip(tmp_path: Path) -> None:
    store = RecordStore(tmp_path)
    store.append(rec("a"))
    line = store.path("s", "baseline").read_text().splitlines()[0]
    assert line.startswith('{"schema":1,')
    assert store.load("s", "baseline")[("s", "a", 0)] == rec("a")


def test_torn_last_line_is_dropped_and_appends_stay_valid(tmp_path: Path) -> None:
    store = RecordStore(tmp_path)
    store.append(rec("a"))
    with open(store.path("s", "baseline"), "a") as f:
        f.write('{"schema":1,"run_id":"r","arm":"base')  # SIGKILL mid-write
    assert list(store.load("s", "baseline")) == [("s", "a", 0)]
    store.append(rec("b"))
    lines = store.path("s", "baseline").read_text().splitlines()
    assert [json.loads(x)["item_id"] for x in lines] == ["a", "b"]


def test_later_record_supersedes_an_error(tmp_path: Path) -> None:
    store = RecordStore(tmp_path)
    store.append(rec("a", error="HTTP 500"))
    store.append(rec("a"))
    assert store.load("s", "baseline")[("s", "a", 0)].error is None


def test_pairing_refuses_different_prompts() -> None:
    with pytest.raises(ConfigError, match="different prompts"):
        pair_records([rec("a", h="x")], [rec("a", "candidate", h="y")], suite="s")


def test_pairing_skips_errors_and_unmatched() -> None:
    pairs = pair_records([rec("a"), rec("b"), rec("c", error="e")], [rec("a", "candidate")], suite="s")
    assert [p.item_id for p in pairs] == ["a"]
