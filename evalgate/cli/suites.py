"""``evalgate suites list``: every suite with its metrics, item count, data source and options."""

from __future__ import annotations

import argparse
from pathlib import Path

from rich.console import Console
from rich.table import Table

from evalgate.suites import Suite, SuiteOptions, default_registry, options_help

__all__ = ["add_parser", "run"]


def add_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("suites", help="list the suites")
    p.add_argument("action", choices=["list"], help="list")
    p.add_argument("--data-dir", type=Path, help="local copy of the benchmark data (layout of shared/data)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    reg = default_registry()
    options = SuiteOptions(data_dir=args.data_dir)
    table = Table()
    for col in ("suite", "metrics (primary first)", "items (full)", "source", "options (--suite-opt)"):
        table.add_column(col)
    for name in reg.names():
        if ":" in name:
            table.add_row(name, "pass", "-", "your folder", "")
            continue
        suite = reg.get(name)
        source = suite.source(options)
        opts = "\n".join(options_help(type(suite.settings))) if suite.settings is not None else ""
        table.add_row(name, ", ".join(suite.metrics), _size(suite, options, source), source, opts)
    Console(width=None if Console().is_terminal else 140).print(table)
    return 0


def _size(suite: Suite, options: SuiteOptions, source: str) -> str:
    """The item count, read from local data only: a listing never waits on the network (offline,
    the Hub's client retries each dataset for about half a minute)."""
    if source.startswith("hub:"):
        return "- (--data-dir counts)"
    try:
        return str(suite.size(options))
    except Exception as exc:  # a missing local dataset should not hide the other suites
        return f"unavailable ({type(exc).__name__})"
