"""The order of service on every record (#54): which launch answered, the item's place in that
launch's sequence, the items in flight beside it, and when it was sent and done."""

from __future__ import annotations

import asyncio
import itertools
import json
from pathlib import Path
from typing import Any

from evalgate.cli import main
from evalgate.engines.fake import FakeEngine
from evalgate.run.order import ServiceOrder


def test_concurrent_items_get_consecutive_places_and_their_neighbours_counted() -> None:
    order = ServiceOrder()
    seen: list[dict[str, Any]] = []

    async def item(arm: str, pause: float) -> None:
        with order.serve(arm) as facts:
            await asyncio.sleep(pause)
        seen.append(dict(facts))

    async def go() -> None:
        await asyncio.gather(*(item("candidate", 0.02) for _ in range(4)), item("baseline", 0.0))
        await item("candidate", 0.0)  # after the others: nothing in flight

    asyncio.run(go())
    assert {f["launch"] for f in seen} == {order.launch}  # every record names the launch
    assert sorted(f["seq"] for f in seen) == [0, 0, 1, 2, 3, 4]  # the baseline's own 0; the candidate's 0-4
    last = max(seen, key=lambda f: f["seq"])
    assert last["in_flight"] == 0 and last["seq"] == 4  # sent after the others came back
    assert max(f["in_flight"] for f in seen) == 3  # the fourth candidate item saw three beside it
    assert all(f["sent"] <= f["done"] for f in seen)


def test_every_record_says_where_it_stood_in_its_servers_order(
    tmp_path: Path, data_dir: Path, use: Any
) -> None:
    use(FakeEngine())
    out = tmp_path / "run"
    args = ["compare", "--engine", "fake", "--suites", "arc_easy,mmlu", "--limit", "6", "--data-dir",
            str(data_dir), "--out", str(out), "--skip-kernel-check"]  # fmt: skip
    assert main(args) == 0
    for arm in ("baseline", "candidate"):
        served = []
        for suite in ("arc_easy", "mmlu"):
            for line in (out / "items" / f"{suite}.{arm}.jsonl").read_text().splitlines():
                served.append(json.loads(line)["extra"]["served"])
        # one launch per arm; its items numbered 0..11 across both suites, in the order sent
        assert len({s["launch"] for s in served}) == 1
        assert sorted(s["seq"] for s in served) == list(range(12))
        by_seq = sorted(served, key=lambda s: s["seq"])
        assert all(a["sent"] <= b["sent"] for a, b in itertools.pairwise(by_seq))
        assert all(s["sent"] <= s["done"] and s["in_flight"] >= 0 for s in served)


class _Pressed(FakeEngine):
    """A fake engine whose log reports a pool pressed once (what SGLang's retract warning says)."""

    def pressure(self, handle: Any) -> dict[str, Any]:
        return {"kind": "retractions", "events": 1, "requests": 3, "peak_usage": 0.99}


def test_each_launchs_pool_pressure_is_in_the_manifest(tmp_path: Path, data_dir: Path, use: Any) -> None:
    use(_Pressed())
    out = tmp_path / "run"
    args = ["compare", "--engine", "fake", "--suites", "arc_easy", "--limit", "4", "--data-dir", str(data_dir),
            "--out", str(out), "--skip-kernel-check"]  # fmt: skip
    assert main(args) == 0
    manifest = json.loads((out / "manifest.json").read_text())
    for arm in ("baseline", "candidate"):
        (entry,) = manifest["arms"][arm]["server"]["pool_pressure"]
        launch = {
            json.loads(x)["extra"]["served"]["launch"]
            for x in (out / "items" / f"arc_easy.{arm}.jsonl").read_text().splitlines()
        }
        assert {entry["launch"]} == launch and entry["requests"] == 3 and entry["peak_usage"] == 0.99
    rows = {r["key"]: r for r in json.loads((out / "verdict.json").read_text())["what_ran"]}
    row = rows["pool_pressure"]
    assert row["baseline"] == row["candidate"] == "retractions: 1 (3 requests), peak pool use 99%"
    assert row["differs"] is False
