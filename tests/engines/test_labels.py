"""Honest labels (#44): an arm is named by what it computes in, not by the variant's name. On the
CPU default, `bf16` is F16 weights requantized from the shipped Q4_1 and `fp8kv` is llama.cpp's
q8_0 KV cache, not FP8 e4m3; a quantized baseline is said to be one."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from evalgate.cli import main
from evalgate.config import LlamaCppConfig
from evalgate.engines.fake import FakeEngine
from evalgate.engines.llamacpp import LlamaCppEngine
from evalgate.engines.llamacpp._engine import describe_gguf_launch
from evalgate.engines.sglang import SGLangEngine
from evalgate.gate._verdict import _baseline_precision
from evalgate.store.manifest import LaunchInfo, Manifest
from evalgate.variants import LaunchSpec

DEFAULT = "/root/.cache/evalgate/models/abc/SmolLM2-135M-Instruct.{}.gguf"


def test_the_cpu_default_says_f16_from_q4_1_and_q8_0_kv() -> None:
    base = describe_gguf_launch(DEFAULT.format("F16"), {"-ctk": "f16", "-ctv": "f16"})
    cand = describe_gguf_launch(DEFAULT.format("F16"), {"-ctk": "q8_0", "-ctv": "q8_0"})
    assert base.startswith("F16 weights (requantized from the Q4_1") and base.endswith("F16 KV")
    assert "q8_0 KV" in cand and "stand-in for FP8 e4m3" in cand and "bf16" not in cand.lower()
    int4 = describe_gguf_launch(DEFAULT.format("Q4_0"), {"-ctk": "f16", "-ctv": "f16"})
    assert int4.startswith("Q4_0 weights")
    own = describe_gguf_launch("/models/llama.Q4_1.gguf", {"-ctk": "q8_0", "-ctv": "f16"})
    assert own == "Q4_1 weights, K q8_0, V f16 KV"


def test_a_gpu_engine_names_its_kv_dtype_and_method() -> None:
    spec = LaunchSpec(
        "sglang", "/m", (("--kv-cache-dtype", "fp8_e4m3"), ("--quantization", "fp8")), (), frozenset()
    )
    assert SGLangEngine().describe(spec) == "fp8 weights, FP8 e4m3 KV"
    plain = LaunchSpec("sglang", "/m", (("--kv-cache-dtype", "bfloat16"),), (), frozenset())
    assert SGLangEngine().describe(plain) == "the checkpoint's own weights (no --quantization), BF16 KV"


def test_a_quantized_baseline_is_said_to_be_no_full_precision_reference() -> None:
    def manifest(label: str | None) -> Any:
        return Manifest.model_construct(launch={"baseline": LaunchInfo(model="m", label=label)})

    assert _baseline_precision(manifest("F16 weights (requantized from Q4_1), F16 KV")) == []
    (note,) = _baseline_precision(manifest("fp8 weights, FP8 e4m3 KV"))
    assert note.startswith("baseline precision: fp8 weights") and "not a full-precision reference" in note
    assert _baseline_precision(manifest(None)) == []


def test_the_run_line_and_the_manifest_carry_the_labels(
    tmp_path: Path, data_dir: Path, use: Any, capsys: Any
) -> None:
    class Labelled(FakeEngine):
        def describe(self, spec: LaunchSpec) -> str | None:
            return f"numerics of {spec.model}"

    use(Labelled())
    out = tmp_path / "run"
    main(["compare", "--engine", "fake", "--suites", "arc_easy", "--limit", "3", "--data-dir", str(data_dir),
          "--out", str(out), "--skip-kernel-check"])  # fmt: skip
    printed = capsys.readouterr().out
    manifest = json.loads((out / "manifest.json").read_text())
    label = manifest["launch"]["candidate"]["label"]
    assert label.startswith("numerics of") and f"candidate fp8kv: {label}" in printed
    assert "numerics" in (out / "report.html").read_text()


def test_llamacpp_engine_describes_its_launch_spec() -> None:
    spec = LaunchSpec(
        "llamacpp", DEFAULT.format("F16"), (("-ctk", "q8_0"), ("-ctv", "q8_0")), (), frozenset()
    )
    assert "q8_0 KV" in (LlamaCppEngine(LlamaCppConfig()).describe(spec) or "")
