"""The ``evalgate`` command: one module per subcommand, each thin over library functions.

Exit codes: 0 PASS, 1 BLOCK, 2 usage or config error, 3 infrastructure error, 4 INCONCLUSIVE
(``compare --require-power``: a PASS with an UNDERPOWERED blocking row). Exit 1 means BLOCK
and nothing else: any exception no module turned into an ``EvalgateError`` exits 3 with a
one-line cause, what to do, and where its traceback was saved, never a bare traceback.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import tempfile
import threading
import traceback
from collections.abc import Sequence
from datetime import datetime, timezone
from pathlib import Path

from evalgate.errors import EvalgateError
from evalgate.redact import env_secrets, redact

__all__ = ["main"]


def build_parser() -> argparse.ArgumentParser:
    from evalgate.cli import bench, compare, export, kernels, plan_power, probe, report, setup, suites

    parser = argparse.ArgumentParser(
        prog="evalgate",
        description="Prove a quantized inference server answers like its baseline; block the rollout if not.",
        epilog="exit codes: 0 PASS, 1 BLOCK, 2 usage/config error, 3 infrastructure error, "
        "4 INCONCLUSIVE (compare --require-power)",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for module in (compare, bench, report, export, suites, plan_power, setup, kernels, probe):
        module.add_parser(sub)
    return parser


def _exit_cleanly_on_sigterm() -> object:
    """SIGTERM (CI cancel, kill) unwinds like Ctrl-C, so launchers kill their servers.

    It is turned into a SIGINT rather than raised here: inside ``asyncio.run`` a KeyboardInterrupt
    raised in whatever task happens to run leaves the other tasks and the HTTP sessions unclosed
    (tracebacks and "Unclosed client session" on stderr), while asyncio's own SIGINT handler
    cancels the main task, so the loop unwinds and closes everything before KeyboardInterrupt."""

    def handler(signum: int, frame: object) -> None:
        if callable(signal.getsignal(signal.SIGINT)):  # not ignored (nohup): asyncio's or Python's
            signal.raise_signal(signal.SIGINT)
            return
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
        print(redact(exc.render(), secrets=env_secrets()), file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print(_interrupted(getattr(args, "command", None)), file=sys.stderr)
        return 3
    except Exception as exc:  # a bug or an unforeseen input: exit 3, never 1 (BLOCK)
        print(_unexpected(exc, getattr(args, "run_dir", None)), file=sys.stderr)
        return 3
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)  # type: ignore[arg-type]


def _interrupted(command: str | None) -> str:
    """What an interrupted command kept: only a comparison has records to resume from."""
    if command == "compare":
        return "interrupted: completed items are kept; continue with --resume RUN_DIR"
    return f"interrupted: evalgate {command or ''} stopped before it finished; run it again".replace(
        "  ", " "
    )


def _unexpected(exc: Exception, run_dir: Path | None) -> str:
    """One line of cause, the fix, and the file that holds the traceback (the run's logs/ when
    there is a run folder, else a temp file); API keys and URL credentials masked in both."""
    secrets = env_secrets()
    text = redact("".join(traceback.format_exception(exc)), secrets=secrets)
    stamp = datetime.now(timezone.utc).strftime("%Y%m%d-%H%M%S")
    where: Path | str
    try:
        if run_dir is not None and Path(run_dir).is_dir():
            where = Path(run_dir) / "logs" / f"traceback-{stamp}.txt"
            where.parent.mkdir(parents=True, exist_ok=True)
            where.write_text(text, encoding="utf-8")
        else:
            fd, name = tempfile.mkstemp(prefix=f"evalgate-traceback-{stamp}-", suffix=".txt")
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                f.write(text)
            where = name
    except OSError as err:
        where = f"(not saved: {err})"
    cause = redact(f"{type(exc).__name__}: {exc}", secrets=secrets, limit=300)
    return "\n".join(
        [
            f"error: unexpected {cause}",
            "fix: this is a bug in evalgate or an input it does not check; the run's records are kept "
            "(--resume continues it); please report it with the traceback",
            f"traceback: {where}",
        ]
    )


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
