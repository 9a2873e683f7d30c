"""The cache-isolation probe on a simulated server (tests/probe/sim.py): each verdict, the exact
oracle, the calibration, the request plan, and NO_ISOLATION for a server that takes no salt."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from evalgate.engines.api import CacheObservation, NoCacheIsolation, Scorer
from evalgate.probe import EXIT_CODES, ProbeSettings, run_cache_probe, summary_line
from tests.probe.sim import SimScorer


def probe(scorer: Scorer, **kwargs: Any) -> dict[str, Any]:
    return asyncio.run(run_cache_probe(scorer, ProbeSettings(**kwargs)))


def test_salted_tenants_pass_with_no_cross_cached_tokens() -> None:
    sim = SimScorer()
    report = probe(sim)
    assert report["verdict"] == "PASS" and report["exit_code"] == 0, report["reasons"]
    assert report["oracle"]["cross_cached_max"] == 0
    assert report["oracle"]["same_cached_min"] >= report["prefix_tokens"]
    assert report["cache_gap"] > 2 and report["timing"]["gap_p"] < 0.05
    assert report["flush"] == ["flushed"] and sim.flushes >= 20
    json.dumps(report)  # probe.json is plain JSON
    assert summary_line(report).startswith("cache isolation: PASS")


def test_a_server_that_ignores_salts_blocks_on_the_oracle_and_the_timing() -> None:
    report = probe(SimScorer(honour_salt=False))
    assert report["verdict"] == "BLOCK" and report["exit_code"] == 1
    assert report["oracle"]["cross_probes_with_cached_tokens"] == 20
    assert report["timing"]["status"] == "block"


def test_no_salt_blocks() -> None:
    report = probe(SimScorer(), salted=False)
    assert report["verdict"] == "BLOCK"


def test_timing_alone_blocks_a_server_that_reports_no_cached_tokens() -> None:
    report = probe(SimScorer(honour_salt=False, report=False))
    assert report["verdict"] == "BLOCK" and not report["oracle"]["reported"]


def test_a_cache_that_never_hits_is_an_error_never_a_pass() -> None:
    report = probe(SimScorer(cache=False))
    assert report["verdict"] == "ERROR" and report["exit_code"] == 3
    assert any("positive control" in r for r in report["reasons"])


def test_calibration_picks_the_shortest_prefix_with_a_measurable_gap() -> None:
    report = probe(SimScorer())
    assert report["prefix_tokens"] == 128 and report["calibration"][0]["prefix_tokens"] == 128
    assert probe(SimScorer(), prefix_tokens=64)["calibration"] == []


def test_each_probe_sends_the_victim_then_the_three_conditions_in_random_order() -> None:
    sim = SimScorer()
    report = probe(sim, prefix_tokens=64, probes=6)
    orders = {tuple(r["order"]) for r in report["probes"]}
    assert len(orders) > 1 and all(sorted(o) == ["cold", "cross", "same"] for o in orders)
    first = sim.sent[:4]
    (victim, a), rest = first[0], first[1:]
    by_len = [s for s in rest if s[0][:64] == victim]
    assert len(victim) == 64 and len(by_len) == 2  # SAME and CROSS share the victim's prefix
    salts = {salt for ids, salt in by_len}
    assert a in salts and len(salts) == 2  # SAME under A, CROSS under another salt
    (cold,) = [s for s in rest if s not in by_len]
    assert len(cold[0]) == 64 + 8 and cold[1] != a and cold[0][0] != victim[0]
    assert all(
        salt is not None and len(salt) <= 128 and not set(salt) & set("@/\\\x00") for _, salt in sim.sent
    )


class NoSalt(SimScorer):
    """A server without a cache key: the protocol's default answer."""

    async def cached_request(
        self, prompt_ids: Any, *, salt: str | None, max_tokens: int = 1
    ) -> CacheObservation:
        return await Scorer.cached_request(self, prompt_ids, salt=salt, max_tokens=max_tokens)


def test_a_server_without_salts_reports_no_isolation_and_what_to_do() -> None:
    report = probe(NoSalt())
    assert report["verdict"] == "NO_ISOLATION" and report["exit_code"] == EXIT_CODES["NO_ISOLATION"] == 2
    assert "own server" in report["reasons"][1] and "caching off" in report["reasons"][1]
    assert summary_line(report).startswith("cache isolation: NO_ISOLATION")


def test_the_default_cached_request_refuses_with_exit_2() -> None:
    with pytest.raises(NoCacheIsolation) as err:
        asyncio.run(Scorer.cached_request(SimScorer(), [1, 2], salt="a"))
    assert err.value.exit_code == 2


def test_the_cli_writes_probe_json_and_exits_with_the_verdict(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import evalgate.probe.run as probe_run
    from evalgate.cli import main

    monkeypatch.setattr(probe_run, "_server", fake_server(SimScorer(honour_salt=False)))
    code = main(["probe", "cache", "--engine", "sim", "--out", str(tmp_path), "--probes", "8"])
    assert code == 1
    report = json.loads((tmp_path / "probe.json").read_text())
    assert report["verdict"] == "BLOCK" and report["settings"]["probes"] == 8
    assert "cache isolation: BLOCK" in capsys.readouterr().out
    junit = (tmp_path / "junit.xml").read_text()
    assert 'name="cache_isolation"' in junit and "<failure" in junit and 'failures="1"' in junit


def fake_server(scorer: Scorer) -> Any:
    import contextlib

    from evalgate.engines import ServerHandle

    @contextlib.contextmanager
    def server(args: Any, out: Path, **_: Any) -> Any:
        yield ServerHandle("probe", "http://127.0.0.1:1", "", [], out / "log"), scorer

    return server


@pytest.mark.parametrize(
    "flags",
    [["--probes", "1"], ["--share", "1.5"], ["--alpha", "0.7"], ["--prefix-tokens", "4"], []],
)
def test_bad_flags_exit_2(flags: list[str], tmp_path: Path) -> None:
    from evalgate.cli import main

    engine = [] if not flags else ["--engine", "sglang"]
    assert main(["probe", "cache", *engine, *flags, "--out", str(tmp_path)]) == 2


def test_probe_without_a_probe_name_prints_help_and_exits_2() -> None:
    from evalgate.cli import main

    assert main(["probe"]) == 2
