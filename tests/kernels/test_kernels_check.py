"""`evalgate.kernels.check` and `evalgate kernels check`: table, JSON, exit codes, the broken-scale
fault.

The check runs the Triton kernels under TRITON_INTERPRET=1 on CPU (set before importing triton).
The variant mapping and the missing-torch path need no torch.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

import pytest

os.environ.setdefault("TRITON_INTERPRET", "1")

from evalgate.cli import kernels as kernels_cli
from evalgate.kernels import KERNEL_NAMES, kernels_for_variant


def _parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="evalgate")
    kernels_cli.add_parser(parser.add_subparsers(dest="command"))
    return parser.parse_args(["kernels", *argv])


@pytest.fixture
def torch_and_triton():
    torch = pytest.importorskip("torch")
    pytest.importorskip("numpy")
    pytest.importorskip("triton")
    return torch


def test_kernels_for_variant() -> None:
    assert kernels_for_variant(kv_fp8=True, weight_int4=False) == ["fp8_kv"]
    assert kernels_for_variant(kv_fp8=False, weight_int4=True) == ["int4"]
    assert kernels_for_variant(kv_fp8=True, weight_int4=True) == list(KERNEL_NAMES)
    assert kernels_for_variant(kv_fp8=False, weight_int4=False) == []


def test_cli_exits_2_naming_the_extra_when_torch_is_missing(monkeypatch, capsys) -> None:
    monkeypatch.setitem(sys.modules, "torch", None)  # makes `import torch` raise ImportError
    assert kernels_cli.run(_parse("check")) == 2
    assert "evalgate[kernels]" in capsys.readouterr().err


def test_cli_without_subcommand_is_a_usage_error() -> None:
    assert kernels_cli.run(_parse()) == 2


_CLI = (
    "import argparse, sys; from evalgate.cli import kernels as k; p = argparse.ArgumentParser();"
    "k.add_parser(p.add_subparsers()); sys.exit(k.run(p.parse_args(sys.argv[1:])))"
)


def _cli_subprocess(*argv: str, timeout: int = 300) -> subprocess.CompletedProcess[str]:
    """`evalgate kernels ...` in a fresh process without TRITON_INTERPRET, as a user runs it."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    cmd = [sys.executable, "-c", _CLI, "kernels", *argv]
    return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)


def test_cli_pass_writes_json_and_exits_0(torch_and_triton, tmp_path) -> None:
    """Fresh process, no TRITON_INTERPRET: the CLI must pick the interpreter before importing triton."""
    out = tmp_path / "k" / "report.json"
    proc = _cli_subprocess("check", "--kernels", "int4", "--device", "cpu", "--json", str(out))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "int4.w4a16" in proc.stdout and "PASS" in proc.stdout
    report = json.loads(out.read_text())
    assert report["passed"] is True and report["kernels"] == ["int4"]
    assert report["triton_mode"] == "interpreter"
    assert report["roundings"] == []  # the e4m3 roundings come with fp8_kv only
    impls = {(r["name"], r["impl"]) for r in report["rows"]}
    assert {("int4.w4a16", "triton"), ("int4.w4a16", "reference"), ("int4.quant", "reference")} <= impls
    for row in report["rows"]:
        assert {"kernel", "name", "impl", "shape", "metrics", "threshold", "passed"} <= set(row)
        assert set(row["metrics"]) >= {"max_abs", "rel_fro", "cosine", "sqnr_db"}
        assert row["passed"] and row["metrics"]["sqnr_db"] >= row["threshold"]["sqnr_db"]
        if row["impl"] == "triton":
            assert "sqnr_vs_ref_db" in row["threshold"]


def test_cli_broken_fp8_scale_exits_1(torch_and_triton, capsys) -> None:
    code = kernels_cli.run(
        _parse("check", "--kernels", "fp8_kv", "--device", "cpu", "--fault", "fp8_scale_x4")
    )
    assert code == 1
    out = capsys.readouterr().out
    assert "FAIL" in out and "fault=fp8_scale_x4" in out


def test_monkeypatched_scale_function_fails_the_check(torch_and_triton, monkeypatch) -> None:
    """A scale bug in the library itself (amax / 1792 instead of / 448) saturates the cache."""
    from evalgate.kernels.check import format_table, run_check
    from evalgate.kernels.fp8_kv import e4m3

    real = e4m3.kv_scale
    monkeypatch.setattr(
        e4m3, "kv_scale", lambda x, *, granularity="token_head": real(x, granularity=granularity) / 4
    )
    report = run_check(device="cpu", kernels=["fp8_kv"])
    assert not report.passed and report.fault is None
    failed = {r.name for r in report.rows if not r.passed}
    assert {"fp8_kv.quant", "fp8_kv.decode", "fp8_kv.paged_decode"} <= failed
    triton_rows = [r for r in report.rows if r.impl == "triton"]
    assert all(r.metrics["sqnr_vs_ref_db"] >= 40 for r in triton_rows)  # both implementations wrong alike
    assert "FAIL" in format_table(report)
    assert json.loads(json.dumps(report.to_dict()))["passed"] is False
    # The e4m3 roundings side by side are reported with fp8_kv and never gate it.
    assert [r.data for r in report.roundings] == ["normal", "normal", "outliers", "outliers"]
    assert "toward_zero rel_fro" in format_table(report)
    roundings = report.to_dict()["roundings"]
    assert {"name", "data", "shape", "metrics", "ratio"} <= set(roundings[0])
    assert set(roundings[0]["metrics"]) == {"nearest", "toward_zero"}


def test_unknown_kernel_and_fault_are_usage_errors(torch_and_triton, capsys) -> None:
    assert kernels_cli.run(_parse("check", "--kernels", "fp8kv")) == 2
    assert "did you mean fp8_kv" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        _parse("check", "--fault", "nope")


@pytest.mark.gpu
def test_check_on_gpu_compiles_and_times(torch_and_triton, tmp_path) -> None:
    """Full shapes with compiled Triton kernels and BF16 timings (needs a CUDA GPU)."""
    if not torch_and_triton.cuda.is_available():
        pytest.skip("no CUDA GPU")
    out = tmp_path / "gpu.json"
    proc = _cli_subprocess("check", "--device", "cuda", "--json", str(out), timeout=900)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    report = json.loads(out.read_text())
    assert report["triton_mode"] == "compiled" and report["timings"]
