"""A copy of an lm-eval samples folder with some rows changed, for the import tests that feed
evalgate values no model logs."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

from evalgate.cli import main

__all__ = ["LMEVAL", "compare_to_bf16", "edited_samples"]

LMEVAL = Path(__file__).resolve().parents[1] / "fixtures" / "lmeval"
"""The lm-eval samples fixtures: bf16/ and int4/ (arc_easy and gsm8k), rolling/, wild/."""


def edited_samples(
    tmp_path: Path, src: Path, task: str, change: Callable[[dict[str, Any]], Any], doc_id: int | None = 5
) -> Path:
    """``src`` copied to ``tmp_path/edited-<name>`` with ``change`` applied to the row of ``doc_id``
    (every row when None) of its ``samples_<task>_*.jsonl``; NaN is written as NaN, as lm-eval does."""
    dst = tmp_path / f"edited-{src.name}"
    shutil.copytree(src, dst)
    (path,) = dst.rglob(f"samples_{task}_*.jsonl")
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    for r in rows:
        if doc_id is None or r["doc_id"] == doc_id:
            change(r)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return dst


def compare_to_bf16(candidate: Path, out: Path) -> int:
    """``evalgate compare`` of the bf16 samples fixture against ``candidate``'s samples; its exit code."""
    return main(["compare", "--baseline-samples", str(LMEVAL / "bf16"), "--candidate-samples", str(candidate),
                 "--out", str(out)])  # fmt: skip
