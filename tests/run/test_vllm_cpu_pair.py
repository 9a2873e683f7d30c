"""The vLLM CPU e2e tests' pair() on the fake engine (#45): it makes the folder it writes into and
reads the served model where the manifest keeps it, so those two bugs cannot hide on machines
whose CPU skips the real pairs (AVX2 only)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from evalgate.engines.fake import FakeEngine
from tests.helpers.vllm_pair import candidate_kld, pair, served_model


def test_pair_makes_its_folder_and_the_manifest_keys_it_reads_exist(
    tmp_path: Path, data_dir: Path, use: Any
) -> None:
    use(FakeEngine())
    run = ["--engine", "fake", "--suites", "drift", "--limit", "3", "--skip-kernel-check",
           "--suite-opt", "drift.decode_tokens=8"]  # fmt: skip
    code, got = pair(tmp_path / "one", data_dir, "fp8kv", config="", run_args=run)
    assert code in (0, 1) and (tmp_path / "one" / "run" / "verdict.json").is_file()
    assert served_model(got["manifest"], "candidate")  # the key the calibrated test reads
    assert candidate_kld(got["verdict"]) >= 0.0
    code, _ = pair(tmp_path / "calibrated", data_dir, "fp8kv", config="", run_args=run)  # a second subfolder
    assert code in (0, 1)
