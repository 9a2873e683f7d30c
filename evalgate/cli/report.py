"""``evalgate report RUN_DIR``: re-render every report from a run folder's files alone."""

from __future__ import annotations

import argparse
from pathlib import Path

from rich.console import Console

from evalgate.report import github, render_run
from evalgate.report.terminal import print_verdict

__all__ = ["add_parser", "run"]


def add_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("report", help="recompute the verdict and re-render reports from a run folder")
    p.add_argument("run_dir", type=Path, help="a run folder (reports/<run-id>)")
    p.add_argument(
        "--github",
        action="store_true",
        help="write the GitHub step summary, outputs and annotations (on by default when GITHUB_ACTIONS=true)",
    )
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    console = Console(width=None if Console().is_terminal else 120)
    _, verdict = render_run(args.run_dir)
    print_verdict(verdict, console, run_dir=str(args.run_dir))
    if github.enabled(args.github):
        github.publish(args.run_dir, verdict)
    return verdict.exit_code
