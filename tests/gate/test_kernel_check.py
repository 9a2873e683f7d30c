"""The compare-time kernel check: which kernels a candidate needs, and a failed check blocks."""

from __future__ import annotations

from pathlib import Path

from evalgate.gate import RunData, kernel_check_for, kernel_failures, verdict_for
from evalgate.variants import parse_variant
from tests.helpers.runs import SynthSuite, build_run


def test_bf16_needs_no_kernels_and_skip_is_recorded() -> None:
    assert kernel_check_for(parse_variant("bf16")) is None
    check = kernel_check_for(parse_variant("int4+fp8kv"), skip=True)
    assert check == {"kernels": ["fp8_kv", "int4"], "skipped": "--skip-kernel-check"}
    assert kernel_failures(check) == []


def test_failed_kernel_check_blocks_a_passing_run(tmp_path: Path) -> None:
    failed = {"passed": False, "rows": [{"name": "fp8_kv.decode", "impl": "triton", "passed": False}]}
    run_dir = build_run(
        tmp_path / "r", [SynthSuite("arc_easy", (40, 0, 0, 60))], extra={"kernel_check": failed}
    )
    verdict = verdict_for(RunData(run_dir))
    assert verdict.verdict == "BLOCK" and "fp8_kv.decode (triton)" in verdict.reason
