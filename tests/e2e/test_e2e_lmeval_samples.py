"""lm-eval's own CLI on the real CPU engine writes sample logs; their import gates like a live run (#22).

A live ``evalgate compare --deterministic`` of F16 against Q4_0 on 8 ARC-Easy items, then lm-eval
(``python -m evalgate.lmeval run``, via scripts/lmeval_samples.py) on exactly those items on
each variant, plus 2 GSM8K documents for a generation task; the import must pair the same items
with the same outcomes as the live run.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from evalgate.cli import main
from tests.conftest import needs_models

pytestmark = [pytest.mark.e2e, needs_models]

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "lmeval_samples.py"


def _lmeval(variant: str, out: Path, data_dir: Path, *select: str) -> None:
    cmd = [sys.executable, str(SCRIPT), "--variant", variant, "--deterministic", "--data-dir", str(data_dir),
           "--out", str(out), *select]  # fmt: skip
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]


def _row(run: Path, suite: str) -> dict:
    verdict = json.loads((run / "verdict.json").read_text())
    return next(r for r in verdict["suites"] if r["suite"] == suite and r["primary"])


def test_lmeval_samples_import_matches_the_live_pair(tmp_path: Path, data_dir: Path) -> None:
    live = tmp_path / "live"
    args = ["--suites", "arc_easy", "--limit", "8", "--deterministic", "--data-dir", str(data_dir)]
    code = main(["compare", "--baseline", "bf16", "--candidate", "int4", *args, "--out", str(live)])
    assert code in (0, 1)
    for variant in ("bf16", "int4"):
        _lmeval(
            variant, tmp_path / f"mc_{variant}", data_dir, "--tasks", "arc_easy", "--items-from", str(live)
        )
    imported = tmp_path / "imported"
    code_i = main(["compare", "--baseline-samples", str(tmp_path / "mc_bf16"),
                   "--candidate-samples", str(tmp_path / "mc_int4"), "--out", str(imported)])  # fmt: skip
    a, b = _row(live, "arc_easy"), _row(imported, "arc_easy")
    assert (b["n"], b["n10"], b["n01"], b["n11"]) == (a["n"], a["n10"], a["n01"], a["n11"])
    assert code_i == code
    live_ids = json.loads((live / "manifest.json").read_text())["suites"]["arc_easy"]["item_ids"]
    imported_ids = json.loads((imported / "manifest.json").read_text())["suites"]["arc_easy"]["item_ids"]
    assert sorted(live_ids) == sorted(imported_ids)


def test_a_generation_task_from_lmeval_imports(tmp_path: Path, data_dir: Path) -> None:
    out = tmp_path / "gen"
    _lmeval("bf16", out, data_dir, "--tasks", "gsm8k", "--limit", "2")
    run = tmp_path / "run"
    argv = ["compare", "--baseline-samples", str(out), "--candidate-samples", str(out), "--out", str(run)]
    assert main([*argv, "--same-server-ok"]) == 0  # one run on both arms: an A/A (#31)
    row = _row(run, "gsm8k")
    assert row["metric"] == "exact_match,flexible-extract" and row["n"] == 2
    recs = [json.loads(line) for line in (run / "items" / "gsm8k.baseline.jsonl").read_text().splitlines()]
    assert all(isinstance(r["response"], str) and r["response"] for r in recs)  # the generated text
    assert set(recs[0]["extracted"]) == {"strict-match", "flexible-extract"}
