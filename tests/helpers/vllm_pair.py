"""The vLLM CPU e2e tests' pair of runs (tests/e2e/test_e2e_vllm_cpu.py), kept here so that
tests/run/test_vllm_cpu_pair.py runs it on the fake engine on every machine: the folder it writes
into and the manifest keys it reads cannot hide a bug where the CPU skips the real pairs (#45)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from evalgate.cli import main

CONFIG = '[vllm]\ndevice = "cpu"\nmax_model_len = 4096\nready_timeout_s = 600\n'
RUN = ["--engine", "vllm", "--suites", "arc_easy,drift", "--limit", "5"]


def pair(
    tmp_path: Path, data_dir: Path, candidate: str, config: str = CONFIG, run_args: list[str] = RUN
) -> tuple[int, dict[str, Any]]:
    """Run bf16 against ``candidate`` in the folder ``tmp_path`` (made here: a test runs two pairs
    in subfolders of its own); (exit code, {verdict, manifest})."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    (tmp_path / "evalgate.toml").write_text(config, encoding="utf-8")
    run = tmp_path / "run"
    args = [
        "compare",
        "--config",
        str(tmp_path / "evalgate.toml"),
        "--baseline",
        "bf16",
        "--candidate",
        candidate,
    ]
    code = main([*args, *run_args, "--data-dir", str(data_dir), "--out", str(run)])
    read = {n: json.loads((run / f"{n}.json").read_text(encoding="utf-8")) for n in ("verdict", "manifest")}
    return code, read


def served_model(manifest: dict[str, Any], arm: str) -> str:
    """The model folder an arm's server was launched with (the manifest's ``launch``, not ``arms``)."""
    return str(manifest["launch"][arm]["model"])


def candidate_kld(verdict: dict[str, Any]) -> float:
    (drift,) = [d for d in verdict["drift"] if d["suite"] == "drift"]
    whole = [
        r for r in drift["rows"] if r["measure"] == "kld" and r["pair"] == "candidate" and not r.get("span")
    ]
    return max(float(r["estimate"]) for r in whole)  # the prefill and the decode path's rows
