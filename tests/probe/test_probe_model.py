"""#46, the probes joined to compare's pipeline: the flags are the settings models' fields (and
appear in the generated reference), probe.json is a ``ProbeReport`` with a schema in
docs/schemas/, the page is a template, the server is settled by ``run.settle``; #44, the cache
probe's margin is a setting, recorded and printed."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from jsonschema import Draft202012Validator

from evalgate.cli import build_parser, main
from evalgate.cli._reference import cli_reference
from evalgate.config import EvalgateConfig
from evalgate.engines import ENGINES, registered_engine
from evalgate.errors import ConfigError
from evalgate.probe import ProbeReport, ProbeSettings, WarmColdSettings, run_cache_probe, summary_md
from evalgate.probe.report import probe_html
from evalgate.report.html import TEMPLATES
from evalgate.run.settle import settle_one, with_deterministic
from evalgate.schemas import json_schema
from evalgate.store.probe_report import check_report
from tests.probe.sim import SimScorer
from tests.probe.test_cache_probe import NoSalt, probe
from tests.probe.test_warm_cold import Words, cli

REPO = Path(__file__).resolve().parents[2]
SCHEMA = Draft202012Validator(json.loads((REPO / "docs" / "schemas" / "probe.schema.json").read_text()))


def _valid(report: dict[str, Any]) -> None:
    assert [e.message for e in SCHEMA.iter_errors(report)] == []
    check_report(report)


def test_cli_probe_is_the_size_of_compares_command() -> None:
    assert len((REPO / "evalgate" / "cli" / "probe.py").read_text().splitlines()) <= 120


@pytest.mark.parametrize(
    ("command", "model", "internal"),
    [("cache", ProbeSettings, {"suffix_tokens", "max_tokens"}), ("warm-cold", WarmColdSettings, set())],
)
def test_every_setting_is_a_flag_and_in_the_generated_reference(
    command: str, model: type, internal: set[str]
) -> None:
    sub = build_parser()._subparsers._group_actions[0].choices["probe"]  # type: ignore[union-attr]
    parser = sub._subparsers._group_actions[0].choices[command]
    dests = {a.dest for a in parser._actions}
    assert set(model.model_fields) - internal <= dests
    section = cli_reference().split(f"## evalgate probe {command}\n")[1].split("\n## ")[0]
    for flag in ("--engine", "--url", "--out", "--seed", "--alpha"):
        assert f"`{flag} " in section
    if command == "cache":
        assert "`--min-margin MIN_MARGIN` | float | 1.1 |" in section and "`--salt` / `--no-salt`" in section


def test_every_report_validates_against_the_published_schema(tmp_path: Path) -> None:
    assert json_schema("probe")["$id"] == "probe.schema.json"
    for report in (probe(SimScorer()), probe(SimScorer(honour_salt=False)), probe(NoSalt())):
        _valid(report)
    assert probe(SimScorer())["schema"] == 2


def test_warm_cold_probe_json_validates(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert cli(tmp_path, monkeypatch, Words()) == 0
    _valid(json.loads((tmp_path / "probe.json").read_text()))


def test_a_report_that_is_not_a_probe_report_is_refused() -> None:
    report = probe(SimScorer())
    with pytest.raises(ValueError, match="timing"):
        check_report({**report, "timing": {**report["timing"], "block_p": "low"}})
    with pytest.raises(ValueError):
        ProbeReport.model_validate({**report, "settings": WarmColdSettings().model_dump(mode="json")})


def test_the_margin_is_a_setting_recorded_and_printed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import evalgate.probe.run as probe_run
    from tests.probe.test_cache_probe import fake_server

    monkeypatch.setattr(probe_run, "_server", fake_server(SimScorer()))
    args = [
        "probe",
        "cache",
        "--engine",
        "sim",
        "--probes",
        "6",
        "--prefix-tokens",
        "64",
        "--out",
        str(tmp_path),
    ]
    assert main([*args, "--min-margin", "3", "--share", "0.1"]) == 0
    report = json.loads((tmp_path / "probe.json").read_text())
    assert report["settings"]["min_margin"] == 3 and report["margin"] == pytest.approx(3.0)
    assert "margin 3.000x" in capsys.readouterr().out
    assert "3.000x (0.1 of the gap, at least 3x)" in summary_md(report)


@pytest.mark.parametrize("value", ["0.9", "11", "nan"])
def test_a_min_margin_that_is_no_speed_up_is_exit_2(value: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["probe", "cache", "--engine", "sim", "--min-margin", value]) == 2
    assert f"--min-margin {value}" in capsys.readouterr().err


def test_no_salt_is_still_the_flag_that_shares_the_cache() -> None:
    report = asyncio.run(
        run_cache_probe(SimScorer(), ProbeSettings(salted=False, probes=4, prefix_tokens=64))
    )
    assert report["verdict"] == "BLOCK"
    args = build_parser().parse_args(["probe", "cache", "--no-salt"])
    assert args.salted is False


def test_the_page_is_rendered_from_the_template_beside_the_reports() -> None:
    assert (TEMPLATES / "probe.html.j2").is_file() and (TEMPLATES / "report.html.j2").is_file()
    page = probe_html(probe(SimScorer()))
    assert page.startswith("<!doctype html>") and "Content-Security-Policy" in page and "PASS" in page


def test_with_deterministic_sets_every_engine_as_compare_did_and_refuses_an_engine_without_it() -> None:
    cfg = with_deterministic(EvalgateConfig())
    assert all(getattr(cfg, name).deterministic for name in ENGINES)
    with pytest.raises(ConfigError, match="no setting for the engine 'sim'"):
        with_deterministic(EvalgateConfig(), ("sim",))


def test_settle_one_gives_the_engine_and_its_checked_launch_spec(tmp_path: Path) -> None:
    from evalgate.engines.fake import FakeEngine

    with registered_engine("fake1", lambda cfg: FakeEngine()):  # type: ignore[arg-type]
        engine, spec = settle_one(EvalgateConfig(), engine="fake1", variant="bf16")
        assert isinstance(engine, FakeEngine) and spec is not None
        with pytest.raises(ConfigError, match="--deterministic has no setting"):
            settle_one(EvalgateConfig(), engine="fake1", variant="bf16", deterministic=True)
