"""`evalgate kernels check`: numerics of the FP8-KV and INT4 kernels against float64.

Thin over `evalgate.kernels.check.run_check`. torch and triton are imported only inside `run`, so
`evalgate --help` works without the `kernels` extra. Exit codes: 0 every row passed, 1 a row
failed, 2 usage error or torch/triton missing.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from evalgate.gate import installed
from evalgate.kernels import FAULTS, KERNEL_NAMES

INSTALL_HINT = "install the kernels extra: pip install 'evalgate[kernels]' (torch and triton)"


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add `kernels` with its `check` subcommand to the evalgate CLI."""
    parser = sub.add_parser(
        "kernels",
        help="check the FP8-KV and INT4 kernels' numerics",
        description="Numerics checks of the FP8-KV and INT4 kernels (PyTorch reference and Triton).",
    )
    kernel_sub = parser.add_subparsers(dest="kernels_command", metavar="COMMAND")
    check = kernel_sub.add_parser(
        "check",
        help="score every kernel against float64 and exit 1 if any misses its threshold",
        description=(
            "Run each kernel (reference and Triton) on seeded data with outlier channels, report max "
            "abs error, relative Frobenius error, cosine and SQNR against float64, and time the kernels "
            "against BF16 on a GPU. Without a GPU the Triton kernels run in the interpreter."
        ),
    )
    check.add_argument(
        "--kernels",
        default=",".join(KERNEL_NAMES),
        help=f"comma-separated kernels to check (default: {','.join(KERNEL_NAMES)})",
    )
    check.add_argument("--seed", type=int, default=0, help="seed of the random data (default: 0)")
    check.add_argument(
        "--json", type=Path, default=None, metavar="PATH", help="also write the report as JSON"
    )
    check.add_argument(
        "--device", choices=("cpu", "cuda"), default=None, help="default: cuda when available, else cpu"
    )
    check.add_argument(
        "--fault",
        choices=tuple(FAULTS),
        default=None,
        help="inject a known bug to prove the check fails on it (self-test; exits 1)",
    )
    parser.set_defaults(func=run, _kernels_parser=parser)


def run(args: argparse.Namespace) -> int:
    """Run the check named on the command line; return the exit code."""
    if getattr(args, "kernels_command", None) != "check":
        parser = getattr(args, "_kernels_parser", None)
        if parser is not None:
            parser.print_help(sys.stderr)
        else:
            print("usage: evalgate kernels check [--kernels ...]", file=sys.stderr)
        return 2
    # find_spec, not import: triton must not be imported before the CPU interpreter is chosen.
    missing = [m for m in ("torch", "triton", "numpy") if not installed(m)]
    if missing:
        print(f"evalgate kernels: {', '.join(missing)} not installed; {INSTALL_HINT}", file=sys.stderr)
        return 2
    from evalgate.kernels.check import format_table, run_check

    names = [n.strip() for n in str(args.kernels).split(",") if n.strip()]
    try:
        report = run_check(device=args.device, seed=args.seed, kernels=names, fault=args.fault)
    except (ValueError, RuntimeError) as exc:
        print(f"evalgate kernels check: {exc}", file=sys.stderr)
        return 2
    print(format_table(report))
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(report.to_dict(), indent=2) + "\n", encoding="utf-8")
        print(f"report written to {args.json}")
    return 0 if report.passed else 1
