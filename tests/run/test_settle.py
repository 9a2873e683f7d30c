"""One ``settle`` for the run and its dry run (#28): ``evalgate compare --dry-run`` refuses exactly
what ``evalgate compare`` refuses, with the same exit code and message, and prints the settings
the run then uses. Driven through the CLI, with the fake engine registered by name (``use``) so
the real run launches nothing, whatever it decides."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

import pytest

from evalgate.cli import main
from evalgate.config import EvalgateConfig
from evalgate.engines import get_engine, register_engine, registered_engine
from evalgate.engines.fake import FakeEngine
from evalgate.errors import ConfigError
from evalgate.variants import LaunchSpec

Use = Callable[[FakeEngine], FakeEngine]
FAKE = ["--engine", "fake", "--baseline", "bf16", "--candidate", "fp8"]
URL = "http://127.0.0.1:9"


class NoToolParser(FakeEngine):
    """A fake engine whose servers would not parse tool calls (SGLang without --tool-call-parser)."""

    def require_tool_parser(self, arm: str, spec: LaunchSpec) -> None:
        raise ConfigError(f"the {arm} runs without a tool-call parser", fix="add one")


CONFIG = """
[variants.tpl]
base = "bf16"
args = {"--chat-template-file" = "missing.jinja"}

[variants.wide]
base = "fp8"
args = {"-c" = "4096"}
"""


class Case(NamedTuple):
    """A refused ``compare``: its flags, what the refusal says, and the engine it runs on."""

    flags: list[str]
    says: str
    engine: Callable[[], FakeEngine] = FakeEngine


CASES: dict[str, Case] = {
    "repeats without sampling": Case([*FAKE, "--suites", "gsm8k", "--repeats", "4"], "--temperature"),
    "repeats of a suite that does not sample": Case(
        [*FAKE, "--suites", "arc_easy", "--repeats", "4", "--temperature", "0.7"],
        "arc_easy do(es) not sample",
    ),
    "repeats with --sequential": Case(
        [*FAKE, "--suites", "gsm8k", "--repeats", "4", "--temperature", "0.7", "--sequential"],
        "--sequential cannot be combined with --repeats",
    ),
    "sampling without repeats or --aa": Case(
        [*FAKE, "--suites", "gsm8k", "--temperature", "0.7"], "fix: add --repeats 2 or more"
    ),
    "sequential with --aa": Case(
        [*FAKE, "--suites", "gsm8k", "--sequential", "--aa"], "--sequential cannot be combined with --aa"
    ),
    "attach with one URL": Case(["--baseline-url", URL, "--suites", "gsm8k"], "needs both"),
    "attach to one server twice": Case(
        ["--baseline-url", URL, "--candidate-url", URL, "--suites", "gsm8k"], "same server"
    ),
    "attach with --engine": Case(
        ["--engine", "fake", "--baseline-url", URL, "--candidate-url", URL + "0", "--suites", "gsm8k"],
        "drop --engine",
    ),
    "tool_calls without a parser": Case([*FAKE, "--suites", "tool_calls"], "tool-call parser", NoToolParser),
    "long context too long for a slot": Case(
        [*FAKE, "--suites", "long_context", "--context-lengths", "4k"],
        "does not fit",
        lambda: FakeEngine(context=2048),
    ),
    "context lengths without long_context": Case(
        [*FAKE, "--suites", "gsm8k", "--context-lengths", "2k"], "does not include it"
    ),
    "a missing input file": Case(
        ["--engine", "fake", "--baseline", "tpl", "--candidate", "fp8", "--suites", "gsm8k"],
        "missing.jinja, which is not a file",
    ),
    "a pair that differs beyond quantization": Case(
        ["--engine", "fake", "--baseline", "bf16", "--candidate", "wide", "--suites", "gsm8k"],
        "differs in more than quantization",
    ),
    "--thinking with no chat suite": Case(
        [*FAKE, "--suites", "arc_easy", "--thinking", "on"], "--thinking on reaches only chat suites"
    ),
    "options for a suite not in the run": Case(
        [*FAKE, "--suites", "gsm8k", "--suite-opt", "tool_calls.prefill=false"],
        "suite options for tool_calls",
    ),
    "an lm-eval run picked for a run with servers": Case(
        [*FAKE, "--suites", "gsm8k", "--baseline-run", "2026-12-01T10-00-00"],
        "--baseline-run pick(s) one lm-eval run",
    ),
    "an engine by a wrong name": Case(["--engine", "fak", "--suites", "gsm8k"], "did you mean fake?"),
}


@pytest.mark.parametrize("case", list(CASES))
def test_dry_run_and_run_refuse_the_same(
    case: str, use: Use, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    flags, says, make = CASES[case]
    config = tmp_path / "evalgate.toml"
    config.write_text(CONFIG)
    argv = ["compare", "--config", str(config), "--skip-kernel-check", *flags]
    engine = use(make())
    dry = main([*argv, "--dry-run"]), capsys.readouterr()
    run = main([*argv, "--out", str(tmp_path / "run")]), capsys.readouterr()
    assert dry[0] == run[0] == 2, (dry, run)
    assert says in dry[1].err, dry[1].err
    assert dry[1].err == run[1].err  # the same message, word for word
    assert "dry run:" not in dry[1].out
    assert engine.launched == [] and not (tmp_path / "run" / "manifest.json").exists()


def test_dry_run_prints_the_sampling_the_run_sends(
    use: Use, tmp_path: Path, data_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`--dry-run --repeats 4 --temperature 0.7` shows the sampling, the repeats and the items;
    the run then sends exactly that on both arms."""
    engine = use(FakeEngine(sampled=lambda arm, prompt, seed: f"The answer is {seed % 3}"))
    argv = ["compare", *FAKE, "--suites", "gsm8k", "--data-dir", str(data_dir), "--limit", "3",
            "--repeats", "4", "--temperature", "0.7", "--top-p", "0.9", "--skip-kernel-check"]  # fmt: skip
    assert main([*argv, "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "sampling: temperature 0.7, top_p 0.9; seed 1234" in out, out
    assert "repeats: 4 per item" in out and "gsm8k: 3 items x 4 repeats" in out
    assert engine.launched == [] and not Path("reports").exists()
    assert main([*argv, "--out", str(tmp_path / "run")]) in (0, 1)
    sent = [c for c in engine.calls if c.kind == "generate"]
    assert len(sent) == 2 * 3 * 4 and {c.temperature for c in sent} == {0.7}


def test_sampling_without_repeats_is_refused_only_with_the_fixed_budget(
    use: Use, data_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--temperature 0.7`` at k = 1: the fixed 5 % budget would count sampling disagreement as
    change, so the run is refused (exit 2, the fix named); with --aa (the A/A arm's flips are the
    reference), an explicit --flip-budget, --no-agreement-gate, or a suite that does not sample it runs."""
    use(FakeEngine())
    base = ["compare", *FAKE, "--data-dir", str(data_dir), "--limit", "3", "--skip-kernel-check", "--dry-run"]
    assert main([*base, "--suites", "gsm8k", "--temperature", "0.7"]) == 2
    err = capsys.readouterr().err
    assert "--temperature 0.7 without --repeats" in err and "fixed 5% flip budget" in err, err
    assert "--repeats 2 or more" in err and "--aa" in err
    for flags in (["--aa"], ["--flip-budget", "0.3"], ["--no-agreement-gate"], ["--repeats", "2"]):
        assert main([*base, "--suites", "gsm8k", "--temperature", "0.7", *flags]) == 0, flags
    assert main([*base, "--suites", "arc_easy", "--temperature", "0.7"]) == 0  # log-likelihood: no sampling
    assert main([*base, "--suites", "gsm8k", "--temperature", "0"]) == 0  # greedy
    capsys.readouterr()


def test_an_engine_is_registered_for_a_block_only() -> None:
    """The fixture's registry: a name is taken for the ``with`` block and free after it; a
    built-in cannot be shadowed, and an unknown name gets the did-you-mean error."""
    cfg = EvalgateConfig()
    fake = FakeEngine()
    with registered_engine("scripted", lambda cfg: fake):
        assert get_engine("scripted", cfg) is fake
        with pytest.raises(ValueError, match="already registered"):
            register_engine("scripted", lambda cfg: fake)
    with pytest.raises(ConfigError, match="unknown engine 'scripted'") as exc:
        get_engine("scripted", cfg)
    assert exc.value.fix == "known engines: llamacpp, sglang, vllm"
    with pytest.raises(ValueError, match="already registered"):
        register_engine("llamacpp", lambda cfg: fake)
