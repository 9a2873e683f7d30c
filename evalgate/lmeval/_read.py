"""Reading what ``lm_eval --log_samples --output_path OUT`` wrote: OUT/<model>/results_<date>.json
and one samples_<task>_<date>.jsonl per task (lm_eval/loggers/evaluation_tracker.py).

A path may be that folder (searched recursively), one results JSON, or samples files. When a
folder holds several runs, the newest date is taken and the others are named in a note, so a
stale run is never mixed into a fresh one.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from evalgate.config import read_text
from evalgate.errors import ConfigError

__all__ = ["LmEvalOutput", "read_lmeval"]

_SAMPLES = re.compile(r"^samples_(?P<task>.+)_(?P<date>\d{4}-\d{2}-\d{2}T[\d\-.]+)\.jsonl$")
_RESULTS = re.compile(r"^results_(?P<date>\d{4}-\d{2}-\d{2}T[\d\-.]+)\.json$")


@dataclass
class LmEvalOutput:
    """One lm-eval run: per task, its logged samples (one dict per document and filter)."""

    where: str
    samples: dict[str, list[dict[str, Any]]]
    files: dict[str, Path]
    results: dict[str, Any] | None = None
    results_path: Path | None = None
    notes: list[str] = field(default_factory=list)

    def task_config(self, task: str) -> dict[str, Any]:
        return ((self.results or {}).get("configs") or {}).get(task) or {}

    def version(self, task: str) -> int:
        """lm-eval's task version, as evalgate's integer suite version (1 when absent)."""
        raw = ((self.results or {}).get("versions") or {}).get(task)
        try:
            return max(1, int(float(raw)))
        except (TypeError, ValueError):
            return 1


def _read_jsonl(path: Path) -> list[dict[str, Any]]:
    out = []
    for n, line in enumerate(read_text(path).splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as e:
            raise ConfigError(
                f"{path}:{n} is not JSON ({e.msg})",
                fix="give the samples_*.jsonl files lm-eval wrote with --log_samples, unedited",
            ) from None
        if not isinstance(row, dict) or "doc_id" not in row:
            raise ConfigError(
                f"{path}:{n} is not an lm-eval sample (no doc_id)",
                fix="give the samples_*.jsonl files lm-eval wrote with --log_samples",
            )
        out.append(row)
    return out


def _candidates(paths: Sequence[Path]) -> list[Path]:
    files: list[Path] = []
    for p in paths:
        if p.is_dir():
            files += sorted(q for q in p.rglob("*") if _SAMPLES.match(q.name) or _RESULTS.match(q.name))
        elif p.is_file():
            files.append(p)
        else:
            raise ConfigError(f"{p} does not exist", fix="give an lm-eval --output_path folder or its files")
    return files


def read_lmeval(paths: Sequence[Path], *, label: str) -> LmEvalOutput:
    """The newest lm-eval run among ``paths`` (``label`` names the arm in errors)."""
    files = _candidates(paths)
    samples = [(f, _SAMPLES.match(f.name)) for f in files]
    samples = [(f, m) for f, m in samples if m]
    if not samples:
        raise ConfigError(
            f"--{label}-samples {', '.join(map(str, paths))}: no samples_<task>_<date>.jsonl found",
            fix="run lm-eval with --log_samples --output_path DIR and give DIR (or its samples files)",
        )
    dates = sorted({m["date"] for _, m in samples})
    newest = dates[-1]
    out = LmEvalOutput(where=", ".join(map(str, paths)), samples={}, files={})
    if len(dates) > 1:
        out.notes.append(
            f"{label}: {len(dates)} lm-eval runs found; the newest ({newest}) is used, "
            f"not {', '.join(dates[:-1])}"
        )
    for f, m in samples:
        if m["date"] == newest:
            out.samples[m["task"]] = _read_jsonl(f)
            out.files[m["task"]] = f
    results = [f for f in files if (m := _RESULTS.match(f.name)) and m["date"] == newest]
    if results:
        out.results_path = results[0]
        try:
            out.results = json.loads(read_text(results[0]))
        except json.JSONDecodeError as e:
            raise ConfigError(
                f"{results[0]} is not JSON ({e.msg})", fix="give the file lm-eval wrote"
            ) from None
    else:
        out.notes.append(f"{label}: no results_{newest}.json beside the samples; model and config unknown")
    return out
