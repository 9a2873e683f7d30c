"""A CPU engine's smoke run asks fewer 5-shot GSM8K items and more ARC-Easy items (#47: the first
command's minutes go to items that decide something), the same 150 items with drift; ``--limit``
wins, other presets and engines keep the preset's count, and a resume keeps the original plan."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from evalgate.cli import main
from evalgate.engines.api import CPU_SMOKE_ITEMS
from evalgate.engines.fake import FakeEngine
from evalgate.engines.llamacpp import LlamaCppEngine
from evalgate.run.settle import items_per_suite
from evalgate.suites import PRESETS


def _settled(engine: Any, *, preset: str = "smoke", limit: int | None = None, previous: Any = None) -> Any:
    return SimpleNamespace(
        request=SimpleNamespace(preset=preset, limit=limit), engine=engine, previous=previous
    )


def test_the_cpu_smoke_run_spends_its_items_where_they_are_cheap() -> None:
    settled = _settled(LlamaCppEngine())
    counts = {s: items_per_suite(settled, s) for s in ("gsm8k", "arc_easy", "drift")}
    assert counts == {"gsm8k": 10, "arc_easy": 90, "drift": 50}
    assert sum(counts.values()) == 3 * PRESETS["smoke"]  # no fewer items than 50 of each
    assert dict(LlamaCppEngine().default_items("smoke")) == dict(CPU_SMOKE_ITEMS)


@pytest.mark.parametrize("preset", ["quick", "full"])
def test_other_presets_keep_their_count(preset: str) -> None:
    settled = _settled(LlamaCppEngine(), preset=preset)
    assert items_per_suite(settled, "gsm8k") == PRESETS[preset] == items_per_suite(settled, "arc_easy")


def test_limit_wins_and_a_gpu_engine_keeps_the_preset() -> None:
    assert items_per_suite(_settled(LlamaCppEngine(), limit=7), "gsm8k") == 7
    assert items_per_suite(_settled(FakeEngine()), "gsm8k") == PRESETS["smoke"]


def test_a_resume_keeps_the_count_the_original_run_planned() -> None:
    previous = SimpleNamespace(suites={"gsm8k": SimpleNamespace(n=50), "long_context": SimpleNamespace(n=72)})
    settled = _settled(LlamaCppEngine(), previous=previous)
    assert items_per_suite(settled, "gsm8k") == 50  # planned before the CPU counts existed
    assert items_per_suite(settled, "arc_easy") == 90
    assert items_per_suite(settled, "long_context") == PRESETS["smoke"]  # per length: not its total


class _CpuLike(FakeEngine):
    """The fake engine with a CPU engine's kind of smoke counts, small enough for a fast test."""

    def default_items(self, preset: str) -> dict[str, int]:
        return {"arc_challenge": 6, "arc_easy": 12} if preset == "smoke" else {}


def test_suites_of_different_sizes_each_say_what_they_could_detect(
    tmp_path: Path, data_dir: Path, use: Any
) -> None:
    use(_CpuLike())
    out = tmp_path / "run"
    main(["compare", "--engine", "fake", "--suites", "arc_challenge,arc_easy", "--data-dir", str(data_dir),
          "--out", str(out), "--skip-kernel-check"])  # fmt: skip
    verdict = json.loads((out / "verdict.json").read_text())
    assert {s: m["n"] for s, m in json.loads((out / "manifest.json").read_text())["suites"].items()} == {
        "arc_challenge": 6,
        "arc_easy": 12,
    }
    reason = verdict["reason"]
    assert "at n = 6" in reason and "at n = 12" in reason, reason
