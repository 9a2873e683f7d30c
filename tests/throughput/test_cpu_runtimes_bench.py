"""benchmarks/cpu_runtimes.py's arithmetic on canned ``timings``: the interleaving, the medians, the
ratios and the table; no server starts."""

from __future__ import annotations

from pathlib import Path
from types import ModuleType

import pytest

from tests.helpers.modules import load_file

BENCH = Path(__file__).resolve().parents[2] / "benchmarks" / "cpu_runtimes.py"


@pytest.fixture(scope="module")
def cr() -> ModuleType:
    return load_file("cpu_runtimes", BENCH, register=True)


def _answer(prompt_n: int, pp: float, gen_n: int, tg: float) -> dict[str, object]:
    """A llama-server ``/v1/completions`` answer with its ``timings`` object."""
    return {
        "choices": [{"text": "x", "finish_reason": "length"}],
        "timings": {
            "cache_n": 0,
            "prompt_n": prompt_n,
            "prompt_ms": prompt_n / pp * 1e3,
            "prompt_per_second": pp,
            "predicted_n": gen_n,
            "predicted_ms": gen_n / tg * 1e3,
            "predicted_per_second": tg,
        },
    }


def _samples(cr: ModuleType) -> list[object]:
    """Three rounds of two requests each; xllamacpp prefills at half the rate on F16 and decodes at
    0.9 of it, and at 0.8 and 1.0 on q8_0. Round 2 is slow for everyone (a busy machine)."""
    rates = {
        ("llama-server", "f16"): (400.0, 40.0),
        ("xllamacpp", "f16"): (200.0, 36.0),
        ("llama-server", "q8_0"): (300.0, 30.0),
        ("xllamacpp", "q8_0"): (240.0, 30.0),
    }
    out = []
    for r, kv, rt in cr.schedule(3, ["f16", "q8_0"]):
        pp, tg = rates[rt, kv]
        slow = 0.5 if r == 1 else 1.0
        # two requests: one at the rate, one 10 % faster; the median is their mean
        timings = tuple(cr.read_timing(_answer(980, pp * slow * f, 48, tg * slow * f)) for f in (1.0, 1.1))
        out.append(cr.Sample(rt, kv, r, timings, wall_s=2.0 / slow))
    return out


def test_schedule_alternates_runtimes_each_round(cr: ModuleType) -> None:
    order = cr.schedule(3, ["f16", "q8_0"])
    assert [rt for r, _, rt in order if r == 0] == ["llama-server", "xllamacpp"] * 2
    assert [rt for r, _, rt in order if r == 1] == ["xllamacpp", "llama-server"] * 2
    assert [rt for r, _, rt in order if r == 2] == ["llama-server", "xllamacpp"] * 2
    assert {kv for _, kv, _ in order} == {"f16", "q8_0"} and len(order) == 12
    assert cr.schedule(1, ["q8_0"]) == [(0, "q8_0", "llama-server"), (0, "q8_0", "xllamacpp")]


def test_read_timing_needs_the_servers_timings(cr: ModuleType) -> None:
    t = cr.read_timing(_answer(980, 500.0, 48, 40.0))
    assert (t.prompt_n, t.prompt_per_second, t.predicted_n, t.predicted_per_second) == (980, 500.0, 48, 40.0)
    with pytest.raises(ValueError, match="no timings"):
        cr.read_timing({"choices": [{"text": "x"}]})


def test_medians_over_rounds_and_the_ratio_per_kv(cr: ModuleType) -> None:
    rows = cr.summarize(_samples(cr))
    assert [(r.runtime, r.kv) for r in rows] == [
        ("llama-server", "f16"),
        ("xllamacpp", "f16"),
        ("llama-server", "q8_0"),
        ("xllamacpp", "q8_0"),
    ]
    first = rows[0]
    # a round's median of (400, 440) is 420; rounds 420, 210, 420: the median is 420
    assert first.prefill == pytest.approx(420.0) and first.decode == pytest.approx(42.0)
    assert first.wall_s == pytest.approx(2.0) and first.rounds == 3 and first.prompt_tokens == 980
    q = cr.ratios(rows)
    assert q["f16"] == pytest.approx({"prefill": 0.5, "decode": 0.9, "wall": 1.0})
    assert q["q8_0"] == pytest.approx({"prefill": 0.8, "decode": 1.0, "wall": 1.0})


def test_table_has_a_row_per_arm_and_the_ratios(cr: ModuleType) -> None:
    text = cr.table(cr.summarize(_samples(cr)))
    lines = text.splitlines()
    assert lines[0].startswith("| runtime | KV | prefill tok/s | decode tok/s |")
    assert "| llama-server | f16 | 420 | 42.0 | 2.00 | 3 | 980 |" in lines
    assert "| xllamacpp | f16 | 210 | 37.8 | 2.00 | 3 | 980 |" in lines
    assert "| **xllamacpp / llama-server** | f16 | **0.50x** | **0.90x** | 1.00x | | |" in lines
    assert "| **xllamacpp / llama-server** | q8_0 | **0.80x** | **1.00x** | 1.00x | | |" in lines


def test_one_runtime_alone_has_no_ratio(cr: ModuleType) -> None:
    alone = [s for s in _samples(cr) if s.runtime == "llama-server" and s.kv == "f16"]  # type: ignore[attr-defined]
    rows = cr.summarize(alone)
    assert len(rows) == 1 and cr.ratios(rows) == {}
    assert "xllamacpp / llama-server" not in cr.table(rows)


def test_a_missing_runtime_exits_2(
    cr: ModuleType, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from evalgate.engines import llamacpp
    from evalgate.errors import ConfigError

    def missing(setting: str) -> str:
        if setting == "xllamacpp":
            raise ConfigError("[llamacpp] runtime = 'xllamacpp', but xllamacpp is not installed", fix="pip")
        return setting

    monkeypatch.setattr(llamacpp, "resolve_runtime", missing)
    assert cr.main(["--rounds", "1"]) == 2
    assert "xllamacpp is not installed" in capsys.readouterr().err
