"""``evalgate plan-power``: how many items each suite needs before a run, at the gate's real level."""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from evalgate.errors import ConfigError
from evalgate.gate import POLICIES, PlanRow, parse_margin, plan_power
from evalgate.request import DEFAULT_SUITES, MIN_ALPHA, parse_context_lengths
from evalgate.suites import SuiteOptions, default_registry
from evalgate.user_files import read_text, require_regular_file

__all__ = ["add_parser", "run"]


def add_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser(
        "plan-power", help="items per suite for 80 %% power at the level the gate tests at (before a run)"
    )
    p.add_argument("--suites", default=",".join(DEFAULT_SUITES), help="comma-separated suites")
    p.add_argument(
        "--mde", required=True, help="the change to detect (non-inferiority: the margin): 2pt or 0.02"
    )
    p.add_argument(
        "--flip-rate", type=float, default=None, help="share of items whose answer changes (default 0.05)"
    )
    p.add_argument(  # dest not run_dir: main() saves a traceback into args.run_dir
        "--from", dest="from_dir", metavar="RUN_DIR", type=Path,
        help="take each suite's flip rate from a run's verdict.json (its A/A rows when it ran with --aa)",
    )  # fmt: skip
    p.add_argument(
        "--context-lengths", metavar="1k,2k,...",
        help="long_context's lengths (k = 1024): over two or more, its longest-length row is gated and "
        "planned too (default: 1k,2k,4k)",
    )  # fmt: skip
    p.add_argument("--alpha", type=float, default=0.05, help="family-wise error rate")
    p.add_argument("--power", type=float, default=0.8)
    p.add_argument("--policy", choices=POLICIES, default="difference")
    p.add_argument("--no-agreement-gate", dest="agreement_gate", action="store_false")
    p.add_argument(
        "--data-dir",
        type=Path,
        help="local copy of the benchmark data, for each suite's size (never downloaded here)",
    )
    p.set_defaults(func=run)


MIN_MDE = 0.001
"""The smallest change to plan for (0.1 pt): it already needs more items than any benchmark has,
and at 1e-300 the item count is no number at all."""


GRADED = "graded: each differing item counted as a whole-range change"
"""What a graded (sign-flip) row's plan assumes: its share of differing items taken as a flip rate,
as if each differed by the metric's whole range (a per-item mean under --repeats, an F1), which
is the binary model; smaller differences would need fewer items."""


def _rates(run_dir: Path | None, names: list[str], default: float | None) -> dict[str, tuple[float, str]]:
    if run_dir is None:
        rate = 0.05 if default is None else default
        return {
            s: (rate, "--flip-rate" if default is not None else "default 5 %, the flip budget") for s in names
        }
    path = Path(run_dir) / "verdict.json"
    require_regular_file(path, "--from", fix="--from takes a run folder that has a verdict.json")
    doc = _verdict(path)
    aa, cand = _flips(doc, path, "aa"), _flips(doc, path, "suites")
    graded = {
        r.get("suite")
        for r in doc.get("suites") or []
        if isinstance(r, dict) and r.get("test") == "sign-flip"
    }
    out = {}
    for s in names:
        if s in aa:
            out[s] = (float(aa[s]), f"A/A of {run_dir.name}")
        elif s in cand:
            out[s] = (float(cand[s]), f"candidate of {run_dir.name} (no A/A)")
        else:
            out[s] = (0.05 if default is None else default, "not in that run: default")
        if s in graded:
            out[s] = (out[s][0], f"{out[s][1]}; graded (see below)")
    return out


def _longest_rates(run_dir: Path | None, names: list[str]) -> dict[str, tuple[float, str]]:
    """Each long-context suite's flip rate at its longest length, from a run's ``lengths`` rows."""
    if run_dir is None:
        return {}
    doc = _verdict(Path(run_dir) / "verdict.json")
    out = {}
    for section in doc.get("lengths") or []:
        rows = section.get("rows") if isinstance(section, dict) else None
        if section.get("suite") in names and isinstance(rows, list) and rows and isinstance(rows[-1], dict):
            rate = rows[-1].get("flip_rate")
            if isinstance(rate, (int, float)) and not isinstance(rate, bool) and 0 <= rate <= 1:
                at = rows[-1].get("context_length")
                out[section["suite"]] = (float(rate), f"candidate of {Path(run_dir).name} at {at} tokens")
    return out


def _verdict(path: Path) -> dict[str, Any]:
    """A verdict.json evalgate wrote, as a JSON object; anything else is refused."""
    try:
        doc: Any = json.loads(read_text(path))
    except json.JSONDecodeError as exc:
        raise _refuse(path, f"is not JSON ({exc.msg}, line {exc.lineno})") from None
    if not isinstance(doc, dict):
        raise _refuse(path, f"holds a JSON {type(doc).__name__}, not an object")
    return doc


def _refuse(path: Path, what: str) -> ConfigError:
    return ConfigError(
        f"--from {path} {what}, so it is no verdict.json evalgate wrote",
        fix="give the folder of a finished `evalgate compare` run, or --flip-rate",
    )


def _flips(doc: dict[str, Any], path: Path, key: str) -> dict[str, float]:
    """Each primary row's flip rate under ``key``, from a verdict.json evalgate wrote; anything
    else (a row without a suite or a rate in [0, 1]) is refused."""

    def refuse(what: str) -> ConfigError:
        return _refuse(path, what)

    rows = doc.get(key) or []
    if not isinstance(rows, list) or not all(isinstance(r, dict) for r in rows):
        raise refuse(f"has {key!r} that is not a list of rows")
    out: dict[str, float] = {}
    for r in (r for r in rows if r.get("primary")):
        rate = r.get("flips")
        if (
            not isinstance(r.get("suite"), str)
            or isinstance(rate, bool)
            or not isinstance(rate, (int, float))
        ):
            raise refuse(f"has a {key!r} row without 'suite' and a numeric 'flips'")
        if not (math.isfinite(rate) and 0 <= rate <= 1):
            raise refuse(f"gives {r['suite']} a flip rate of {rate}, not a rate in [0, 1]")
        out[r["suite"]] = float(rate)
    return out


def run(args: argparse.Namespace) -> int:
    mde, relative = parse_margin(args.mde)
    if relative:
        raise ConfigError(
            f"--mde {args.mde}: a relative change has no fixed item count", fix="use 2pt or 0.02"
        )
    if mde < MIN_MDE:
        raise ConfigError(
            f"--mde {args.mde} is below {MIN_MDE * 100:g} pt: no benchmark has the items to detect it",
            fix="plan for a change of at least 0.1 pt, e.g. --mde 2pt",
        )
    if not MIN_ALPHA <= args.alpha < 1 or not 0.5 <= args.power < 1:  # nan fails both
        raise ConfigError(
            f"--alpha {args.alpha:g} must be from {MIN_ALPHA:g} to below 1 and --power {args.power:g} from "
            "0.5 to below 1",
            fix="e.g. --alpha 0.05 --power 0.8",
        )
    if args.flip_rate is not None and not 0 <= args.flip_rate <= 1:
        raise ConfigError(f"--flip-rate {args.flip_rate} is not a rate", fix="e.g. --flip-rate 0.05")
    reg = default_registry()
    asked = parse_context_lengths(args.context_lengths) if args.context_lengths is not None else ()
    options = SuiteOptions(data_dir=args.data_dir, context_lengths=asked)
    names = [s.strip() for s in args.suites.split(",") if s.strip()]
    if not names:
        raise ConfigError(
            f"--suites {args.suites!r} names no suite", fix="pass suite names, e.g. --suites arc_easy,gsm8k"
        )
    if args.data_dir is not None and not args.data_dir.is_dir():
        raise ConfigError(
            f"--data-dir {args.data_dir} is not a folder",
            fix="give the folder that holds the benchmark data, or drop --data-dir (sizes unknown)",
        )
    suites: dict[str, tuple[str, int | None]] = {}
    lengths: dict[str, tuple[int, ...]] = {}
    for name in names:  # a drift suite counts in the family (its budget rows) but has no row here
        suite = reg.get(name)
        if suite.plans_lengths:  # long context: its longest-length row is gated too
            lengths[name] = tuple(suite.lengths(options))  # type: ignore[attr-defined]
        size: int | None = None
        if args.data_dir is not None:  # never the Hub: planning needs no download
            try:
                size = suite.size(options)
            except Exception:  # no data at hand: the plan still says how many items are needed
                size = None
        suites[name] = ("drift" if suite.metric_kind == "drift" else suite.kind, size)
    if all(kind == "drift" for kind, _ in suites.values()):
        raise ConfigError(
            f"--suites {','.join(names)}: a drift suite has no accuracy row to plan (its budget rows are "
            "bootstrapped over documents)",
            fix="name an accuracy suite beside it, e.g. --suites gsm8k,drift",
        )
    if args.context_lengths and not lengths:
        raise ConfigError(
            "--context-lengths sets long_context's lengths, and --suites does not include it",
            fix="add long_context to --suites, or drop --context-lengths",
        )
    tests, rows = plan_power(
        suites, mde=mde, flip_rates=_rates(args.from_dir, names, args.flip_rate), alpha=args.alpha,
        power=args.power, policy=args.policy, agreement_gate=args.agreement_gate, lengths=lengths,
        longest_rates=_longest_rates(args.from_dir, list(lengths)),
    )  # fmt: skip
    console = Console(width=None if Console().is_terminal else 140)
    level = rows[0].level if rows else args.alpha
    sided = "two-sided" if args.policy == "difference" else "one-sided"
    if args.policy == "non-inferiority":
        console.print(
            f"non-inferiority at margin {mde * 100:g} pt: each suite on its own at one-sided alpha {level:g}"
        )
    else:
        console.print(
            f"{tests} tests in the Holm family: each suite's test must reach alpha {args.alpha:g}/{tests} = "
            f"{level:.2g} ({sided}) at Holm's first step, for {args.power:.0%} power at {mde * 100:g} pt"
        )
    table = Table()
    for col in (
        "suite",
        "flip rate",
        "items needed",
        "items in suite",
        "whole suite detects",
        "flip rate from",
    ):
        table.add_column(col, no_wrap=col == "suite")
    for r in rows:
        have = "unknown (--data-dir)" if r.available is None else str(r.available)
        if r.available is not None and r.available < r.needed:
            have += " (too few)"
        detects = "-" if r.mde_available is None else f"{r.mde_available * 100:.1f} pt"
        name = r.suite if r.longest is None else f"{r.suite} longest ({r.longest} tokens)"
        table.add_row(name, f"{r.flip_rate:.1%}", str(r.needed), have, detects, r.flip_source)
    console.print(table)
    for line in assumptions(
        rows, lengths, alpha=args.alpha, power=args.power, policy=args.policy, tests=tests
    ):
        console.print(line, soft_wrap=True)
    return 0


def assumptions(
    rows: list[PlanRow],
    lengths: dict[str, tuple[int, ...]],
    *,
    alpha: float,
    power: float,
    policy: str,
    tests: int,
) -> list[str]:
    """What the items needed and the MDE ("whole suite detects") assume, in words."""
    if not rows:
        return []
    sided = "two-sided" if policy == "difference" else "one-sided"
    level = rows[0].level
    at = f"alpha {level:.2g}" if policy == "non-inferiority" else f"alpha {alpha:g}/{tests} = {level:.2g}"
    change = (
        "nothing else changes, and the items needed show the lower bound above -margin (--mde)"
        if policy == "non-inferiority"
        else "a change of --mde comes on top of it, all one way (Connor 1987, the model a run's MDE uses)"
    )
    out = [
        f"assumes: each suite's flip rate (the share of items whose answer changes without any real change: "
        f"the discordant share the pilot run under 'flip rate from' showed, or the default) stays, {change}; "
        f"independent items; {sided} {at} for each suite's row; {power:.0%} power"
    ]
    if any(r.longest is not None for r in rows):
        out.append(
            "longest-length rows: one-sided (the candidate worse) at the same level, on the items of the longest "
            "length alone; long_context's --limit is items per length, so it needs the larger of that row's items "
            "and its pooled row's divided by the lengths: "
            + ", ".join(_per_length(s, rows, len(set(ls))) for s, ls in lengths.items() if len(set(ls)) >= 2)
        )
    if policy == "non-inferiority" and any(len(set(ls)) >= 2 for ls in lengths.values()):
        out.append(
            "non-inferiority: a long-context suite's longest-length row only blocks on a loss beyond the margin; "
            "it is counted in the family, not sized"
        )
    if any("graded (see below)" in r.flip_source for r in rows):
        out.append(
            f"{GRADED}: a graded suite's (sign-flip) plan takes its share of differing items as a flip rate; "
            "a run sizes it from the spread of its per-item differences instead (stats.mde_mean)"
        )
    return out


def _per_length(suite: str, rows: list[PlanRow], count: int) -> str:
    pooled = next((r.needed for r in rows if r.suite == suite and r.longest is None), 0)
    longest = next((r.needed for r in rows if r.suite == suite and r.longest is not None), 0)
    return f"{suite} --limit {max(longest, -(-pooled // count))} ({count} lengths)"
