"""Warm against cold answers on one (simulated) server: no flips pass, cache-dependent answers
block, and a cache that never hits is an error, never a pass."""

from __future__ import annotations

import asyncio

from evalgate.probe.warm_cold import WarmColdResult, run_warm_cold
from tests.probe.sim import SimScorer

FEW_SHOT = list(range(100, 160))
PROMPTS = [[*FEW_SHOT, 200 + i, 300 + i] for i in range(20)]


def run(sim: SimScorer) -> WarmColdResult:
    return asyncio.run(run_warm_cold(sim, PROMPTS))


def test_answers_that_do_not_depend_on_the_cache_pass() -> None:
    sim = SimScorer()
    r = run(sim)
    assert r.status == "pass" and r.flips == () and r.warm == r.cold
    assert all(c and c >= len(FEW_SHOT) for c in r.warm_cached)
    cold_salts = [salt for _, salt in sim.sent[: len(PROMPTS)]]
    assert len(set(cold_salts)) == len(PROMPTS)  # a salt of its own per cold request
    assert len({salt for _, salt in sim.sent[len(PROMPTS) :]}) == 1  # one shared salt warm


def test_answers_that_change_when_read_from_the_cache_block() -> None:
    r = run(SimScorer(warm_changes=True))
    assert r.status == "block" and len(r.flips) == len(PROMPTS) and r.pvalue < 0.05


def test_a_cache_that_never_hits_is_an_error() -> None:
    assert run(SimScorer(cache=False)).status == "error"
