"""CLI behaviour that needs no server: refusals exit 2 with the cause and the fix."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import pytest

from evalgate.cli import main


def write_config(path: Path, extra: str = "") -> Path:
    path.write_text(
        '[variants.a]\nmodel = "/models/f16.gguf"\n\n'
        '[variants.b]\nmodel = "/models/q8.gguf"\nargs = { "-c" = "8192" }\n' + extra
    )
    return path


def test_help_lists_commands(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["--help"])
    assert exc.value.code == 0
    out = capsys.readouterr().out
    for cmd in ("compare", "report", "suites", "setup"):
        assert cmd in out


def test_pair_differing_in_context_length_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cfg = write_config(tmp_path / "evalgate.toml")
    code = main(
        ["compare", "--config", str(cfg), "--baseline", "a", "--candidate", "b", "--suites", "arc_easy"]
    )
    err = capsys.readouterr().err
    assert code == 2
    assert "differs in more than quantization" in err
    assert "-c: baseline='32768' candidate='8192'" in err
    assert "--allow-diff" in err


def test_unknown_variant_exit_2_with_suggestion(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["compare", "--baseline", "bf16", "--candidate", "fp8k"]) == 2
    assert "did you mean 'fp8kv'" in capsys.readouterr().err


def test_unknown_suite_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cfg = tmp_path / "evalgate.toml"
    cfg.write_text('[variants.a]\nmodel = "/m.gguf"\n[variants.b]\nmodel = "/m.gguf"\n')
    assert (
        main(["compare", "--config", str(cfg), "--baseline", "a", "--candidate", "b", "--suites", "gsm8"])
        == 2
    )
    assert "did you mean gsm8k" in capsys.readouterr().err


def test_bad_config_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cfg = tmp_path / "evalgate.toml"
    cfg.write_text("[llamacpp]\nparallel = 0\n")
    assert main(["compare", "--config", str(cfg)]) == 2
    assert "llamacpp.parallel" in capsys.readouterr().err


def test_report_on_a_folder_that_is_not_a_run(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["report", str(tmp_path)]) == 2
    assert "no manifest.json" in capsys.readouterr().err


def test_attach_needs_both_urls_and_no_engine(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    base = ["compare", "--suites", "arc_easy", "--limit", "2", "--out", str(tmp_path / "r")]
    assert main([*base, "--baseline-url", "http://127.0.0.1:9"]) == 2
    assert "needs both --baseline-url and --candidate-url" in capsys.readouterr().err
    urls = ["--baseline-url", "http://127.0.0.1:9", "--candidate-url", "http://127.0.0.1:9"]
    assert main([*base, *urls, "--engine", "sglang"]) == 2
    assert "drop --engine" in capsys.readouterr().err
    assert main([*base, *urls]) == 2  # one server on both arms passes whatever the candidate is
    assert "are the same server" in capsys.readouterr().err
    urls[-1] = "http://127.0.0.1:10"
    assert main([*base, *urls]) == 3  # nothing listens on port 9: named, with the fix
    err = capsys.readouterr().err
    assert "127.0.0.1:9" in err and "fix:" in err
    assert not (tmp_path / "r").exists()  # refused before a run folder was made


def test_sequential_refuses_non_inferiority(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["compare", "--sequential", "--policy", "non-inferiority", "--margin", "2pt",
                 "--suites", "arc_easy", "--out", str(tmp_path / "r")])  # fmt: skip
    assert code == 2
    assert "--sequential tests for a difference or a regression" in capsys.readouterr().err


def _compare_parser() -> Any:
    from evalgate.cli import build_parser

    sub = next(a for a in build_parser()._actions if a.dest == "command")
    return sub.choices["compare"]  # type: ignore[attr-defined]


def test_compare_flags_are_the_request_models_fields() -> None:
    from evalgate.cli._flags import flag_name
    from evalgate.request import CompareRequest

    actions = {a.dest: a for a in _compare_parser()._actions}
    for name, info in CompareRequest.model_fields.items():
        action = actions[name]
        assert action.option_strings[0] == flag_name(name, info) and action.default is None
        assert action.help.startswith((info.description or "").replace("%", "%%")), name
    assert actions["suite_options"].option_strings == ["--suite-opt"]
    assert actions["policy"].choices == ["difference", "regression", "non-inferiority"]
    assert (
        "(default: gsm8k,arc_easy,drift)" in actions["suites"].help
        and "(default: on)" in actions["agreement_gate"].help
    )
    extra = set(actions) - set(CompareRequest.model_fields)
    assert extra == {"help", "config", "github", "dry_run"}  # steer the command, not the run


def test_request_from_flags_config_and_suite_opts(tmp_path: Path) -> None:
    from evalgate.cli.compare import request_from_args

    args = _compare_parser().parse_args(
        ["--suites", "tool_calls, gsm8k", "--allow-diff=-c", "--allow-diff=-np", "--no-agreement-gate",
         "--suite-opt", "tool_calls.prefill=false", "--suite-opt", "tool_calls.note=plain text"]
    )  # fmt: skip
    config = {"tool_calls": {"prefill": True, "k": 3}, "mmlu": {"x": 1}}  # [suites.*] in evalgate.toml
    req = request_from_args(args, config)
    assert (
        req.suites == ("tool_calls", "gsm8k") and req.allow_diff == ("-c", "-np") and not req.agreement_gate
    )
    assert req.suite_options == {
        "tool_calls": {"prefill": False, "k": 3, "note": "plain text"}
    }  # mmlu not run
    assert request_from_args(_compare_parser().parse_args([])).suites == ("gsm8k", "arc_easy", "drift")


def test_bad_suite_options_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = ["--out", str(tmp_path / "r")]
    assert main(["compare", "--suite-opt", "prefill", *out]) == 2
    assert "is not SUITE.KEY=VALUE" in capsys.readouterr().err
    assert main(["compare", "--suites", "arc_easy", "--suite-opt", "tool_calls.prefill=true", *out]) == 2
    assert "suite options for tool_calls, which this run does not include" in capsys.readouterr().err
    assert main(["compare", "--suites", "tool_calls", "--suite-opt", "tool_calls.prefil=true", *out]) == 2
    assert "tool_calls.prefil: Extra inputs are not permitted" in capsys.readouterr().err
    cfg = tmp_path / "evalgate.toml"
    cfg.write_text("[suites.tool_calls]\nprefill = 3\n")
    assert main(["compare", "--config", str(cfg), "--suites", "tool_calls", *out]) == 2
    assert "suite option tool_calls.prefill" in capsys.readouterr().err
    assert not (tmp_path / "r").exists()


def test_suites_list_never_touches_the_network(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Without --data-dir the Hub suites show no count instead of waiting on the Hub (offline, its
    client retries each dataset for about half a minute); generated suites still count."""
    import socket

    def refuse(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("suites list opened a connection")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)
    assert main(["suites", "list"]) == 0
    out = capsys.readouterr().out
    assert "--data-dir counts" in out
    assert "long_context" in out and "1500" in out


def test_suites_list_counts_a_local_copy(data_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["suites", "list", "--data-dir", str(data_dir)]) == 0
    out = capsys.readouterr().out
    assert "1319" in out  # GSM8K's test split
    assert "--data-dir counts" not in out


@pytest.mark.parametrize(("command", "resume"), [("compare", True), ("probe", False), ("report", False)])
def test_an_interrupt_names_a_resume_only_for_a_comparison(
    command: str, resume: bool, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Ctrl-C during `probe` or `report` must not tell the user to --resume a run that has none."""
    import evalgate.cli as cli

    def interrupted(args: argparse.Namespace) -> int:
        raise KeyboardInterrupt

    parser = cli.build_parser()
    monkeypatch.setattr(
        parser, "parse_args", lambda argv=None: argparse.Namespace(command=command, func=interrupted)
    )
    monkeypatch.setattr(cli, "build_parser", lambda: parser)
    assert cli.main([command]) == 3
    err = capsys.readouterr().err
    assert err.startswith("interrupted") and ("--resume" in err) == resume
