"""The README's first command, phase by phase, against the physical limit (#47).

A first run's wait is spent where the machine must spend it only if the server is generating and
prefilling at its own rate all the time. This reads one run folder of ``evalgate compare`` and
prints, side by side:

- the time of each phase: before launch (kernel check, load probe, model file), each arm's server
  start (the log's ``listening`` line), preflight and stop, each suite, and the gate and report;
- the tokens each suite and arm made the server process: prompt tokens it prefilled and tokens
  it generated, summed from llama-server's own per-task ``print_timing`` lines, split into
  suites by time (the manifest's per-suite durations laid end to end from the arm's last task);
- the server's rates on this machine: llama-batched-bench (shipped beside llama-server) with the
  arm's own launch settings and environment, its prompts as long as the suite's mean prompt and as
  many in parallel as the arm has slots; the two arms' benches alternate, rounds interleaved. A
  run served by the xllamacpp wheel (which ships no llama-batched-bench) gets the same shapes
  from its own server, launched again with the arm's settings, read from the server's
  ``timings`` (``--rates server`` forces that on llama-server too);
- the physical limit (prompt tokens / prefill rate + generated tokens / decode rate) and the
  ratio of the measured time to it, per suite and arm and for the whole compare.

    python benchmarks/first_command.py run --data-dir ../shared/data      # the first command, then the rest
    python benchmarks/first_command.py analyze RUN_DIR [--rounds 3]       # an existing run folder
    python benchmarks/first_command.py analyze RUN_DIR --no-bench         # phases and tokens only

A ratio near 1 says the run is as fast as the server can go on this machine; the rest is in the
tokens (how many items, how long their prompts) or in the engine. Rates move by 2x with the
machine's load, so the benches run right after the run, on the same machine, interleaved.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import statistics
import subprocess
import sys
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _server_rates import rate_source, relaunched

FIRST_COMMAND = ("evalgate", "compare", "--baseline", "bf16", "--candidate", "fp8kv")
BENCH_ARGS = ("-t", "-tb", "-ctk", "-ctv", "-fa", "--flash-attn", "-ub", "-b", "--poll", "--no-repack")
"""Launch arguments that move the server's rates and that llama-batched-bench takes as well."""

_STAMP = re.compile(r"^(\d+)\.(\d{2})\.(\d{3})\.(\d{3}) ")
_TIMING = re.compile(r"task (\d+) \|\s+(prompt eval|eval) time =\s+([\d.]+) ms /\s+(\d+) tokens")


@dataclass(frozen=True)
class Task:
    """One llama-server task as its log reports it: the tokens it prefilled and generated."""

    task: int
    end_s: float
    """Seconds from the log's start to the task's ``eval time`` line."""
    prompt_n: int
    prompt_ms: float
    gen_n: int
    gen_ms: float


@dataclass(frozen=True)
class Row:
    """One line of the table: a phase of one arm (or of the run), its time and its work."""

    phase: str
    arm: str
    seconds: float
    items: int | None = None
    prompt_tokens: int | None = None
    gen_tokens: int | None = None
    limit_s: float | None = None
    tasks: int | None = None
    """llama-server tasks (an ARC item is one per choice)."""

    @property
    def ratio(self) -> float | None:
        return self.seconds / self.limit_s if self.limit_s else None


def log_seconds(line: str) -> float | None:
    """``M.SS.mmm.uuu`` at the start of a llama-server log line, in seconds."""
    m = _STAMP.match(line)
    if not m:
        return None
    minutes, secs, ms, us = (int(g) for g in m.groups())
    return minutes * 60 + secs + ms / 1e3 + us / 1e6


def listening_s(log: str) -> float | None:
    """When the server started listening, in seconds from its log's start: its start-up time."""
    for line in log.splitlines():
        if "listening on" in line:
            return log_seconds(line)
    return None


def read_tasks(log: str) -> list[Task]:
    """Every task with both timing lines, in the order they finished."""
    seen: dict[int, dict[str, Any]] = {}
    done: list[Task] = []
    for line in log.splitlines():
        m = _TIMING.search(line)
        if not m:
            continue
        task, kind, ms, n = int(m.group(1)), m.group(2), float(m.group(3)), int(m.group(4))
        if kind == "prompt eval":
            seen[task] = {"prompt_ms": ms, "prompt_n": n}
        elif task in seen:
            t = log_seconds(line) or 0.0
            done.append(Task(task, t, gen_ms=ms, gen_n=n, **seen.pop(task)))
    return sorted(done, key=lambda t: t.end_s)


def _utc(stamp: str | None) -> float | None:
    if not stamp:
        return None
    return datetime.strptime(stamp, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=timezone.utc).timestamp()


def idle_points(tasks: Sequence[Task]) -> list[float]:
    """Moments when the server had no task in flight (the middle of each such gap). The runner
    sends a suite's first request only after the previous suite's last answer, so every boundary
    between suites is one of these; within a suite at 4 slots they are rare."""
    spans = sorted((t.end_s - (t.prompt_ms + t.gen_ms) / 1e3, t.end_s) for t in tasks)
    points, reach = [], None
    for start, end in spans:
        if reach is not None and start > reach:
            points.append((start + reach) / 2)
        reach = end if reach is None else max(reach, end)
    return points


def split_by_suite(
    tasks: Sequence[Task], durations: Mapping[str, float], *, snap_s: float = 5.0
) -> dict[str, list[Task]]:
    """Tasks per suite: the suites ran one after another in ``durations``' order and the last
    ended with the arm's last task, so their windows are laid backwards from there, and each
    boundary is moved to the nearest moment the server was idle (within ``snap_s``): a
    suite's own set-up time is not in its duration. Tasks before the first suite are the
    preflight's (``""``)."""
    out: dict[str, list[Task]] = {"": [], **{s: [] for s in durations}}
    if not tasks:
        return out
    idle = idle_points(tasks)
    end = tasks[-1].end_s + 1e-6
    bounds: list[tuple[str, float]] = []
    for suite in reversed(list(durations)):
        start = end - float(durations[suite])
        near = min(idle, key=lambda p: abs(p - start), default=None)
        if near is not None and abs(near - start) <= snap_s and near < end:
            start = near
        bounds.append((suite, start))
        end = start
    for task in tasks:
        out[next((s for s, start in bounds if task.end_s >= start), "")].append(task)
    return out


def records(run: Path, suite: str, arm: str) -> list[dict[str, Any]]:
    path = run / "items" / f"{suite}.{arm}.jsonl"
    if not path.exists():
        return []
    rows = []
    for line in path.read_text().splitlines():
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError:  # a torn last line
            continue
    return rows


def phases(run: Path, rates: Mapping[str, Mapping[str, tuple[float, float]]] | None = None) -> list[Row]:
    """The table's rows for run folder ``run``; ``rates[arm][suite]`` = (prefill, decode) tokens/s."""
    m = json.loads((run / "manifest.json").read_text())
    created, finished = _utc(m.get("created_utc")), _utc(m.get("finished_utc"))
    rows: list[Row] = []
    last_end = created
    for arm in m.get("arm_names") or list(m.get("arms", {})):
        info = m.get("arms", {}).get(arm)
        if not info or _utc(info.get("started_utc")) is None:
            continue
        log_path = run / "logs" / f"{arm}.log"
        log = log_path.read_text(errors="replace") if log_path.exists() else ""
        start_s = listening_s(log) or 0.0
        started, ended = _utc(info["started_utc"]), _utc(info.get("ended_utc"))
        durations: dict[str, float] = info.get("durations_s", {})
        wait = (started or 0) - (last_end or 0) - start_s
        rows.append(Row("before launch" if arm == "baseline" else "between arms", arm, max(0.0, wait)))
        rows.append(Row("server start", arm, start_s))
        if ended is not None and started is not None:
            rows.append(Row("preflight and stop", arm, max(0.0, ended - started - sum(durations.values()))))
            last_end = ended
        by_suite = split_by_suite(read_tasks(log), durations)
        for suite, seconds in durations.items():
            tasks = by_suite[suite]
            p, g = sum(t.prompt_n for t in tasks), sum(t.gen_n for t in tasks)
            pp, tg = (rates or {}).get(arm, {}).get(suite, (0.0, 0.0))
            limit = p / pp + g / tg if pp and tg else None
            rows.append(Row(suite, arm, seconds, len(records(run, suite, arm)), p, g, limit, len(tasks)))
    if finished is not None and last_end is not None:
        rows.append(Row("gate and report", "", max(0.0, finished - last_end)))
    return rows


def total(rows: Sequence[Row]) -> Row:
    """The compare as a whole: every phase's time, the suites' tokens and their limit."""
    work = [r for r in rows if r.prompt_tokens is not None]
    limits = [r.limit_s for r in work]
    return Row(
        "compare",
        "",
        sum(r.seconds for r in rows),
        sum(r.items or 0 for r in work),
        sum(r.prompt_tokens or 0 for r in work),
        sum(r.gen_tokens or 0 for r in work),
        sum(x for x in limits if x) if limits and all(limits) else None,
    )


def table(rows: Sequence[Row]) -> str:
    out = [
        "| phase | arm | seconds | items | prompt tokens | generated tokens | limit s | time / limit |",
        "|---|---|---|---|---|---|---|---|",
    ]

    def cell(x: float | int | None, fmt: str) -> str:
        return "-" if x is None else format(x, fmt)

    for r in [*rows, total(rows)]:
        bold = "**" if r.phase == "compare" else ""
        out.append(
            f"| {bold}{r.phase}{bold} | {r.arm} | {bold}{r.seconds:.1f}{bold} | {cell(r.items, 'd')} | "
            f"{cell(r.prompt_tokens, ',d')} | {cell(r.gen_tokens, ',d')} | {cell(r.limit_s, '.1f')} | "
            f"{cell(r.ratio, '.2f')}x |".replace("| -x |", "| - |")
        )
    return "\n".join(out)


# -- the server's rates on this machine -------------------------------------------------------


@dataclass(frozen=True)
class BenchCase:
    """One llama-batched-bench shape: ``parallel`` prompts of ``prompt`` tokens, ``gen`` each."""

    arm: str
    suite: str
    prompt: int
    gen: int
    parallel: int


def bench_command(binary: Path, model: str, args: Sequence[Sequence[Any]], case: BenchCase) -> list[str]:
    """llama-batched-bench with the arm's rate-moving launch settings (``BENCH_ARGS``)."""
    cmd = [str(binary), "-m", model, "--output-format", "jsonl", "-fa", "on"]
    for key, *value in args:
        if key in BENCH_ARGS:
            cmd += [key] + [str(v) for v in value if v is not None]
    n_kv = case.parallel * (case.prompt + case.gen) + 256
    cmd += ["-c", str(n_kv), "-npp", str(case.prompt), "-ntg", str(case.gen), "-npl", str(case.parallel)]
    return cmd


def parse_bench(stdout: str) -> tuple[float, float]:
    """(prefill, decode) tokens per second from llama-batched-bench's jsonl line."""
    for line in reversed(stdout.splitlines()):
        if line.startswith("{"):
            row = json.loads(line)
            return float(row["speed_pp"]), float(row["speed_tg"])
    raise ValueError(f"no result line in llama-batched-bench's output: {stdout[-300:]!r}")


def cases(rows: Iterable[Row], slots: Mapping[str, int]) -> list[BenchCase]:
    """One bench per suite and arm, its prompt the suite's mean prefill per task."""
    out = []
    for r in rows:
        if r.prompt_tokens and r.tasks:
            tasks = r.tasks
            out.append(
                BenchCase(
                    r.arm,
                    r.phase,
                    max(8, r.prompt_tokens // tasks),
                    max(4, min(128, (r.gen_tokens or 0) // tasks)),
                    slots.get(r.arm, 1),
                )
            )
    return out


def measure_rates(
    run: Path, rows: Sequence[Row], *, rounds: int, source: str = "batched-bench"
) -> dict[str, dict[str, tuple[float, float]]]:
    """Median (prefill, decode) rate per arm and suite over ``rounds`` interleaved rounds, from
    ``source`` (``rate_source``'s answer: ``batched-bench`` or ``server``)."""
    from evalgate.engines.llamacpp import find_binary

    m = json.loads((run / "manifest.json").read_text())
    launch = m["launch"]
    slots = {arm: int(dict((a[0], a[-1]) for a in launch[arm]["args"]).get("-np") or 1) for arm in launch}
    got: dict[tuple[str, str], list[tuple[float, float]]] = {}
    todo = cases(rows, slots)
    binary = find_binary("llama-batched-bench") if source == "batched-bench" else None
    for rnd in range(rounds):
        for case in todo if rnd % 2 == 0 else list(reversed(todo)):
            info = launch[case.arm]
            if binary is None:
                got.setdefault((case.arm, case.suite), []).append(relaunched(m, case))
                continue
            env = {**os.environ, **dict(info.get("env") or [])}
            cmd = bench_command(binary, info["model"], info["args"], case)
            proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=900)
            if proc.returncode:
                raise SystemExit(f"{shlex.join(cmd)} failed:\n{proc.stderr[-2000:]}")
            got.setdefault((case.arm, case.suite), []).append(parse_bench(proc.stdout))
    rates: dict[str, dict[str, tuple[float, float]]] = {}
    for (arm, suite), values in got.items():
        rates.setdefault(arm, {})[suite] = (
            statistics.median(v[0] for v in values),
            statistics.median(v[1] for v in values),
        )
    return rates


def with_wall(rows: list[Row], wall_s: float | None) -> list[Row]:
    """The command's own time outside the manifest's span (imports and settling before the
    manifest is written, the report after it) as a row of its own, when the wall time is known."""
    if wall_s is None:
        return rows
    return [Row("outside the manifest", "", max(0.0, wall_s - sum(r.seconds for r in rows))), *rows]


def report(
    run: Path, *, rounds: int, bench: bool, wall_s: float | None = None, rates_from: str = "auto"
) -> str:
    rows = with_wall(phases(run), wall_s)
    lines = [f"run folder: {run}"]
    if wall_s is not None:
        lines.append(f"wall time of the command: {wall_s:.1f} s")
    if bench and rounds > 0:
        source = rate_source(json.loads((run / "manifest.json").read_text()), rates_from)
        rates = measure_rates(run, rows, rounds=rounds, source=source)
        rows = with_wall(phases(run, rates), wall_s)
        name = (
            "llama-batched-bench" if source == "batched-bench" else "the run's server relaunched, its timings"
        )
        lines.append(f"server rates ({name}, the arm's settings, median of interleaved rounds):")
        for arm, by_suite in rates.items():
            for suite, (pp, tg) in by_suite.items():
                lines.append(f"  {arm} {suite}: prefill {pp:.0f} tokens/s, decode {tg:.1f} tokens/s")
    lines.append(table(rows))
    whole = total(rows)
    if whole.ratio is not None:
        suites = sum(r.seconds for r in rows if r.prompt_tokens is not None)
        lines.append(
            f"ratio to the physical limit: the compare {whole.ratio:.2f}x, its suites "
            f"{suites / whole.limit_s:.2f}x ({whole.limit_s:.0f} s of tokens at the server's own rates)"
            if whole.limit_s
            else ""
        )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    a = sub.add_parser("analyze", help="read a run folder")
    a.add_argument("run", type=Path)
    r = sub.add_parser("run", help="run the README's first command, then analyze its folder")
    r.add_argument("--data-dir", default="../shared/data")
    r.add_argument("--out", type=Path, default=None, help="run folder (default: a fresh one under /tmp)")
    r.add_argument("extra", nargs="*", help="more evalgate compare arguments, after --")
    for p in (a, r):
        p.add_argument("--rounds", type=int, default=3, help="interleaved bench rounds (default 3)")
        p.add_argument("--no-bench", action="store_true", help="phases and tokens only")
        p.add_argument(
            "--rates",
            choices=("auto", "batched-bench", "server"),
            default="auto",
            help="where the server rates come from (default auto: llama-batched-bench on a llama-server "
            "run, the relaunched server's timings on an xllamacpp one)",
        )
    ns = ap.parse_args(argv)
    wall = None
    if ns.cmd == "run":
        out = ns.out or Path(f"/tmp/first-command-{int(time.time())}")
        cmd = [*FIRST_COMMAND, "--data-dir", ns.data_dir, "--out", str(out), *ns.extra]
        t0 = time.perf_counter()
        proc = subprocess.run(cmd)
        wall = time.perf_counter() - t0
        if proc.returncode not in (0, 1):  # 1 is a BLOCK: still a run to read
            return proc.returncode
        ns.run = out
    print(report(ns.run, rounds=ns.rounds, bench=not ns.no_bench, wall_s=wall, rates_from=ns.rates))
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    raise SystemExit(main())
