"""What ``evalgate compare`` is asked to do, declared once.

Each field of ``CompareRequest`` is one ``evalgate compare`` flag: its name (``max_gen_tokens`` is
``--max-gen-tokens``), type, default and help live on the field, and ``evalgate.cli._flags`` builds
the argparse parser from them. ``Flag`` adds what a type cannot say (a metavar, a list). The request
is stored once per run, as the manifest's ``request``; the gate policy is read from it.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, model_validator
from pydantic.json_schema import SkipJsonSchema

from evalgate.arms import DEFAULT_AA_ITEMS, AaValue
from evalgate.config import MAX_DEADLINE_S, MAX_TIMEOUT_S, MAX_TRIES
from evalgate.engines import EngineName
from evalgate.errors import ConfigError
from evalgate.redact import redact_url
from evalgate.store.provenance import parse_expect
from evalgate.user_files import path_kind

__all__ = [
    "DEFAULT_SUITES",
    "MAX_REPEATS",
    "MIN_ALPHA",
    "TIMING_FIELDS",
    "CompareRequest",
    "Flag",
    "Policy",
    "Preset",
    "check_request",
    "parse_context_lengths",
    "parse_suite_opts",
]

Policy = Literal["difference", "regression", "non-inferiority"]
Preset = Literal["smoke", "quick", "full"]
Protocol = Literal["auto", EngineName]
Thinking = Literal["auto", "on", "off"]
DEFAULT_SUITES = ("gsm8k", "arc_easy", "drift")
MIN_CONTEXT_LENGTH = 512
"""The shortest long_context length: room for the instruction, the needles and the answer."""
MAX_REPEATS = 100
"""--repeats: each is a pass over a suite on both arms, planned as records before the run starts."""
MIN_ALPHA = 1e-6
"""The smallest --alpha: no benchmark has the items for less (1 - 1e-300/k rounds to 1: n = inf)."""
MAX_INT32 = 2**31 - 1  # a server's --seed, --top-k and token counts (llama.cpp reads int32)
TIMING_FIELDS = ("request_timeout_s", "tries", "deadline_s")
"""How long evalgate waits, not what it measures: a resumed run may change them."""


@dataclass(frozen=True)
class Flag:
    """How a request field reads on the command line, beyond its name, type, default and help."""

    metavar: str | None = None
    listed: Literal["", ",", "append"] = ""
    """A tuple field: "," takes one comma-separated argument, "append" a flag given once per value."""
    default_text: str | None = None
    """The help's "(default: ...)" when the field's default alone says too little."""
    name: str | None = None
    """The flag, when it is not the field's name (``--suite-opt`` for ``suite_options``)."""
    parse: Callable[[Sequence[str]], Any] | None = None
    """Turns the repeated flag's strings into the field's value."""
    bare: str | None = None  # the value of the flag given alone (--aa is --aa baseline)


def parse_suite_opts(values: Sequence[str]) -> dict[str, dict[str, Any]]:
    """``["tool_calls.prefill=true"]`` -> ``{"tool_calls": {"prefill": True}}``; a value is read as
    JSON (true, 3, 0.5, "x") and is a plain string when it is not JSON."""
    out: dict[str, dict[str, Any]] = {}
    for text in values:
        spec, eq, raw = text.partition("=")
        suite, dot, key = spec.strip().rpartition(".")
        if not (eq and dot and suite and key):
            raise ConfigError(
                f"--suite-opt {text!r} is not SUITE.KEY=VALUE",
                fix="e.g. --suite-opt tool_calls.prefill=false",
            )
        try:
            value = json.loads(raw)
        except json.JSONDecodeError:
            value = raw
        out.setdefault(suite, {})[key] = value
    return out


def parse_context_lengths(raw: str | Sequence[str]) -> tuple[int, ...]:
    """``"1k,2k,4096"`` -> ``(1024, 2048, 4096)`` (k = 1024); 0, junk and repeats are refused."""
    text = raw if isinstance(raw, str) else ",".join(raw)
    out: list[int] = []
    for part in (p.strip().lower() for p in text.split(",")):
        digits = part[:-1] if part.endswith("k") else part
        # ASCII digits only: str.isdigit() takes "²" and "٣", which int() then refuses or reads
        if not re.fullmatch(r"[0-9]{1,9}", digits) or int(digits) == 0:
            raise ConfigError(
                f"--context-lengths: {part!r} is not a length in tokens",
                fix="give positive lengths like 1k,2k,4k (k = 1024) or 1000,2000",
            )
        n = int(digits) * (1024 if part.endswith("k") else 1)
        if n in out:
            raise ConfigError(f"--context-lengths names {part} twice", fix="give each length once")
        out.append(n)
    return tuple(sorted(out))


class CompareRequest(BaseModel):
    """Everything ``evalgate compare`` was asked to do: one field per flag."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    baseline: str = Field("bf16", description="baseline variant")
    candidate: str = Field("fp8kv", description="candidate variant, e.g. fp8kv, fp8, int4, int4+fp8kv")
    suites: Annotated[tuple[str, ...], Flag(listed=",")] = Field(
        DEFAULT_SUITES, description="comma-separated suites; see `evalgate suites list`"
    )
    preset: Preset = Field(
        "smoke",
        description="items per suite: smoke 50 (on a CPU engine gsm8k 10 and arc_easy 90), quick 500, full all",
    )
    limit: int | None = Field(None, description="items per suite, overriding the preset")
    context_lengths: Annotated[
        tuple[int, ...] | None,
        Flag(
            metavar="1k,2k,...",
            parse=parse_context_lengths,
            default_text="powers of two from 1k up to a slot's context, at most 4k smoke, 32k quick",
        ),
    ] = Field(
        None,
        description="long_context: target lengths in tokens, prompt plus answer room (k = 1024); --limit "
        "is then items per length",
    )
    data_dir: Annotated[Path | None, Flag(default_text="the Hub")] = Field(
        None, description="local copy of the benchmark data, laid out like shared/data"
    )
    out: Annotated[Path | None, Flag(default_text="reports/<run-id>")] = Field(None, description="run folder")
    alpha: float = Field(0.05, description="family-wise error rate")
    engine: str | None = Field(None, description="llamacpp (default on CPU), sglang or vllm")
    baseline_url: Annotated[tuple[str, ...], Flag(metavar="URL[,URL...]", listed=",")] = Field(
        (),
        description="attach to baseline server(s) already running instead of launching one; items are "
        "sharded across the URLs; API key from EVALGATE_BASELINE_API_KEY",
    )
    candidate_url: Annotated[tuple[str, ...], Flag(metavar="URL[,URL...]", listed=",")] = Field(
        (), description="attach to candidate server(s); API key from EVALGATE_CANDIDATE_API_KEY"
    )
    baseline_samples: Annotated[tuple[Path, ...], Flag(metavar="PATH", listed="append")] = Field(
        (),
        description="gate two lm-eval runs instead of servers: the baseline's --log_samples output "
        "(its --output_path folder, or samples_*.jsonl files; repeatable)",
    )
    candidate_samples: Annotated[tuple[Path, ...], Flag(metavar="PATH", listed="append")] = Field(
        (), description="the candidate's lm-eval --log_samples output (with --baseline-samples)"
    )
    baseline_run: Annotated[str | None, Flag(metavar="DATE|FILE")] = Field(
        None,
        description="--baseline-samples names a folder of several lm-eval runs: the one to use, by its "
        "date (as in samples_<task>_<date>.jsonl) or its results file name",
    )
    candidate_run: Annotated[str | None, Flag(metavar="DATE|FILE")] = Field(
        None, description="the candidate's run among several in --candidate-samples (as --baseline-run)"
    )
    protocol: Protocol = Field(
        "auto", description="attach mode: the servers' engine, or auto to detect it from their endpoints"
    )
    seed: int = Field(1234, description="item selection and few-shot seed")
    allow_diff: Annotated[tuple[str, ...], Flag(metavar="KEY", listed="append")] = Field(
        (), description="allow this launch setting to differ between the arms (recorded in the report)"
    )
    expect: Annotated[dict[str, dict[str, str]], Flag(metavar="ARM.FACT=VALUE", listed="append", parse=parse_expect)] = Field(default_factory=dict, description="what an arm's server must report it runs, e.g. candidate.kv_cache_dtype=fp8_e4m3 (facts: evalgate.store.provenance.FIELDS); a mismatch, or a fact the server does not report, is exit 2 before the arm's first item")  # fmt: skip
    resume: Annotated[Path | None, Flag(metavar="RUN"), SkipJsonSchema()] = Field(
        None,
        exclude=True,
        description="continue an interrupted run (its folder or run id); other flags default to the run's",
    )
    max_gen_tokens: int | None = Field(
        None, description="cap generated tokens on both arms (recorded); at least 1"
    )
    repeats: int = Field(
        1,
        description="sample each generation item this many times per arm; repeat r of an item carries "
        "the same seed on both arms, and the gate tests the per-item mean (needs --temperature > 0)",
    )
    temperature: float | None = Field(
        None,
        description="sampling temperature for generation suites, both arms (default: the task's, greedy)",
    )
    top_p: float | None = Field(None, description="nucleus sampling cutoff for generation suites, both arms")
    top_k: int | None = Field(None, description="top-k sampling for generation suites, both arms")
    min_p: float | None = Field(None, description="min-p sampling for generation suites, both arms")
    chat: bool = Field(
        False,
        description="run each suite's chat variant (gsm8k -> gsm8k_chat, arc_easy -> arc_easy_chat, ...): "
        "lm-eval's chat prompt through the server's chat template",
    )
    thinking: Thinking = Field(
        "auto",
        description="chat suites: the chat template's enable_thinking switch on both arms (on, off); "
        "auto sends nothing (the template's default)",
    )
    policy: Policy = Field(
        "difference",
        description="difference: block on any significant change; regression: one-sided; "
        "non-inferiority: block unless the CI lower bound is above -margin",
    )
    margin: str | None = Field(
        None, description="non-inferiority margin: 2pt, 0.02 (absolute) or 1%rel (of the baseline)"
    )
    errors_as_wrong: bool = Field(
        False, description="score items that failed after retries as wrong instead of ending with exit 3"
    )
    aa: Annotated[AaValue, Flag(metavar="baseline|both", bare="baseline", default_text="off; a bare --aa: baseline")] = Field(None, description="baseline: also run the baseline a second time (every item): measures the noise floor and sets the flip budget; both: also run the candidate a second time on --aa-items items per suite, and say when the candidate repeats its own output less often than the baseline")  # fmt: skip
    aa_items: Annotated[int | None, Flag(metavar="N", default_text=str(DEFAULT_AA_ITEMS))] = Field(None, description="--aa both: the candidate's repeat runs the first N items of each suite (all if fewer)")  # fmt: skip
    agreement_gate: bool = Field(True, description="also block when more answers flip than the budget allows")
    flip_budget: Annotated[float | None, Flag(default_text="A/A + 0.03 with --aa, else 0.05")] = Field(
        None, description="tolerated flip rate"
    )
    drift_budget: Annotated[str | None, Flag(metavar="kld=X,ppl=Y%", default_text="kld=0.01,ppl=2%")] = Field(
        None,
        description="drift suites: the mean per-token KL (nats) and the perplexity ratio (1 + Y) a candidate "
        "may show; each is gated on its one-sided upper bound ([suites.drift] kld_budget, ppl_margin)",
    )
    advisory: Annotated[tuple[str, ...], Flag(metavar="SUITE[,SUITE]", listed=",")] = Field((), description="suites tested and shown but never gating, Holm-adjusted among themselves: a row that would block says so, the verdict stays PASS ([suites.<name>] tier = \"advisory\")")  # fmt: skip
    require_power: bool = Field(False, description="a PASS with an UNDERPOWERED blocking row (accuracy or drift) ends INCONCLUSIVE, exit 4")  # fmt: skip
    with_throughput: bool = Field(
        False,
        description="also load-sweep each arm after its suites: output tok/s, TTFT, ITL per concurrency and "
        "KV capacity (the `evalgate bench` defaults), in the report and throughput.json",
    )
    deterministic: bool = Field(
        False,
        description="llamacpp: one slot, one request at a time, no prompt cache, so logprobs are "
        "bit-identical across runs and resumes (measured as fast on 2 cores; no batching); sglang: "
        "--enable-deterministic-inference, vllm: VLLM_BATCH_INVARIANT=1 (batch-invariant kernels), both arms",
    )
    sequential: bool = Field(
        False,
        description="keep both servers up, run items in a recorded shuffled order in chunks, and stop each "
        "suite once its always-valid e-value decides (block) or no decision is reachable (futile)",
    )
    chunk: Annotated[int | None, Flag(default_text="50")] = Field(
        None, description="--sequential: items per look"
    )
    same_server_ok: bool = Field(
        False,
        description="attach mode: allow both arms to be the same server (an A/A check of the harness; "
        "otherwise refused, since such a pair passes whatever the candidate is)",
    )
    request_timeout_s: Annotated[
        float | None,
        Flag(
            name="request-timeout",
            metavar="SECONDS",
            default_text="[client] timeout_s, else 60 (600 on the CPU engine)",
        ),
    ] = Field(None, description="seconds one try of one request may take")
    tries: Annotated[int | None, Flag(default_text="[client] tries, 2")] = Field(
        None, description="tries per request (a server that times out on every try has stalled: exit 3)"
    )
    deadline_s: Annotated[
        float | None, Flag(name="deadline", metavar="SECONDS", default_text="[client] deadline_s, none")
    ] = Field(None, description="seconds the whole run may take; then exit 3, records kept for --resume")
    skip_kernel_check: bool = Field(
        False,
        description="do not run the candidate's kernel numerics check first (recorded: a --resume skips it too)",
    )
    reveal_private: bool = Field(
        False, description="write private exam prompts, answers and responses into records and reports"
    )
    suite_options: Annotated[
        dict[str, dict[str, Any]],
        Flag(name="suite-opt", metavar="SUITE.KEY=VALUE", listed="append", parse=parse_suite_opts),
    ] = Field(
        default_factory=dict,
        description="a suite's own option, e.g. tool_calls.prefill=false (also [suites.<name>] in "
        "evalgate.toml; see `evalgate suites list`)",
    )

    @model_validator(mode="before")
    @classmethod
    def _migrate(cls, data: Any) -> Any:
        """Requests recorded before suite options: ``tool_prefill`` is ``tool_calls.prefill``."""
        if isinstance(data, dict) and "tool_prefill" in data:
            data = dict(data)
            prefill = data.pop("tool_prefill")
            if prefill is not None:
                opts = {k: dict(v) for k, v in (data.get("suite_options") or {}).items()}
                opts.setdefault("tool_calls", {}).setdefault("prefill", prefill)
                data["suite_options"] = opts
        return data


def check_request(req: CompareRequest) -> None:
    """Every value a flag can carry, checked before anything is loaded or launched (exit 2): each
    number finite and in its range, each URL a URL, each path what it must be."""

    def need(ok: bool, cause: str, fix: str) -> None:
        if not ok:
            raise ConfigError(cause, fix=fix)

    need(
        req.limit is None or req.limit >= 1,
        "--limit must be at least 1",
        "omit it to use the preset's item count",
    )
    need(0 < req.alpha < 1, f"--alpha {_g(req.alpha)} is not between 0 and 1", "the usual value is 0.05")
    low = f"--alpha {_g(req.alpha)} is below {MIN_ALPHA:g}: no benchmark has the items to test at that level"
    need(req.alpha >= MIN_ALPHA, low, "the usual value is 0.05")
    need(
        req.context_lengths is None
        or (bool(req.context_lengths) and min(req.context_lengths) >= MIN_CONTEXT_LENGTH),
        f"--context-lengths {','.join(map(str, req.context_lengths or ()))}: each must be at least "
        f"{MIN_CONTEXT_LENGTH} tokens",
        "the instruction, needles and question take a few hundred tokens; use 1k or more",
    )
    need(bool(req.suites), "--suites is empty", "name at least one suite; see `evalgate suites list`")
    need(
        req.flip_budget is None or 0 < req.flip_budget < 1,
        f"--flip-budget {_g(req.flip_budget)} is not a rate between 0 and 1",
        "give the tolerated share of flipped answers, e.g. 0.05 for 5%",
    )
    for flag, value, low, high, fix in (  # --temperature before --repeats: nan is neither greedy nor not
        ("--temperature", req.temperature, 0, 5, "the usual values are 0 (greedy) or 0.6-1.0"),
        ("--repeats", req.repeats, 1, MAX_REPEATS, "the default is 1; 2 to 8 repeats give the per-item mean"),
        ("--top-k", req.top_k, 1, MAX_INT32, "e.g. 20"),
        ("--max-gen-tokens", req.max_gen_tokens, 1, MAX_INT32, "omit it to keep each suite's own limit"),
        ("--seed", req.seed, 0, MAX_INT32, "the default is 1234 (a server reads -1 as 'pick at random')"),
        ("--tries", req.tries, 1, MAX_TRIES, "the default is 2"),
        ("--request-timeout", req.request_timeout_s, 0, MAX_TIMEOUT_S, "the default is 60 (seconds)"),
        ("--deadline", req.deadline_s, 0, MAX_DEADLINE_S, "omit it for no deadline"),
        ("--chunk", req.chunk, 1, MAX_INT32, "the default is 50 items per look"),
    ):
        problem = _range_problem(flag, value, low, high, above=flag in ("--request-timeout", "--deadline"))
        need(problem is None, str(problem), fix)
    need(
        req.repeats == 1 or (req.temperature or 0) > 0,
        f"--repeats {req.repeats} with greedy decoding would send the same request {req.repeats} times",
        "add a sampling temperature, e.g. --temperature 0.7, or drop --repeats",
    )
    for flag, p, inside, span, fix in (
        ("--top-p", req.top_p, lambda v: 0 < v <= 1, "(0, 1]", "e.g. 0.95; omit it for the engine's default"),
        ("--min-p", req.min_p, lambda v: 0 <= v < 1, "[0, 1)", "e.g. 0.05; omit it for the engine's default"),
    ):
        need(p is None or inside(p), f"{flag} {_g(p)} is not in {span}", fix)
    kind = "does not exist" if req.out is None else path_kind(req.out).replace("a regular file", "a file")
    need(
        req.resume is not None or kind in ("does not exist", "is a directory"),
        f"--out {req.out} {kind}",
        "give a folder that does not exist yet (or an empty one)",
    )
    for arm, urls in (("baseline", req.baseline_url), ("candidate", req.candidate_url)):
        for url in urls:
            problem = _url_problem(url)
            need(
                problem is None,
                f"--{arm}-url {redact_url(url)!r} {problem}",
                "give each server as http://HOST:PORT (comma-separated, no spaces or line breaks)",
            )
    for arm, paths in (("baseline", req.baseline_samples), ("candidate", req.candidate_samples)):
        for path in paths:
            kind = path_kind(Path(path))
            need(
                kind in ("is a directory", "is a regular file"),
                f"--{arm}-samples {path} {kind}",
                "give lm-eval's --output_path folder or its samples_*.jsonl files",
            )


def _range_problem(flag: str, value: float | None, low: float, high: float, *, above: bool) -> str | None:
    """``--tries 0 must be at least 1 and at most 20`` (``above``: more than ``low``), or None."""
    if value is None or (math.isfinite(value) and (value > low if above else value >= low) and value <= high):
        return None
    rule = f"must be {'more than' if above else 'at least'} {low:g} and at most {high:,.0f}"
    return f"{flag} {_g(value)} {rule if math.isfinite(value) else 'is not a finite number: it ' + rule}"


def _url_problem(url: str) -> str | None:
    """What makes ``url`` no server URL, or None; urlsplit drops tabs and line breaks silently."""
    if any(ch.isspace() or not ch.isprintable() for ch in url):
        return "holds a space, a line break or another control character"
    parts = urlsplit(url)
    try:
        ok = parts.scheme.lower() in ("http", "https") and bool(parts.hostname) and parts.port != 0
    except ValueError:  # a port that is no number up to 65535
        ok = False
    return None if ok else "is not http(s)://HOST[:PORT]"


def _g(value: float | None) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)
