"""Private exam (``private:PATH``): a folder of the user's own items, never committed to evalgate.

``PATH/items.jsonl`` holds one item per line, ``{"id", "prompt", "answer", "grader",
"choices"}``, graded ``exact`` | ``numeric`` | ``choice`` | ``regex``; an optional
``PATH/exam.toml`` sets ``name``, ``system_prompt``, ``max_tokens`` and ``temperature``.
The folder is validated when the suite is named, before any server starts. Items go through
the chat API; the metric is ``pass``. Nothing of an item's text goes into records or prompt
files unless ``--reveal-private`` (the runner redacts; ``display`` and ``extra`` hold none).
See suites/private/README.md.
"""

from __future__ import annotations

import difflib
import json
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from evalgate.errors import ConfigError, first_invalid, invalid_input
from evalgate.store.facts import RecordExtra
from evalgate.suites._base import Item, ItemResult, Scorer, Suite, SuiteOptions, prompt_hash, select_indices
from evalgate.suites._chat import read_chat
from evalgate.suites._graders import (
    RegexTimeout,
    choice_index,
    choice_letter,
    exact_match,
    numeric_match,
    parse_number,
    regex_match,
)
from evalgate.user_files import path_kind, read_text, require_regular_file

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

# the graders are suites._graders' (imported from there)
__all__ = ["EXAM_RULES", "Exam", "ExamItem", "PrivateSuite", "load_exam", "private"]


@dataclass(frozen=True)
class ExamItem:
    id: str
    prompt: str
    answer: str
    grader: str
    choices: tuple[str, ...] | None = None

    def grade(self, response: str) -> tuple[bool, Any]:
        if self.grader == "choice":
            return choice_letter(list(self.choices or ()))(response, self.answer)
        try:
            return {"exact": exact_match, "numeric": numeric_match, "regex": regex_match}[self.grader]()(
                response, self.answer
            )
        except RegexTimeout as exc:
            exc.cause = f"private exam item {self.id!r}: {exc.cause}"
            exc.args = (exc.cause,)
            raise


@dataclass(frozen=True)
class Exam:
    path: Path
    name: str
    items: tuple[ExamItem, ...]
    system_prompt: str | None = None
    max_tokens: int = 256
    temperature: float = 0.0


_ITEM_KEYS = {"id", "prompt", "answer", "grader", "choices"}


def _item_problem(row: Any) -> str | None:
    """What is wrong with one parsed line (never quoting its prompt or answer), or None."""
    if not isinstance(row, dict):
        return "is not a JSON object"
    unknown = sorted(set(row) - _ITEM_KEYS)
    if unknown:
        return f"has unknown key(s) {', '.join(map(repr, unknown))}; allowed: {', '.join(sorted(_ITEM_KEYS))}"
    for key in ("id", "prompt", "answer", "grader"):
        if not isinstance(row.get(key), str) or not row[key].strip():
            return f"needs {key!r} as a non-empty string"
    grader, answer, choices = row["grader"], row["answer"], row.get("choices")
    if grader not in ("exact", "numeric", "choice", "regex"):
        return "has an unknown 'grader' (use exact, numeric, choice or regex)"
    if grader == "choice":
        if not (
            isinstance(choices, list)
            and 2 <= len(choices) <= 26
            and all(isinstance(c, str) and c.strip() for c in choices)
        ):
            return "needs 'choices' as a list of 2 to 26 non-empty strings (grader choice)"
        if choice_index(answer, choices) is None:
            return "has an 'answer' that is neither a choice letter in range nor the text of a choice"
    elif choices is not None:
        return "has 'choices', which only the choice grader takes"
    if grader == "numeric":
        try:
            parse_number(answer)
        except ValueError:
            return "has an 'answer' that is not a number (grader numeric)"
    return None  # a regex answer is compiled apart, all at once (_regex_problems)


REGEX_COMPILE_S = 1.0
REGEX_COMPILE_BYTES = 1 << 29
"""What compiling one regex answer may take, in a child process at load: the regex package expands
counted repeats as it compiles (``(?:(?:a{60000}){60000}){60000}`` asks for every byte of the
machine), and 5,000 nested groups overflow its parser's recursion."""

_COMPILE = """
import json, signal, sys, time
try:
    import resource
    resource.setrlimit(resource.RLIMIT_AS, (int(sys.argv[1]), int(sys.argv[1])))
except (ImportError, ValueError, OSError):  # no such limit here: the time limit still holds
    pass
import regex
def stop(*_):
    raise TimeoutError
signal.signal(signal.SIGALRM, stop)
for pattern in json.load(sys.stdin):
    t0 = time.monotonic()
    try:
        signal.setitimer(signal.ITIMER_REAL, float(sys.argv[2]))  # stops the parser, not C code
        try:
            regex.compile(pattern)
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
        out = {"s": time.monotonic() - t0}
    except regex.error as exc:
        out = {"error": f"{exc.msg} at position {exc.pos}"}
    except BaseException as exc:
        out = {"fails": type(exc).__name__}
    print(json.dumps(out), flush=True)
"""


_WHY = {"TimeoutError": "too slow", "MemoryError": "out of memory", "RecursionError": "nested too deeply"}


def _regex_problems(answers: list[str]) -> list[str | None]:
    """Per regex answer, why it cannot be graded (never quoting it), or None; see REGEX_COMPILE_S."""
    if not answers:
        return []
    limit = f"{REGEX_COMPILE_S:g} s and {REGEX_COMPILE_BYTES >> 20} MiB"
    argv = [sys.executable, "-I", "-c", _COMPILE, str(REGEX_COMPILE_BYTES), str(REGEX_COMPILE_S)]
    try:  # the budget: each answer's, plus the child's start on a busy machine
        done = subprocess.run(
            argv, input=json.dumps(answers), capture_output=True, text=True,
            timeout=10 + REGEX_COMPILE_S * len(answers),
        ).stdout  # fmt: skip
    except subprocess.TimeoutExpired as exc:
        done = exc.stdout.decode() if isinstance(exc.stdout, bytes) else exc.stdout or ""
    lines = [json.loads(line) for line in done.splitlines(keepends=True) if line.endswith("\n")]
    out: list[str | None] = []
    for i in range(len(answers)):
        got = lines[i] if i < len(lines) else {"fails": "stopped"}  # the child died on it, or timed out
        if "error" in got:
            out.append(f"is not a valid regular expression ({got['error']})")
        elif "fails" in got or got["s"] > REGEX_COMPILE_S:
            why = _WHY.get(got.get("fails", "TimeoutError"), "the compiler died on it")
            out.append(f"does not compile within {limit} ({why}: counted repeats expand as it compiles)")
        else:
            out.append(None)
    return out


def _read_items(path: Path) -> tuple[ExamItem, ...]:
    require_regular_file(
        path,
        "private exam file",
        fix="a private exam folder needs items.jsonl (see suites/private/README.md)",
    )
    items: list[ExamItem] = []
    seen: dict[str, int] = {}
    problems: list[str] = []
    patterns: list[tuple[int, str, str]] = []  # line, id, regex answer
    with open(path, "rb") as f:
        for lineno, raw in enumerate(f, 1):
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                problems.append(f"{path}:{lineno}: is not UTF-8 text (byte 0x{raw[exc.start]:02x})")
                continue
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as exc:
                problems.append(f"{path}:{lineno}: is not valid JSON ({exc.msg}, column {exc.colno})")
                continue
            problem = _item_problem(row)
            if problem is None and row["id"] in seen:
                problem = f"repeats the id {row['id']!r} of line {seen[row['id']]}"
            if problem:
                problems.append(f"{path}:{lineno}: {problem}")
                continue
            seen[row["id"]] = lineno
            if row["grader"] == "regex":
                patterns.append((lineno, row["id"], row["answer"]))
            choices = tuple(row["choices"]) if row.get("choices") is not None else None
            items.append(ExamItem(row["id"], row["prompt"], row["answer"], row["grader"], choices))
    for (lineno, item_id, _), problem in zip(
        patterns, _regex_problems([p for *_, p in patterns]), strict=True
    ):
        if problem:
            problems.append(f"{path}:{lineno}: item {item_id!r} has an 'answer' that {problem}")
    if problems:
        problems.sort(key=lambda text: int(text[len(str(path)) + 1 :].partition(":")[0]))
        raise ConfigError(
            problems[0],
            fix="correct the line(s) named; each holds {id, prompt, answer, grader[, choices]} (suites/private/README.md)",
            detail="\n".join(problems[1:10])
            + (f"\n... and {len(problems) - 10} more" if len(problems) > 10 else ""),
        )
    if not items:
        raise ConfigError(f"{path} holds no items", fix="add one JSON object per line")
    return tuple(items)


class ExamConfig(BaseModel):
    """``exam.toml``: every key optional."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True, allow_inf_nan=False)
    name: str | None = Field(None, pattern=r"^[A-Za-z0-9_.-]{1,64}$", description="Suite name: private:NAME.")
    system_prompt: str | None = Field(None, description="System message sent before every item.")
    max_tokens: int = Field(256, ge=1, le=2**31 - 1, description="Generation cap per item.")
    temperature: float = Field(0.0, ge=0.0, le=5.0, description="Sampling temperature (0: greedy).")


EXAM_RULES = {
    "name": (
        "1 to 64 letters, digits, '_', '.' or '-', no spaces (it names the suite private:NAME)",
        '"my_exam"',
    ),
    "system_prompt": ("a string", '"Answer in one word."'),
    "max_tokens": ("an integer of at least 1 and at most 2147483647", "256"),
    "temperature": ("a number of at least 0 (0 is greedy) and at most 5, not inf or nan", "0.0"),
}
"""Each exam.toml key: the rule its value must follow, as an error states it, and an example."""


def _toml_problem(path: Path, exc: ValidationError) -> ConfigError:
    """The rule that failed, for the key it failed on; never the value (the system prompt is private)."""
    first = first_invalid(exc)
    key = first.where
    if first.kind == "extra_forbidden":
        near = difflib.get_close_matches(key, EXAM_RULES, n=1)
        return ConfigError(
            f"{path}: unknown key {key!r}; exam.toml takes only {', '.join(EXAM_RULES)}",
            fix=(f"did you mean {near[0]}? " if near else "")
            + "remove or rename it (suites/private/README.md)",
        )
    if key not in EXAM_RULES:
        return invalid_input(exc, at=lambda where: f"{path}: {where}", fix="see suites/private/README.md")
    rule, example = EXAM_RULES[key]
    return ConfigError(f"{path}: {key} must be {rule}", fix=f"for example: {key} = {example}")


def _read_toml(path: Path) -> ExamConfig:
    if path_kind(path) == "does not exist":  # optional; a folder or pipe by that name is refused
        return ExamConfig()
    try:
        return ExamConfig.model_validate(tomllib.loads(read_text(path)))
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path} is not valid TOML: {exc}", fix="fix the line it names") from exc
    except ValidationError as exc:
        raise _toml_problem(path, exc) from exc


def load_exam(path: Path) -> Exam:
    """Read and validate an exam folder; raises ConfigError (exit 2) naming file and line."""
    path = Path(path).expanduser()
    kind = path_kind(path)
    if kind != "is a directory":
        raise ConfigError(
            f"private exam folder {path} {kind}"
            + ("" if kind.startswith(("does not", "cannot")) else ", not a folder"),
            fix="pass --suites private:PATH with the folder that holds items.jsonl",
        )
    cfg = _read_toml(path / "exam.toml")
    items = _read_items(path / "items.jsonl")
    name = cfg.name or re.sub(r"[^A-Za-z0-9_.-]+", "_", path.resolve().name)[:64] or "exam"
    return Exam(path, name, items, cfg.system_prompt, cfg.max_tokens, cfg.temperature)


@dataclass
class PrivateSuite(Suite):
    exam: Exam
    name: str = ""
    version: int = 1
    metrics: tuple[str, ...] = ("pass",)
    kind: str = "chat"
    private: bool = True

    def __post_init__(self) -> None:
        self.name = self.name or f"private:{self.exam.name}"

    def size(self, options: SuiteOptions) -> int:
        return len(self.exam.items)

    def source(self, options: SuiteOptions) -> str:
        return str(self.exam.path)

    def request(self, item: ExamItem, options: SuiteOptions) -> dict[str, Any]:
        messages = [{"role": "system", "content": self.exam.system_prompt}] if self.exam.system_prompt else []
        messages.append({"role": "user", "content": item.prompt})
        cap = (
            self.exam.max_tokens
            if options.max_gen_tokens is None
            else min(self.exam.max_tokens, options.max_gen_tokens)
        )
        request = {"messages": messages, "max_tokens": cap, "temperature": self.exam.temperature}
        if options.thinking is not None:  # --thinking on|off: the chat template's switch, hashed
            request["chat_template_kwargs"] = {"enable_thinking": options.thinking}
        return request

    def load(self, options: SuiteOptions, n: int | None) -> list[Item]:
        items = self.exam.items
        strata = [it.grader for it in items]
        chosen = select_indices(len(items), n, seed=options.seed, suite=self.name, strata=strata)
        out = []
        for i in chosen:
            it = items[i]
            request = self.request(it, options)
            # extra goes into every record and display into prompts/: no item text unless revealed.
            shown = (
                {"prompt": it.prompt, "choices": list(it.choices or []) or None}
                if options.reveal_private
                else {}
            )
            secret = (it.prompt, it.answer, self.exam.system_prompt or "", *(it.choices or ()))
            meta = RecordExtra(grader=it.grader)
            out.append(Item(it.id, prompt_hash(request), it.answer, (it, request), meta, shown, secret))
        return out

    async def run(self, item: Item, scorer: Scorer, options: SuiteOptions) -> ItemResult:
        exam_item, request = item.payload
        # only message.content is graded (null: no answer); reasoning and inline <think> as in
        # suites/_chat.py, its text kept only when revealed (it may quote the item)
        answer = read_chat(await scorer.chat({**request, "seed": options.seed}), [])
        text = answer.content
        passed, extracted = exam_item.grade(text)
        tokens = {"prompt": answer.prompt_tokens, "completion": answer.completion_tokens}
        # no item text: what the gate's unanswered test reads (empty, or cut at max tokens)
        if answer.reasoning is not None:
            tokens["reasoning"] = answer.reasoning_tokens or len(await scorer.tokenize(answer.reasoning))
        extra = RecordExtra(  # None: not said, not written
            empty=not text.strip(),
            finish_reason=answer.finish_reason,
            # a regex that does not match is a wrong answer, not none
            no_answer=(extracted is None or extracted == "") if exam_item.grader != "regex" else None,
            reasoning_content=answer.reasoning if options.reveal_private else None,
            think_inline=answer.think_inline or None,
        )
        return ItemResult(text, extracted, {"pass": float(passed)}, tokens, extra=extra)


def private(spec: str) -> PrivateSuite:
    """``private:PATH`` -> the suite, with the folder validated now (before any server starts)."""
    _, _, path = spec.partition(":")
    if not path.strip():
        raise ConfigError(
            "private: needs a folder, as in private:PATH", fix="e.g. --suites private:./my-exam"
        )
    return PrivateSuite(load_exam(Path(path)))
