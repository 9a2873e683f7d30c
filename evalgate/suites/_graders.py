"""The graders of private exams (``evalgate.suites.private``): pure functions of a response and
the item's answer, each returning (passed, what was extracted), so they test on strings alone."""

from __future__ import annotations

import math
import re
import unicodedata
from collections.abc import Callable
from typing import Any

import regex

from evalgate.errors import ConfigError

__all__ = [
    "REGEX_TIMEOUT_S",
    "Grader",
    "RegexTimeout",
    "choice_index",
    "choice_letter",
    "exact_match",
    "extract_choice",
    "last_number",
    "normalise",
    "numeric_match",
    "parse_number",
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
