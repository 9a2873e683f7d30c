"""Issue #43 (part 3), the probes' share: a server that answers nothing, or reports cached tokens
that are no count, is an ERROR naming it (never a PASS of "0 flips", a verdict on latency alone,
or a leak read from ``cached_tokens: -5``); flags a probe cannot use are exit 2 naming them."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence
from pathlib import Path

import pytest

from evalgate.engines.api import CacheObservation
from evalgate.probe import ProbeSettings, run_cache_probe, run_warm_cold
from tests.probe.sim import SimScorer
from tests.probe.test_warm_cold import PROMPTS, Words, cli


class Answers(SimScorer):
    """The simulated cache and latency, with each answer's text and cached tokens replaced."""

    def __init__(self, *, text: str | None = "x", cached: object = "sim", **kw: object) -> None:
        super().__init__(**kw)  # type: ignore[arg-type]
        self.text, self.cached = text, cached

    async def cached_request(
        self, prompt_ids: Sequence[int], *, salt: str | None, max_tokens: int = 1
    ) -> CacheObservation:
        o = await super().cached_request(prompt_ids, salt=salt, max_tokens=max_tokens)
        cached = o.cached_tokens if self.cached == "sim" else self.cached
        if self.cached == -5 and o.cached_tokens:  # a real hit is reported; a miss as -5
            cached = o.cached_tokens
        return CacheObservation(
            o.latency_s, cached, None if self.text is None else o.prompt_tokens, self.text
        )  # type: ignore[arg-type]


@pytest.mark.parametrize("text", [None, "", "  \n"], ids=["no-choices-or-null-text", "empty", "blank"])
def test_warm_cold_on_a_server_that_answers_nothing_is_an_error(text: str | None) -> None:
    r = asyncio.run(run_warm_cold(Answers(text=text), PROMPTS))
    assert r.status == "ERROR", r.reasons
    assert "answered nothing" in r.reasons[0]


def test_warm_cold_reads_negative_cached_tokens_as_garbage_not_a_cold_hit() -> None:
    r = asyncio.run(run_warm_cold(Answers(cached=-5), PROMPTS))
    assert r.status == "ERROR" and "-5" in r.reasons[0] and "no count" in r.reasons[0], r.reasons


def test_the_cache_probe_does_not_decide_on_latency_when_nothing_answered() -> None:
    report = asyncio.run(run_cache_probe(Answers(text=None, cached=None), ProbeSettings(prefix_tokens=64)))
    assert report["verdict"] == "ERROR" and report["exit_code"] == 3, report["reasons"]
    assert "no answer" in report["reasons"][0]


def test_negative_cached_tokens_are_no_leak() -> None:
    report = asyncio.run(run_cache_probe(Answers(cached=-5), ProbeSettings(prefix_tokens=64)))
    assert report["verdict"] == "ERROR" and report["exit_code"] == 3, report["reasons"]
    assert "-5" in report["reasons"][0] and "no count" in report["reasons"][0]


def test_warm_cold_cli_exits_3_with_the_cause_for_a_silent_server(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    class Silent(Words):
        async def cached_request(self, prompt_ids: Sequence[int], **kw: object) -> CacheObservation:
            o = await super().cached_request(prompt_ids, **kw)  # type: ignore[arg-type]
            return CacheObservation(o.latency_s, o.cached_tokens, o.prompt_tokens, None)

    assert cli(tmp_path, monkeypatch, Silent()) == 3
    assert json.loads((tmp_path / "probe.json").read_text())["verdict"] == "ERROR"
    assert "answered nothing" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("probe", "flags", "says"),
    [
        ("cache", ["--seed", "-1"], "--seed -1"),
        ("warm-cold", ["--seed", "-1"], "--seed -1"),
        ("cache", ["--alpha", "1e-300"], "--alpha 1e-300"),
        ("warm-cold", ["--alpha", "1e-300"], "--alpha 1e-300"),
        ("cache", ["--prefix-tokens", "1000000000"], "--prefix-tokens 1000000000"),
        ("cache", ["--prefix-tokens", "4096"], "does not fit the server's context of 2048"),
    ],
)
def test_flags_a_probe_cannot_use_exit_2_naming_them(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    probe: str,
    flags: list[str],
    says: str,
) -> None:
    import evalgate.probe.run as probe_run
    from evalgate.cli import main
    from tests.probe.test_cache_probe import fake_server

    if probe == "warm-cold":
        code = cli(tmp_path, monkeypatch, Words(), *flags)
    else:
        monkeypatch.setattr(probe_run, "_server", fake_server(SimScorer()))
        code = main(["probe", "cache", "--engine", "sim", "--probes", "4", "--out", str(tmp_path), *flags])
    err = capsys.readouterr().err
    assert code == 2, err
    assert says in err and "unexpected" not in err
