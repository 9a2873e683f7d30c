"""Private exam: graders, folder validation (exit 2 with file and line), the suite, and privacy."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from evalgate.errors import ConfigError
from evalgate.suites import SuiteOptions, default_registry
from evalgate.suites._graders import (
    choice_letter,
    exact_match,
    extract_choice,
    last_number,
    numeric_match,
    regex_match,
)
from evalgate.suites.private import load_exam, private

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "suites" / "private" / "example"


# -- graders ------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("response", "answer", "ok"),
    [
        ("Paris", "Paris", True),
        ("  paris.\n", "Paris", True),
        ("**Paris**", "paris", True),
        ("New   York", "new york", True),
        ("Paris, France", "Paris", False),
        ("The answer is Paris.", "Paris", False),
        ("ﬁne", "fine", True),  # NFKC
    ],
)
def test_exact(response: str, answer: str, ok: bool) -> None:
    assert exact_match()(response, answer)[0] is ok


@pytest.mark.parametrize(
    ("response", "answer", "ok"),
    [
        ("144", "144", True),
        ("12 x 12 = 144.", "144", True),
        ("The total is 1,234.5 dollars", "1234.5", True),
        ("first 3 then 5", "3", False),  # the last number counts
        ("0.1 + 0.2 = 0.30000000000000004", "0.3", True),  # within 1e-6 relative
        ("0.3001", "0.3", False),
        ("-7 degrees", "-7", True),
        ("range 3-4", "-4", False),  # a hyphen between numbers is not a sign
        ("about 1e3", "1000", True),
        ("0", "0", True),
        ("no number", "1", False),
        ("40 km/h", "40.0", True),
    ],
)
def test_numeric(response: str, answer: str, ok: bool) -> None:
    assert numeric_match(rel=1e-6)(response, answer)[0] is ok


def test_last_number() -> None:
    assert last_number("a 1, b 2,000 and c 3.5%") == 3.5
    assert last_number("nothing") is None


CHOICES = ["Venus", "Mars", "Jupiter", "Saturn"]


@pytest.mark.parametrize(
    ("response", "want"),
    [
        ("B", 1),
        ("(B)", 1),
        ("B) Mars", 1),
        ("**C**", 2),
        ("C. Jupiter, because...", 2),
        ("The answer is D.", 3),
        ("Answer: (a)", None),  # lowercase letters are words, not choices
        ("mars", 1),
        ("It is Mars, the fourth planet.", 1),
        ("Mars or Venus", None),
        ("A planet with a red surface", None),  # "A" as an article is not a choice
        ("I would pick (D) here", 3),
        ("E", None),  # out of range
    ],
)
def test_extract_choice(response: str, want: int | None) -> None:
    assert extract_choice(response, CHOICES) == want


def test_choice_grader_accepts_letter_or_text_answers() -> None:
    grade = choice_letter(CHOICES)
    assert grade("B", "B") == (True, "B")
    assert grade("The answer is B", "Mars") == (True, "B")
    assert grade("Jupiter", "b") == (False, "C")
    assert grade("no idea", "B") == (False, None)


def test_regex() -> None:
    grade = regex_match()
    assert grade("I'd say Blue.", r"(?i)\b(red|blue|yellow)\b") == (True, "Blue")
    assert grade("green", r"(?i)\b(red|blue|yellow)\b") == (False, None)
    assert grade("42 apples", r"^42$")[0] is False and grade("42", r"^42$")[0] is True


# -- the folder -----------------------------------------------------------------------------------
def write(folder: Path, lines: list[Any], toml: str | None = None) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    text = "\n".join(x if isinstance(x, str) else json.dumps(x) for x in lines) + "\n"
    (folder / "items.jsonl").write_text(text)
    if toml is not None:
        (folder / "exam.toml").write_text(toml)
    return folder


GOOD = {"id": "q1", "prompt": "SECRET-PROMPT", "answer": "SECRET-ANSWER", "grader": "exact"}


def test_example_folder_covers_all_graders() -> None:
    exam = load_exam(EXAMPLE)
    assert exam.name == "example" and exam.max_tokens == 64 and exam.temperature == 0.0
    assert {it.grader for it in exam.items} == {"exact", "numeric", "choice", "regex"}
    for it in exam.items:  # each item's own answer passes its grader
        sample = "Red" if it.grader == "regex" else it.answer
        assert it.grade(sample)[0], it.id


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("{not json", "is not valid JSON"),
        ("[1, 2]", "is not a JSON object"),
        ({**GOOD, "grader": "fuzzy"}, "unknown 'grader'"),
        ({k: v for k, v in GOOD.items() if k != "answer"}, "needs 'answer'"),
        ({**GOOD, "id": ""}, "needs 'id'"),
        ({**GOOD, "answer": 42}, "needs 'answer' as a non-empty string"),
        ({**GOOD, "colour": "red"}, "unknown key(s) 'colour'"),
        ({**GOOD, "grader": "numeric", "answer": "forty"}, "not a number"),
        ({**GOOD, "grader": "regex", "answer": "(unclosed"}, "not a valid regular expression"),
        ({**GOOD, "grader": "choice"}, "needs 'choices'"),
        ({**GOOD, "grader": "choice", "choices": ["x", "y"], "answer": "C"}, "neither a choice letter"),
        ({**GOOD, "choices": ["x", "y"]}, "only the choice grader"),
    ],
)
def test_malformed_line_names_file_and_line(tmp_path: Path, line: Any, message: str) -> None:
    folder = write(tmp_path / "exam", [GOOD | {"id": "ok"}, "", line])
    with pytest.raises(ConfigError) as err:
        load_exam(folder)
    assert err.value.exit_code == 2
    assert str(err.value).startswith(f"{folder / 'items.jsonl'}:3: ")
    assert message in str(err.value)
    assert "SECRET" not in err.value.render()  # an error never quotes an item's text


def test_duplicate_ids_are_refused(tmp_path: Path) -> None:
    folder = write(tmp_path / "exam", [GOOD, GOOD | {"id": "q2"}, GOOD])
    with pytest.raises(ConfigError, match=r"items.jsonl:3: repeats the id 'q1' of line 1"):
        load_exam(folder)


def test_all_problems_are_listed(tmp_path: Path) -> None:
    folder = write(tmp_path / "exam", ["{", "{", GOOD])
    with pytest.raises(ConfigError) as err:
        load_exam(folder)
    assert ":1:" in str(err.value) and ":2:" in err.value.detail


@pytest.mark.parametrize(
    ("toml", "message"),
    [
        ("max_tokens = 0", "max_tokens"),
        ("temperature = -1.0", "temperature"),
        ("max_tokens = '64'", "max_tokens"),
        ("colour = 'red'", "colour"),
        ("name = 'has space'", "name"),
        ("system_prompt = ", "not valid TOML"),
    ],
)
def test_bad_exam_toml(tmp_path: Path, toml: str, message: str) -> None:
    folder = write(tmp_path / "exam", [GOOD], toml)
    with pytest.raises(ConfigError, match=message):
        load_exam(folder)


def test_missing_folder_and_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="does not exist"):
        private(f"private:{tmp_path / 'nope'}")
    (tmp_path / "empty").mkdir()
    with pytest.raises(ConfigError, match=r"items\.jsonl does not exist"):
        private(f"private:{tmp_path / 'empty'}")
    write(tmp_path / "blank", [""])
    with pytest.raises(ConfigError, match="holds no items"):
        private(f"private:{tmp_path / 'blank'}")
    with pytest.raises(ConfigError, match="needs a folder"):
        private("private:")


def test_registry_resolves_private_and_validates_early(tmp_path: Path) -> None:
    suite = default_registry().get(f"private:{EXAMPLE}")
    assert suite.name == "private:example" and suite.private and suite.metrics == ("pass",)
    write(tmp_path / "broken", ["{"])
    with pytest.raises(ConfigError):
        default_registry().get(f"private:{tmp_path / 'broken'}")


def test_name_defaults_to_folder_name(tmp_path: Path) -> None:
    suite = private(f"private:{write(tmp_path / 'my exam', [GOOD])}")
    assert suite.name == "private:my_exam"


def test_items_carry_no_text_outside_the_payload(tmp_path: Path) -> None:
    folder = write(tmp_path / "exam", [GOOD], 'system_prompt = "SECRET-SYSTEM"\nmax_tokens = 99\n')
    suite = private(f"private:{folder}")
    (item,) = suite.load(SuiteOptions(max_gen_tokens=10), None)
    assert item.display == {} and item.extra.to_dict() == {"grader": "exact"} and item.item_id == "q1"
    assert "SECRET" not in json.dumps([item.item_id, item.prompt_hash, item.display, item.extra.to_dict()])
    request = item.payload[1]
    assert request["messages"][0] == {"role": "system", "content": "SECRET-SYSTEM"}
    assert request["max_tokens"] == 10 and request["temperature"] == 0.0
    (shown,) = suite.load(SuiteOptions(max_gen_tokens=10, reveal_private=True), None)
    assert shown.display == {"prompt": "SECRET-PROMPT", "choices": None}  # only when opted in
    assert shown.prompt_hash == item.prompt_hash


def test_run_grades_the_chat_reply() -> None:
    class Replies:
        def __init__(self) -> None:
            self.sent: list[dict[str, Any]] = []

        async def chat(self, payload: dict[str, Any]) -> dict[str, Any]:
            self.sent.append(payload)
            prompt = payload["messages"][-1]["content"]
            text = "B) Mars" if "Red Planet" in prompt else "It is 144." if "12 times" in prompt else "no"
            return {
                "choices": [{"message": {"content": text}}],
                "usage": {"prompt_tokens": 5, "completion_tokens": 2},
            }

    suite = private(f"private:{EXAMPLE}")
    scorer = Replies()
    items = {it.item_id: it for it in suite.load(SuiteOptions(seed=3), None)}
    out = {k: asyncio.run(suite.run(it, scorer, SuiteOptions(seed=3))) for k, it in items.items()}  # type: ignore[arg-type]
    assert out["ex-choice-1"].metrics == {"pass": 1.0} and out["ex-choice-1"].extracted == "B"
    assert out["ex-numeric-1"].metrics == {"pass": 1.0} and out["ex-exact-1"].metrics == {"pass": 0.0}
    assert all(p["seed"] == 3 and p["messages"][0]["role"] == "system" for p in scorer.sent)
