"""``evalgate export RUN --format parquet|csv``: a run's items, pairs and verdict rows as tables.

CSV cells hold server text (responses, extracted answers, reasons): a spreadsheet would run one
that starts with ``=``, ``+``, ``-``, ``@``, a tab or a carriage return as a formula
(``=HYPERLINK(...)``), so such a cell is written with a leading ``'`` (OWASP's CSV injection
rule), and rows end in CRLF (RFC 4180) so a cell holding a carriage return is quoted rather than
read as a row break. Parquet holds typed values no spreadsheet evaluates: written as they are.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from rich.console import Console

from evalgate.errors import ConfigError
from evalgate.report.frames import load_run

__all__ = ["FORMULA_START", "add_parser", "csv_safe", "run"]

FORMULA_START = ("=", "+", "-", "@", "\t", "\r")
"""A CSV cell starting with one of these is a formula to a spreadsheet."""


def add_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser(
        "export",
        help="write a run's items, pairs and verdict rows as parquet or CSV (evalgate.load_run's tables)",
        description="Write items.<fmt> (one row per item per arm), pairs.<fmt> (one row per paired item), "
        "verdict.<fmt> (one row per gate row) and, for a drift suite, drift.<fmt> (one row per document per "
        "pair of arms) from a run folder; see evalgate.report.frames for the columns.",
    )
    p.add_argument("run_dir", type=Path, help="a run folder (reports/<run-id>)")
    p.add_argument("--format", choices=("parquet", "csv"), default="parquet", help="(default: parquet)")
    p.add_argument("--out", type=Path, help="folder for the files (default: RUN/export)")
    p.set_defaults(func=run)


def _cell(value: Any) -> Any:
    return "'" + value if isinstance(value, str) and value.startswith(FORMULA_START) else value


def csv_safe(frame: Any) -> Any:
    """A copy of ``frame`` whose text cells cannot run as spreadsheet formulas (numbers untouched)."""
    out = frame.copy()
    for column in out.columns:
        if out[column].dtype.kind not in "biufcmM":  # text (object or string dtype) columns only
            out[column] = out[column].map(_cell)
    out.columns = [_cell(c) for c in out.columns]  # a metric's name comes from the samples file
    return out


def run(args: argparse.Namespace) -> int:
    frames = load_run(args.run_dir)
    out = args.out or Path(args.run_dir) / "export"
    if out.exists() and not out.is_dir():
        raise ConfigError(f"--out {out} is a file", fix="give a folder")
    out.mkdir(parents=True, exist_ok=True)
    tables = {"items": frames.items(), "pairs": frames.pairs(), "verdict": frames.verdict()}
    if len(drift := frames.drift()):  # a drift suite's documents per pair of arms
        tables["drift"] = drift
    console = Console(width=None if Console().is_terminal else 120)
    for name, frame in tables.items():
        path = out / f"{name}.{args.format}"
        if args.format == "csv":
            # CRLF rows (RFC 4180): a cell holding a bare carriage return is then quoted, not a new row
            csv_safe(frame).to_csv(path, index=False, lineterminator="\r\n")
        else:
            try:
                frame.to_parquet(path, index=False)
            except ImportError as exc:
                raise ConfigError(
                    f"writing parquet needs pyarrow ({exc})", fix="pip install pyarrow, or use --format csv"
                ) from exc
        console.print(f"{path}: {len(frame)} rows")
    return 0
