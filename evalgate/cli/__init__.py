"""The ``evalgate`` command: one module per subcommand, each thin over library functions.

Exit codes: 0 PASS, 1 BLOCK, 2 usage or config error, 3 infrastructure error.
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from collections.abc import Sequence

from evalgate.errors import EvalgateError

__all__ = ["main"]


def build_parser() -> argparse.ArgumentParser:
    from evalgate.cli import bench, compare, kernels, report, setup, suites

    parser = argparse.ArgumentParser(
        prog="evalgate",
        description="Prove a quantized inference server answers like its baseline; block the rollout if not.",
        epilog="exit codes: 0 PASS, 1 BLOCK, 2 usage/config error, 3 infrastructure error",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for module in (compare, bench, report, suites, setup, kernels):
        module.add_parser(sub)
    return parser


def _exit_cleanly_on_sigterm() -> object:
    """SIGTERM (CI cancel, kill) unwinds like Ctrl-C, so launchers kill their servers."""

    def handler(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    if threading.current_thread() is threading.main_thread():
        return signal.signal(signal.SIGTERM, handler)
    return None


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    previous = _exit_cleanly_on_sigterm()
    try:
        return int(args.func(args))
    except EvalgateError as exc:
        print(exc.render(), file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("interrupted: completed items are kept; continue with --resume RUN_DIR", file=sys.stderr)
        return 3
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)  # type: ignore[arg-type]


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
