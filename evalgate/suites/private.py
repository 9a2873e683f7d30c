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

import json
import math
import re
import sys
import unicodedata
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import regex
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from evalgate.config import read_text
from evalgate.errors import ConfigError
from evalgate.suites._base import Item, ItemResult, Scorer, SuiteOptions, prompt_hash, select_indices

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

__all__ = [
    "Exam",
    "ExamItem",
    "PrivateSuite",
    "choice_letter",
    "exact_match",
    "load_exam",
    "numeric_match",
    "private",
    "regex_match",
]

Grader = Callable[[str, str], tuple[bool, Any]]
"""(response, answer) -> (passed, what was extracted from the response)."""

_NUMBER = re.compile(
    r"(?<![\w.])[-+]?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?(?:[eE][-+]?\d+)?|(?<![\w.])[-+]?\.\d+(?:[eE][-+]?\d+)?"
)


def normalise(text: str) -> str:
    """Unicode NFKC, case-folded, whitespace collapsed, wrapping quotes/markdown and a final
    sentence mark removed: what ``exact`` compares."""
    text = " ".join(unicodedata.normalize("NFKC", text).casefold().split())
    text = text.strip("\"'`*_ ")
    return text.rstrip(".!?;:, ").strip("\"'`*_ ")


def exact_match() -> Grader:
    def grade(response: str, answer: str) -> tuple[bool, Any]:
        got = normalise(response)
        return got == normalise(answer), got

    return grade


def parse_number(text: str) -> float:
    return float(text.replace(",", "").lstrip("+"))


def last_number(text: str) -> float | None:
    found = _NUMBER.findall(text)
    return parse_number(found[-1]) if found else None


def numeric_match(rel: float = 1e-6) -> Grader:
    """The last number in the response, within ``rel`` of the answer (absolute for an answer of 0)."""

    def grade(response: str, answer: str) -> tuple[bool, Any]:
        got, want = last_number(response), parse_number(answer)
        if got is None:
            return False, None
        return math.isclose(got, want, rel_tol=rel, abs_tol=rel if want == 0 else 0.0), got

    return grade


def choice_index(answer: str, choices: list[str]) -> int | None:
    """An answer given as a letter (A, B, ...) or as the full text of one choice."""
    a = answer.strip()
    if len(a) == 1 and a.isalpha() and 0 <= ord(a.upper()) - 65 < len(choices):
        return ord(a.upper()) - 65
    texts = [normalise(c) for c in choices]
    return texts.index(normalise(a)) if normalise(a) in texts else None


def extract_choice(response: str, choices: list[str]) -> int | None:
    """The choice a response picks: the whole response is a choice's text; it opens with a letter
    ("B", "(B)", "B. ..."); it says "answer is B"; exactly one choice's text appears in it; or
    exactly one "(B)" / "B)" appears. None when it cannot tell."""
    letters = "".join(chr(65 + i) for i in range(len(choices)))
    texts = [normalise(c) for c in choices]
    said = normalise(response)
    if said in texts:
        return texts.index(said)
    m = re.match(rf"^[\s*_`\"'\[(]*([{letters}])(?:[)\].:*]|\s*$)", response.strip())
    if m:
        return letters.index(m.group(1))
    said_letters = re.findall(rf"(?i:answer|option|choice)\s*(?:is|:)?\s*[\[(*]*([{letters}])\b", response)
    if said_letters:
        return letters.index(said_letters[-1])
    within = [i for i, t in enumerate(texts) if t and re.search(rf"(?<!\w){re.escape(t)}(?!\w)", said)]
    if len(within) == 1:
        return within[0]
    marked = set(re.findall(rf"\(([{letters}])\)|(?<![\w(])([{letters}])\)", response))
    flat = {a or b for a, b in marked}
    return letters.index(flat.pop()) if len(flat) == 1 else None


def choice_letter(choices: list[str]) -> Grader:
    def grade(response: str, answer: str) -> tuple[bool, Any]:
        got = extract_choice(response, choices)
        return got is not None and got == choice_index(answer, choices), None if got is None else chr(
            65 + got
        )

    return grade


REGEX_TIMEOUT_S = 1.0
"""Seconds one regex answer may take on one response: a pattern that backtracks without end
(``(a+)+$`` on a long run of a's) is an exam error naming the item, not a hung run."""


class RegexTimeout(ConfigError):
    """A regex answer took longer than its limit on a response."""


def regex_match(timeout_s: float = REGEX_TIMEOUT_S) -> Grader:
    """The answer is a regular expression that must match somewhere in the response (``re.search``
    semantics, run by the ``regex`` package with a time limit)."""

    def grade(response: str, answer: str) -> tuple[bool, Any]:
        try:
            m = regex.search(answer, response, timeout=timeout_s)
        except TimeoutError as exc:
            raise RegexTimeout(
                f"the regex answer took more than {timeout_s:g} s on a {len(response)}-character response",
                fix="simplify the pattern: nested repeats such as (a+)+ backtrack without end on some texts",
            ) from exc
        return m is not None, None if m is None else m.group(0)

    return grade


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
    if grader == "regex":
        try:
            regex.compile(answer)
        except regex.error as exc:
            return f"has an 'answer' that is not a valid regular expression ({exc.msg} at position {exc.pos})"
    return None


def _read_items(path: Path) -> tuple[ExamItem, ...]:
    if not path.is_file():
        raise ConfigError(
            f"{path} does not exist",
            fix="a private exam folder needs items.jsonl (see suites/private/README.md)",
        )
    items: list[ExamItem] = []
    seen: dict[str, int] = {}
    problems: list[str] = []
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
            choices = tuple(row["choices"]) if row.get("choices") is not None else None
            items.append(ExamItem(row["id"], row["prompt"], row["answer"], row["grader"], choices))
    if problems:
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

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)
    name: str | None = Field(None, pattern=r"^[A-Za-z0-9_.-]{1,64}$", description="Suite name: private:NAME.")
    system_prompt: str | None = Field(None, description="System message sent before every item.")
    max_tokens: int = Field(256, ge=1, description="Generation cap per item.")
    temperature: float = Field(0.0, ge=0.0, description="Sampling temperature (0: greedy).")


def _read_toml(path: Path) -> ExamConfig:
    if not path.exists():
        return ExamConfig()
    try:
        return ExamConfig.model_validate(tomllib.loads(read_text(path)))
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path} is not valid TOML: {exc}", fix="fix the line it names") from exc
    except ValidationError as exc:
        first = exc.errors()[0]  # loc and msg only: never echo a value (the system prompt is private)
        raise ConfigError(
            f"{path}: {'.'.join(map(str, first['loc']))}: {first['msg']}",
            fix="allowed keys: name, system_prompt (strings), max_tokens (integer >= 1), temperature (>= 0)",
        ) from exc


def load_exam(path: Path) -> Exam:
    """Read and validate an exam folder; raises ConfigError (exit 2) naming file and line."""
    path = Path(path).expanduser()
    if not path.is_dir():
        raise ConfigError(
            f"private exam folder {path} does not exist", fix="pass --suites private:PATH with your folder"
        )
    cfg = _read_toml(path / "exam.toml")
    items = _read_items(path / "items.jsonl")
    name = cfg.name or re.sub(r"[^A-Za-z0-9_.-]+", "_", path.resolve().name)[:64] or "exam"
    return Exam(path, name, items, cfg.system_prompt, cfg.max_tokens, cfg.temperature)


@dataclass
class PrivateSuite:
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
        return {"messages": messages, "max_tokens": cap, "temperature": self.exam.temperature}

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
            meta = {"grader": it.grader}
            out.append(Item(it.id, prompt_hash(request), it.answer, (it, request), meta, shown, secret))
        return out

    async def run(self, item: Item, scorer: Scorer, options: SuiteOptions) -> ItemResult:
        exam_item, request = item.payload
        data = await scorer.chat({**request, "seed": options.seed})  # checked by the scorer
        choice = (data.get("choices") or [{}])[0]
        text = str((choice.get("message") or {}).get("content") or "")  # null content: no answer
        passed, extracted = exam_item.grade(text)
        usage = data.get("usage") if isinstance(data.get("usage"), dict) else {}
        tokens = {k: _count(usage.get(f"{k}_tokens")) for k in ("prompt", "completion")}
        finish = choice.get("finish_reason")
        # no item text: what the gate's unanswered test reads (empty, or cut at max tokens)
        extra = {"empty": not text.strip(), "finish_reason": finish if isinstance(finish, str) else None}
        return ItemResult(text, extracted, {"pass": float(passed)}, tokens, extra=extra)


def _count(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else 0


def private(spec: str) -> PrivateSuite:
    """``private:PATH`` -> the suite, with the folder validated now (before any server starts)."""
    _, _, path = spec.partition(":")
    if not path.strip():
        raise ConfigError(
            "private: needs a folder, as in private:PATH", fix="e.g. --suites private:./my-exam"
        )
    return PrivateSuite(load_exam(Path(path)))
