"""One lm-eval samples file, read as its lm-eval version wrote it, checked row by row.

Every layout lm-eval has written is read into one row shape (the one lm-eval >= 0.4.7 writes):

- lm-eval >= 0.4.7: JSON lines; each row names its ``filter`` and ``metrics``
  (lm_eval/evaluator.py, since #2517, 2024-11-28).
- lm-eval 0.4.3-0.4.6: JSON lines with no ``filter`` and no ``metrics``. A task with several
  filters (gsm8k: strict-match, flexible-extract) logs each document once per filter, every
  document under the first filter first (``for filter_key in ...: for doc_id, doc in ...``), so
  the k-th row of a document is the k-th filter of the task's ``filter_list``.
- lm-eval main of May-June 2024: ``samples_<task>_<date>.json``, one JSON array (#1766) and,
  from 2024-05-31 (#1898) to 2024-06-13 (#1930, which named it ``.jsonl``), JSON lines.
- lm-eval 0.4.0-0.4.2: ``<model_args>_<task>.jsonl`` holding one JSON array (``json.dumps(...,
  indent=2)`` in lm_eval/__main__.py), with no ``doc_hash``/``prompt_hash``: they are computed
  here as lm-eval >= 0.4.3 computes them (sha256 of the document dumped with indent 2, and of the
  first request's context), so such a run pairs with a newer run of the same documents.

A row that cannot be one document's sample is refused (exit 2) naming the file, the row and the
rule: a doc_id that is not a non-negative integer, no ``doc``, a document logged twice under one
filter (two runs appended into one file), no rows at all. Reads are bounded and only regular
files are read (a FIFO or ``/dev/zero`` would never end).
"""

from __future__ import annotations

import errno
import hashlib
import json
import stat
import zlib
from pathlib import Path
from typing import Any

from evalgate.errors import ConfigError

__all__ = [
    "MAX_RESULTS_BYTES",
    "MAX_SAMPLES_BYTES",
    "SampleFile",
    "gunzipped",
    "read_bounded",
    "read_rows",
    "regular_size",
]

MAX_SAMPLES_BYTES = 512 << 20
"""A samples file larger than this is refused: lm-eval's largest logs (MMLU-Pro, 12k documents
with their few-shot prompts) are about a tenth of it."""
MAX_RESULTS_BYTES = 64 << 20
_FIELDS = frozenset(
    {"doc_id", "doc", "target", "arguments", "resps", "filtered_resps", "filter", "metrics",
     "doc_hash", "prompt_hash", "target_hash"}
)  # fmt: skip
"""A row's keys that are not metrics (a row with no ``metrics`` list logs each metric as a key)."""
_FIX = "give the samples file lm-eval wrote for this run, unedited"


def regular_size(path: Path) -> int:
    """The size of ``path``, which must be a regular file (a link to one is fine)."""
    try:
        st = path.stat()
    except OSError as exc:
        if path.is_symlink():
            why = "is a symlink loop" if exc.errno == errno.ELOOP else "is a broken symlink"
            raise ConfigError(f"{path} {why}", fix="remove the link or point it at the file") from None
        raise ConfigError(
            f"{path} does not exist"
            if exc.errno == errno.ENOENT
            else f"cannot read {path}: {exc.strerror or exc}",
            fix="give an lm-eval --output_path folder, its results JSON or its samples files",
        ) from None
    if not stat.S_ISREG(st.st_mode):
        raise ConfigError(
            f"{path} exists but is not a regular file (a folder, FIFO, device or socket)",
            fix="give the files lm-eval wrote, or the folder that holds them",
        )
    return st.st_size


def read_bounded(path: Path, limit: int) -> bytes:
    """A regular file's bytes, refused past ``limit``."""
    if regular_size(path) > limit:
        raise ConfigError(f"{path} is larger than {limit >> 20} MiB", fix="give the file lm-eval wrote")
    try:
        with path.open("rb") as f:
            data = f.read(limit + 1)
    except OSError as exc:
        raise ConfigError(f"cannot read {path}: {exc.strerror or exc}", fix="check its permissions") from None
    if len(data) > limit:
        raise ConfigError(f"{path} is larger than {limit >> 20} MiB", fix="give the file lm-eval wrote")
    return data


def gunzipped(path: Path, data: bytes, limit: int = MAX_SAMPLES_BYTES) -> bytes:
    """``data`` itself, or, where it is gzip (``samples_*.jsonl.gz``), its one member decompressed,
    refused past ``limit`` like a plain file (a small bomb never fills the memory)."""
    if data[:2] != b"\x1f\x8b":
        return data
    inflate = zlib.decompressobj(16 + zlib.MAX_WBITS)
    try:
        out = inflate.decompress(data, limit + 1)
    except zlib.error as exc:
        raise ConfigError(f"{path} is damaged gzip ({exc})", fix=_FIX) from None
    if len(out) > limit:
        raise ConfigError(
            f"{path} decompresses to more than {limit >> 20} MiB", fix="give the file lm-eval wrote"
        )
    if not inflate.eof or inflate.unused_data:
        why = "is cut short" if not inflate.eof else "holds several gzip members"
        raise ConfigError(f"{path} {why}", fix=f"gunzip {path.name} and give the .jsonl lm-eval wrote")
    return out


def _text(path: Path, data: bytes) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise ConfigError(f"{path}:{line}: not UTF-8 text", fix=_FIX) from None


def _parse(path: Path, text: str) -> list[tuple[str, Any]]:
    """(position, row) per row: ``line n`` for JSON lines, ``row n`` for one JSON array."""
    if text.lstrip().startswith("["):
        try:
            rows = json.loads(text)
        except json.JSONDecodeError as e:
            raise ConfigError(f"{path} line {e.lineno} is not JSON ({e.msg})", fix=_FIX) from None
        except RecursionError:
            raise ConfigError(f"{path} is nested too deep to be lm-eval samples", fix=_FIX) from None
        if not isinstance(rows, list):
            raise ConfigError(f"{path} is not a JSON array of samples", fix=_FIX)
        return [(f"row {n}", row) for n, row in enumerate(rows, 1)]
    out = []
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            out.append((f"line {n}", json.loads(line)))
        except json.JSONDecodeError as e:
            raise ConfigError(f"{path} line {n} is not JSON ({e.msg})", fix=_FIX) from None
        except RecursionError:
            raise ConfigError(
                f"{path} line {n} is nested too deep to be an lm-eval sample", fix=_FIX
            ) from None
    return out


def _sha256(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _context(arguments: Any) -> str | None:
    """The first request's context: ``[[ctx, cont], ...]`` (0.4.0-0.4.2) or
    ``{"gen_args_0": {"arg_0": ctx, ...}}`` (later)."""
    first = arguments.get("gen_args_0") if isinstance(arguments, dict) else None
    if isinstance(first, dict):
        ctx = first.get("arg_0")
    elif isinstance(arguments, list) and arguments and isinstance(arguments[0], list) and arguments[0]:
        ctx = arguments[0][0]
    else:
        ctx = None
    return ctx if isinstance(ctx, str) else None


class SampleFile:
    """One task's samples: its rows in the newest row shape, and what reading them found."""

    def __init__(self, path: Path, task: str, filters: list[str] | None, *, label: str) -> None:
        data = gunzipped(path, read_bounded(path, MAX_SAMPLES_BYTES))
        self.path = path
        self.rows: list[dict[str, Any]] = []
        self.positions: list[str] = []
        """Per row, where the file holds it (``line n`` or ``row n``), for errors naming the row."""
        self.filters_by_order = False
        """True when the rows named no filter and a document's k-th row was taken as filter k."""
        self.computed_hashes = False
        """True when doc_hash/prompt_hash were not logged (lm-eval 0.4.0-0.4.2) and were computed."""
        read_rows(self, _parse(path, _text(path, data)), task, filters, label=label)
        by_doc = sorted(self.rows, key=lambda r: (r["doc_id"], str(r["filter"])))
        self.digest = hashlib.sha256(json.dumps(by_doc, sort_keys=True, default=str).encode()).hexdigest()
        """Of the rows by document (doc_id, filter), not the file's bytes: one run with its lines
        reordered (or re-compressed) is still one run."""


def read_rows(
    out: SampleFile, rows: list[tuple[str, Any]], task: str, filters: list[str] | None, *, label: str
) -> None:
    """Check and normalise ``rows`` into ``out.rows`` (``filters``: the task's filter names from
    the results JSON, None when there is none)."""
    if not rows:
        raise ConfigError(
            f"{label}: {out.path} holds no samples (task {task})",
            fix="give the samples of a run that finished, or drop the task with --suites",
        )
    seen: dict[tuple[int, str], str] = {}
    count: dict[int, int] = {}
    for pos, row in rows:
        where = f"{out.path} {pos}"
        if not isinstance(row, dict):
            raise ConfigError(f"{label}: {where} is not a JSON object (one sample per row)", fix=_FIX)
        doc_id = row.get("doc_id")
        if type(doc_id) is not int or doc_id < 0:
            raise ConfigError(
                f"{label}: {where}: doc_id {doc_id!r} is not a non-negative integer "
                "(lm-eval numbers a task's documents 0, 1, 2, ...)",
                fix=_FIX,
            )
        if not isinstance(row.get("doc"), dict):
            raise ConfigError(
                f"{label}: {where}: doc_id {doc_id} has no doc (lm-eval logs each sample with its document)",
                fix=_FIX,
            )
        if "filter" not in row:
            k = count.get(doc_id, 0)
            count[doc_id] = k + 1
            names = filters or ["none"]
            if k >= len(names):
                raise ConfigError(
                    f"{label}: {where}: doc_id {doc_id} is logged {k + 1} times in {task}, which has "
                    f"{len(names)} filter(s) ({', '.join(names)}): a document appears once per filter "
                    + ("" if filters else "(no results JSON names this task's filters) "),
                    fix=_FIX + "; one run per file (two runs appended into one file cannot be paired)",
                )
            row["filter"] = names[k]
            out.filters_by_order = out.filters_by_order or len(names) > 1
        filt = str(row["filter"])
        if (doc_id, filt) in seen:
            raise ConfigError(
                f"{label}: {where}: doc_id {doc_id} (filter {filt}) was logged before, at "
                f"{seen[doc_id, filt]}: "
                "a samples file holds each document once per filter",
                fix=_FIX + "; one run per file (two runs appended into one file cannot be paired)",
            )
        seen[doc_id, filt] = pos
        if "metrics" not in row:  # lm-eval < 0.4.7: every key beside the fixed ones is a metric
            row["metrics"] = [k for k in row if k not in _FIELDS]
        metrics = row["metrics"]
        if not isinstance(metrics, list) or not all(isinstance(m, str) for m in metrics):
            raise ConfigError(f"{label}: {where}: metrics {metrics!r} is not a list of names", fix=_FIX)
        if "doc_hash" not in row:
            row["doc_hash"] = _sha256(json.dumps(row["doc"], indent=2, ensure_ascii=False))
            out.computed_hashes = True
        if "prompt_hash" not in row and (ctx := _context(row.get("arguments"))) is not None:
            row["prompt_hash"] = _sha256(ctx)
        out.rows.append(row)
        out.positions.append(pos)
