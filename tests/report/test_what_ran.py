"""What ran, per arm (#45) and the labels and banner of #44, through real runs on the fake engine:
the side-by-side table in verdict.json, report.html, summary.md and the terminal; a candidate's
fallback named at the top; --expect refused before the arm's first item; an attached arm labelled
by what its server reports (or "unknown"); the declared-differences banner; and launched SGLang
and vLLM pairs that still refuse an undeclared difference."""

from __future__ import annotations

import html
import json
from pathlib import Path
from typing import Any

import pytest

from evalgate.cli import main
from evalgate.config import SGLangConfig, VLLMConfig
from evalgate.engines import ServerHandle
from evalgate.engines.fake import FakeEngine
from evalgate.engines.sglang import SGLangEngine
from evalgate.engines.vllm import VLLMEngine
from evalgate.errors import ConfigError
from evalgate.store.provenance import Provenance
from evalgate.variants import require_only_quantization, variant_from_config

F16 = Provenance(kv_cache_dtype="f16", attention_backend="flash_attn", weight_format="F16", source="log")
Q8 = Provenance(kv_cache_dtype="q8_0", attention_backend="flash_attn", weight_format="F16", source="log")


class Reporting(FakeEngine):
    """The fake engine, its servers reporting ``facts`` per arm (the handle's name)."""

    def __init__(self, facts: dict[str, Provenance]) -> None:
        super().__init__()
        self.facts = facts

    def provenance(self, handle: ServerHandle) -> Provenance:
        return self.facts.get(handle.name, Provenance())


def compare(tmp_path: Path, data_dir: Path, *flags: str) -> tuple[int, Path]:
    out = tmp_path / "run"
    code = main(["compare", "--engine", "fake", "--suites", "arc_easy", "--limit", "3", "--data-dir",
                 str(data_dir), "--out", str(out), "--skip-kernel-check", *flags])  # fmt: skip
    return code, out


def banner(out: Path) -> str:
    """report.html's header: the top of the report, above the navigation."""
    return (out / "report.html").read_text().split("<nav>")[0]


def test_every_report_shows_what_each_server_reported(
    tmp_path: Path, data_dir: Path, use: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    use(Reporting({"baseline": F16, "candidate": Q8}))
    code, out = compare(tmp_path, data_dir)
    printed = capsys.readouterr().out
    assert code == 0, printed
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["arms"]["candidate"]["server"]["provenance"]["kv_cache_dtype"] == "q8_0"
    rows = {r["key"]: r for r in json.loads((out / "verdict.json").read_text())["what_ran"]}
    assert (rows["kv_cache_dtype"]["baseline"], rows["kv_cache_dtype"]["candidate"]) == ("f16", "q8_0")
    assert rows["kv_cache_dtype"]["differs"] and not rows["attention_backend"]["differs"]
    page = (out / "report.html").read_text()
    assert 'id="what-ran"' in page and '<tr class="differs"><th>KV cache dtype</th>' in page
    assert "| **KV cache dtype** | f16 | q8\\_0 |" in (out / "summary.md").read_text()
    assert "what ran" in printed and "q8_0" in printed and "warning:" not in printed


def test_a_fallback_is_named_at_the_top(
    tmp_path: Path, data_dir: Path, use: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    fell = Provenance(kv_cache_dtype="bfloat16", attention_backend="torch_native", source="log")
    use(Reporting({"baseline": F16, "candidate": fell}))
    _, out = compare(tmp_path, data_dir, "--candidate", "fp8kv")
    printed = capsys.readouterr().out
    warnings = json.loads((out / "verdict.json").read_text())["warnings"]
    assert (
        warnings[0]
        == "fallback: the candidate asked for an FP8 KV cache but its server reports a bfloat16 cache"
    )
    assert "attention backend is torch_native, the baseline's flash_attn" in warnings[1]
    assert warnings[0] in banner(out) and "warning: " + warnings[0] in printed
    summary = (out / "summary.md").read_text()
    assert summary.index("FP8 KV cache but its server") < summary.index("| suite |")


def test_a_baseline_that_reports_fp8_under_auto_is_no_reference(
    tmp_path: Path, data_dir: Path, use: Any
) -> None:
    use(Reporting({"baseline": Provenance(kv_cache_dtype="fp8_e4m3"), "candidate": Q8}))
    _, out = compare(tmp_path, data_dir)
    notes = json.loads((out / "verdict.json").read_text())["notes"]
    assert "baseline precision: FP8, not a full-precision reference" in notes


def test_expect_refuses_a_mismatch_before_the_arm_runs(
    tmp_path: Path, data_dir: Path, use: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    use(Reporting({"baseline": F16, "candidate": Provenance(kv_cache_dtype="bfloat16")}))
    code, out = compare(tmp_path, data_dir, "--expect", "candidate.kv_cache_dtype=fp8_e4m3")
    err = capsys.readouterr().err
    assert code == 2, err
    assert "reports KV cache dtype 'bfloat16', but --expect candidate.kv_cache_dtype=fp8_e4m3 expected" in err
    assert not list((out / "items").glob("*.candidate.jsonl"))  # no item of that arm was sent
    recorded = json.loads((out / "manifest.json").read_text())["arms"]["candidate"]["server"]["provenance"]
    assert recorded["kv_cache_dtype"] == "bfloat16"  # what it reported is on disk


def test_expect_refuses_what_the_server_does_not_report(
    tmp_path: Path, data_dir: Path, use: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    use(Reporting({"baseline": F16, "candidate": Q8}))
    code, _ = compare(tmp_path, data_dir, "--expect", "candidate.batch_invariant=on")
    err = capsys.readouterr().err
    assert (
        code == 2
        and "does not report its batch-invariant, so --expect" in err
        and "could not be confirmed" in err
    )
    code, _ = compare(tmp_path / "again", data_dir, "--expect", "candidate.kv_dtype=fp8")
    assert code == 2 and "did you mean kv_cache_dtype?" in capsys.readouterr().err


def test_expect_accepts_a_family_name(tmp_path: Path, data_dir: Path, use: Any) -> None:
    use(Reporting({"baseline": F16, "candidate": Provenance(kv_cache_dtype="fp8_e4m3")}))
    code, _ = compare(tmp_path, data_dir, "--expect", "candidate.kv_cache_dtype=FP8")
    assert code != 2


def test_an_attached_arm_is_labelled_by_what_its_server_reports(
    tmp_path: Path, data_dir: Path, use: Any
) -> None:
    use(Reporting({"baseline": Provenance(weight_format="Q4_0", kv_cache_dtype="f16")}))
    _, out = compare(tmp_path, data_dir)
    manifest = json.loads((out / "manifest.json").read_text())
    manifest["engine"] = "external"  # as attach mode records it: nothing launched, no label known
    for arm in ("baseline", "candidate"):
        manifest["launch"][arm]["label"] = None
        manifest["arms"][arm]["server"]["attached"] = True
    (out / "manifest.json").write_text(json.dumps(manifest))
    assert main(["report", str(out)]) in (0, 1, 3)
    page = (out / "report.html").read_text()
    title = page.split("<title>")[1].split("</title>")[0]
    assert title.endswith("attached: Q4_0 weights, f16 KV vs attached: unknown")
    heading = banner(out).split("<h1>")[1].split("</h1>")[0]
    assert heading == "attached: unknown against attached: Q4_0 weights, f16 KV"  # not "fp8kv against bf16"
    assert '<th>numerics</th><td class="mono">attached: Q4_0 weights, f16 KV</td>' in page


def test_declared_differences_are_shown_at_the_top(
    tmp_path: Path, data_dir: Path, use: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "evalgate.toml"
    config.write_text('[variants.tp2]\nargs = {"--tp" = "2"}\n[variants.tp1]\nargs = {"--tp" = "1"}\n')
    use(Reporting({}))
    flags = ("--config", str(config), "--baseline", "tp2", "--candidate", "tp1")
    code, _ = compare(tmp_path / "refused", data_dir, *flags)
    assert code == 2 and "differs in more than quantization" in capsys.readouterr().err
    code, out = compare(tmp_path, data_dir, *flags, "--allow-diff=--tp")
    printed = capsys.readouterr().out
    line = "declared differences: --tp 2 -> 1 (--allow-diff)"
    assert json.loads((out / "verdict.json").read_text())["warnings"] == [line]
    assert line in html.unescape(banner(out)) and f"warning: {line}" in printed
    assert line in html.unescape((out / "summary.md").read_text().split("| suite |")[0])


@pytest.mark.parametrize(
    ("engine", "flag"),
    [
        (SGLangEngine(SGLangConfig(model_path="/m")), "--tp-size"),
        (VLLMEngine(VLLMConfig(model="/m")), "--tensor-parallel-size"),
    ],
    ids=["sglang", "vllm"],
)
def test_a_launched_gpu_pair_refuses_an_undeclared_difference(engine: Any, flag: str) -> None:
    two = engine.launch_spec(variant_from_config("tp2", {"args": {flag: "2"}}, {}))
    one = engine.launch_spec(variant_from_config("tp1", {"args": {flag: "1"}}, {}))
    with pytest.raises(ConfigError, match="differs in more than quantization") as refused:
        require_only_quantization(two, one)
    assert flag in refused.value.render()
    require_only_quantization(two, one, allow=[flag])  # declared: allowed


def test_scales_recorded_as_given_and_reported_as_one_are_a_fallback(
    tmp_path: Path, data_dir: Path, use: Any
) -> None:
    """The scales file an FP8 arm was given is a typed fact (``KvScales``) read by field."""
    use(Reporting({"baseline": F16, "candidate": Q8.model_copy(update={"kv_scales": "1.0"})}))
    _, out = compare(tmp_path, data_dir, "--candidate", "fp8kv")
    manifest = json.loads((out / "manifest.json").read_text())
    manifest["arms"]["candidate"]["server"]["kv_scales"] = {"file": "/ckpt/kv_scales.json", "scale": "1.0"}
    (out / "manifest.json").write_text(json.dumps(manifest))
    main(["report", str(out)])
    warnings = json.loads((out / "verdict.json").read_text())["warnings"]
    assert "fallback: KV scales were given to the candidate but its server reports scales of 1.0" in warnings
