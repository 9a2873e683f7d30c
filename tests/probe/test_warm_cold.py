"""Warm against cold answers on one (simulated) server: no flips pass, cache-dependent answers
block (any flip with --deterministic's budget 0), a cold request that read the cache or a warm
cache that never hit is an ERROR, never a PASS; a server without salts is probed through its
unsalted namespace and its per-request cache switch (llama-server), or says NO_ISOLATION; and
``evalgate probe warm-cold`` writes probe.json, junit.xml, summary.md and probe.html."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from evalgate.engines.api import CacheObservation, Scorer
from evalgate.probe import WarmColdResult, WarmColdSettings, run_warm_cold, summary_line, warm_cold_report
from evalgate.suites import Item, Registry
from tests.probe.sim import SimScorer

FEW_SHOT = list(range(100, 160))
PROMPTS = [[*FEW_SHOT, 200 + i, 300 + i] for i in range(20)]


def run(sim: Scorer, **kwargs: Any) -> WarmColdResult:
    return asyncio.run(run_warm_cold(sim, PROMPTS, **kwargs))


def test_answers_that_do_not_depend_on_the_cache_pass() -> None:
    sim = SimScorer()
    r = run(sim)
    assert r.status == "PASS" and r.flips == () and [w.text for w in r.warm] == [c.text for c in r.cold]
    assert all(w.cached_tokens and w.cached_tokens >= len(FEW_SHOT) for w in r.warm)
    assert all(c.cached_tokens == 0 for c in r.cold) and r.salted
    cold_salts = [salt for _, salt in sim.sent[: len(PROMPTS)]]
    assert len(set(cold_salts)) == len(PROMPTS)  # a salt of its own per cold request
    assert len({salt for _, salt in sim.sent[len(PROMPTS) :]}) == 1  # one shared salt warm
    assert sim.flushes == 1


def test_answers_that_change_when_read_from_the_cache_block() -> None:
    r = run(SimScorer(warm_changes=True))
    assert r.status == "BLOCK" and len(r.flips) == len(PROMPTS) and r.pvalue < 0.05


class OneFlip(SimScorer):
    """One prompt's answer changes when read from the cache: within a 5 % budget at n = 20."""

    async def cached_request(
        self, prompt_ids: Sequence[int], *, salt: str | None, max_tokens: int = 1
    ) -> CacheObservation:
        obs = await super().cached_request(prompt_ids, salt=salt, max_tokens=max_tokens)
        if list(prompt_ids) == PROMPTS[3] and obs.cached_tokens:
            return CacheObservation(obs.latency_s, obs.cached_tokens, obs.prompt_tokens, "other")
        return obs


def test_one_flip_is_within_the_budget_but_blocks_a_deterministic_server() -> None:
    assert run(OneFlip()).status == "PASS"
    strict = run(OneFlip(), budget=0.0)
    assert strict.status == "BLOCK" and strict.flips == (3,)


def test_a_cache_that_never_hits_is_an_error() -> None:
    r = run(SimScorer(cache=False))
    assert r.status == "ERROR" and "no warm request read" in r.reasons[0]


def test_a_server_that_ignores_salts_has_no_cold_condition_an_error() -> None:
    r = run(SimScorer(honour_salt=False))
    assert r.status == "ERROR" and "not cold" in r.reasons[0]


def test_a_server_that_reports_no_cached_tokens_is_decided_by_the_flips_and_says_so() -> None:
    r = run(SimScorer(report=False))
    assert r.status == "PASS" and "not checked" in r.reasons[-1]


class LlamaLike(SimScorer):
    """llama-server's contract: no salt (a salt is refused), one shared namespace, and a
    per-request switch that turns the prompt cache off (``cache_prompt: false``)."""

    async def cached_request(
        self, prompt_ids: Sequence[int], *, salt: str | None, max_tokens: int = 1
    ) -> CacheObservation:
        if salt is not None:
            return await Scorer.cached_request(self, prompt_ids, salt=salt, max_tokens=max_tokens)
        return await super().cached_request(prompt_ids, salt=None, max_tokens=max_tokens)

    async def cold_request(self, prompt_ids: Sequence[int], *, max_tokens: int = 1) -> CacheObservation:
        self.cache = False
        try:
            return await super().cached_request(prompt_ids, salt="off", max_tokens=max_tokens)
        finally:
            self.cache = True


def test_a_server_without_salts_runs_warm_in_its_shared_namespace_and_cold_with_the_cache_off() -> None:
    sim = LlamaLike()
    r = run(sim)
    assert r.status == "PASS" and not r.salted
    assert all(salt is None for _, salt in sim.sent[len(PROMPTS) :])
    assert all(c.cached_tokens == 0 for c in r.cold) and all(w.cached_tokens for w in r.warm)


class NoSalt(SimScorer):
    async def cached_request(
        self, prompt_ids: Sequence[int], *, salt: str | None, max_tokens: int = 1
    ) -> CacheObservation:
        return await Scorer.cached_request(self, prompt_ids, salt=salt, max_tokens=max_tokens)


def test_the_report_and_its_summary_line() -> None:
    settings = WarmColdSettings(limit=10)
    report = warm_cold_report(run(SimScorer()), settings, [f"s/{i}" for i in range(20)])
    json.dumps(report)
    assert report["verdict"] == "PASS" and report["exit_code"] == 0 and report["flips"] == 0
    assert report["conditions"]["cold"]["cached_tokens_max"] == 0
    assert report["items"][0]["item"] == "s/0" and report["items"][0]["flip"] is False
    line = summary_line(report)
    assert line.startswith("warm/cold answers: PASS") and "0 flips of 20" in line and "cold 0" in line


# --- the command -------------------------------------------------------------------------------


class TinySuite:
    """Two completion items whose prompts share a few-shot prefix."""

    kind, private, name = "generate", False, "tiny"

    def load(self, options: Any, n: int | None) -> list[Item]:
        shots = "Q: 1+1?\nA: 2\n\n" * 8
        return [
            Item(f"i{k}", f"h{k}", None, None, display={"prompt": f"{shots}Q: {k}+1?\nA:"})
            for k in range(n or 3)
        ]


class Words(SimScorer):
    async def tokenize(self, text: str) -> list[int]:
        return [10 + sum(map(ord, w)) % 5000 for w in text.split()]


def cli(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, scorer: Scorer, *flags: str) -> int:
    import evalgate.probe.run as probe_run
    import evalgate.probe.warm_cold as warm_cold
    from evalgate.cli import main
    from tests.probe.test_cache_probe import fake_server

    registry = Registry()
    registry.register("tiny", lambda name: TinySuite())  # type: ignore[arg-type, return-value]
    monkeypatch.setattr(warm_cold, "default_registry", lambda: registry)
    monkeypatch.setattr(probe_run, "_server", fake_server(scorer))
    args = ["probe", "warm-cold", "--engine", "sim", "--suites", "tiny", "--limit", "6", *flags]
    return main([*args, "--out", str(tmp_path)])


def test_the_cli_writes_every_file_and_exits_with_the_verdict(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli(tmp_path, monkeypatch, Words()) == 0
    report = json.loads((tmp_path / "probe.json").read_text())
    assert report["probe"] == "warm_cold" and report["n"] == 6 and report["settings"]["suites"] == ["tiny"]
    assert "warm/cold answers: PASS" in capsys.readouterr().out
    assert 'name="warm_cold"' in (tmp_path / "junit.xml").read_text()
    assert "## evalgate probe: warm/cold answers" in (tmp_path / "summary.md").read_text()
    assert "<h1>evalgate probe: warm/cold answers" in (tmp_path / "probe.html").read_text()


def test_the_cli_blocks_cache_dependent_answers_with_exit_1(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert cli(tmp_path, monkeypatch, Words(warm_changes=True)) == 1
    html = (tmp_path / "probe.html").read_text()
    assert "Flipped answers" in html and "(from the cache)" in html


def test_the_cli_says_no_isolation_with_exit_2(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert cli(tmp_path, monkeypatch, NoSalt()) == 2
    report = json.loads((tmp_path / "probe.json").read_text())
    assert report["verdict"] == "NO_ISOLATION" and "own server" in report["reasons"][1]


def test_deterministic_sets_the_budget_to_zero(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert cli(tmp_path, monkeypatch, Words(), "--deterministic") == 0
    assert json.loads((tmp_path / "probe.json").read_text())["budget"] == 0


@pytest.mark.parametrize(
    "flags",
    [["--limit", "0"], ["--budget", "1.5"], ["--alpha", "0.9"], ["--max-tokens", "0"], ["--suites", ","], []],
)
def test_bad_flags_exit_2(flags: list[str], tmp_path: Path) -> None:
    from evalgate.cli import main

    engine = [] if not flags else ["--engine", "sglang"]
    assert main(["probe", "warm-cold", *engine, *flags, "--out", str(tmp_path)]) == 2


def test_a_chat_suite_is_refused(tmp_path: Path) -> None:
    from evalgate.cli import main

    code = main(
        ["probe", "warm-cold", "--engine", "sglang", "--suites", "gsm8k_chat", "--out", str(tmp_path)]
    )
    assert code == 2
