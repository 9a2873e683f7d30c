"""RULER-style long-context items, generated (Hsieh et al. 2024, "RULER: What's the Real Context
Size of Your Long-Context Language Models?", NVIDIA): pure functions, no server, no I/O.

An item is a ``Spec``: the task, the target length in tokens, the needles, the question, the
answer prefix and a seeded filler stream. The spec is all the plan knows (it has no tokenizer);
``assemble(spec, k)`` makes the prompt text with ``k`` filler words, and the suite chooses ``k``
at run time with the server's tokenizer. A needle goes in at the filler boundary (a sentence
end, or between passages for ``qa``) nearest its depth, so where it lands is a fact of the spec.

Tasks (RULER's names; our own wording):
- ``niah_single``: one key with one 7-digit value hidden in the filler;
- ``niah_multikey``: the same among distractor needles for other keys;
- ``niah_multivalue``: one key with four values, all must be returned;
- ``vt``: variable tracking, a chain ``VAR A = 12345``, ``VAR B = VAR A``, ... spread over the
  text with one distractor chain; every name bound to the value must be returned;
- ``qa``: a GSM8K problem and its worked solution placed among other problems; the question is
  the problem, the answer its final number (needs the local GSM8K files).

Scoring is RULER's string_match_all: 1 when every required value appears in the response
(case-insensitive), else 0, so outcomes are binary and pair per item.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

__all__ = [
    "GENERATOR_VERSION",
    "NOISE",
    "TASKS",
    "Assembled",
    "Needle",
    "Spec",
    "assemble",
    "digest",
    "gsm8k_passage",
    "make_spec",
    "string_match_all",
]

GENERATOR_VERSION = 2
"""Part of every prompt hash: a change to the wording or the draws makes new items."""
TASKS = ("niah_single", "niah_multikey", "niah_multivalue", "vt", "qa")
NOISE = (
    "The river runs past the old mill. The hills are quiet in the evening. "
    "A bird sings somewhere far away. Here we go again. Back and forth, day after day."
)
"""Filler when there is no local text: a fixed paragraph repeated (RULER's noise haystack)."""

_ADJ = (
    "amber bold brave bright calm clever cold crisp curious dark eager early faint fancy fierce "
    "gentle giant golden grand green happy hidden hollow humble icy jolly keen kind lively lonely "
    "lucky mellow misty noble odd pale patient proud quick quiet rapid rare red rough royal rusty "
    "shiny silent silver simple sleepy smooth snowy solid spicy steady stormy sunny swift tall "
    "tender tiny vivid warm wild wise young"
).split()
_NOUN = (
    "anchor apple arrow badger banner basket beacon berry bridge brook candle canyon castle cedar "
    "cloud comet copper coral cottage crane crystal desert dragon eagle ember falcon feather fern "
    "forest fountain garden glacier harbor hawk island ivy jungle kettle lantern lemon lily maple "
    "meadow mirror moon mountain needle oak ocean orchard otter owl pebble pepper pine planet "
    "pond quartz raven river rocket saddle shell spruce summit thistle tiger tower valley willow"
).split()
_INSTRUCTION = {
    "niah": "A special magic number is hidden within the following text. Make sure to memorize it. "
    "I will quiz you about the number afterwards.",
    "vt": "Memorize and track the chain(s) of variable assignment hidden in the following text.",
    "qa": "Answer the question based on the given documents. Only give me the answer and do not "
    "output any other words.\n\nThe following are given documents.",
}


@dataclass(frozen=True)
class Needle:
    """One sentence put into the filler at ``depth`` (0: the start, 1: the end)."""

    text: str
    depth: float


@dataclass(frozen=True)
class Spec:
    """Everything that decides one item's prompt except the tokenizer."""

    task: str
    length: int
    """Target tokens: the prompt plus the answer room."""
    depth: float | None
    """Where the answer sits (the first value for multivalue); None for vt (spread over the text)."""
    needles: tuple[Needle, ...]
    question: str
    answer_prefix: str
    answers: tuple[str, ...]
    """Every value the response must contain."""
    instruction: str
    filler: tuple[str, ...]
    """Filler units in order (sentences, or passages for qa), repeated as needed."""
    filler_key: str
    """Names the filler's source text (its digest) for the prompt hash."""
    separator: str = " "
    """Between units: a space for sentences, a blank line for qa's documents."""

    def as_dict(self) -> dict[str, object]:
        """What the prompt hash covers: the spec itself (filler by digest: it can be long)."""
        return {
            "version": GENERATOR_VERSION,
            "task": self.task,
            "length": self.length,
            "depth": self.depth,
            "needles": [(n.text, n.depth) for n in self.needles],
            "question": self.question,
            "answer_prefix": self.answer_prefix,
            "answers": list(self.answers),
            "instruction": self.instruction,
            "filler": self.filler_key,
            "separator": self.separator,
        }


def make_spec(
    task: str,
    length: int,
    depth: float,
    rng: np.random.Generator,
    *,
    filler: Sequence[str] | None = None,
    passages: Sequence[tuple[str, str, str]] = (),
    source: str = "",
) -> Spec:
    """The spec of one item; ``filler`` (natural sentences) or the noise paragraph when None;
    ``passages`` ((question, solution, answer) from GSM8K) are needed for qa only; ``source``
    names the local text (a digest) for the prompt hash."""
    if task == "qa":
        return _qa(length, depth, rng, passages, source)
    units = tuple(_shuffled(filler, rng)) if filler else (NOISE,)
    key = source if filler else f"noise:{digest([NOISE])}"
    if task == "vt":
        return _vt(length, rng, units, key)
    keys = _keys(rng, 4)
    values = _values(rng, 4)
    key = keys[0]
    ask = f"What is the special magic number for {key} mentioned in the provided text?"
    prefix = f"The special magic number for {key} mentioned in the provided text is"
    needles = [Needle(_needle(key, values[0]), depth)]
    if task == "niah_multikey":  # distractors: other keys, each at its own seeded depth
        needles += [
            Needle(_needle(k, v), float(rng.random())) for k, v in zip(keys[1:], values[1:], strict=True)
        ]
        answers: tuple[str, ...] = (values[0],)
    elif task == "niah_multivalue":  # the same key four times; the response must hold every value
        needles += [Needle(_needle(key, v), float(rng.random())) for v in values[1:]]
        answers = tuple(values)
        ask = f"What are all the special magic numbers for {key} mentioned in the provided text?"
        prefix = f"The special magic numbers for {key} mentioned in the provided text are"
    elif task == "niah_single":
        answers = (values[0],)
    else:
        raise ValueError(f"unknown long_context task {task!r}")
    return Spec(task, length, depth, tuple(needles), ask, prefix, answers, _INSTRUCTION["niah"], units, key)


def _vt(length: int, rng: np.random.Generator, units: tuple[str, ...], key: str) -> Spec:
    """Two chains of five names, one per value, each spread evenly over the text (RULER's layout)."""
    names = _names(rng, 10)
    value, other = _values(rng, 2, digits=5)
    needles = []
    for chain, val, offset in ((names[:5], value, 0.0), (names[5:], other, 0.5 / 5)):
        for i, name in enumerate(chain):
            bound = val if i == 0 else f"VAR {chain[i - 1]}"
            needles.append(Needle(f"VAR {name} = {bound}.", (i + 0.25) / 5 + offset))
    ask = f"Question: Find all variables that are assigned the value {value} in the text above."
    prefix = f"Answer: The variables assigned the value {value} are:"
    return Spec(
        "vt", length, None, tuple(needles), ask, prefix, tuple(names[:5]), _INSTRUCTION["vt"], units, key
    )


def _qa(
    length: int, depth: float, rng: np.random.Generator, passages: Sequence[tuple[str, str, str]], source: str
) -> Spec:
    """One problem with its solution (the gold document) among the others as distractors."""
    if not passages:
        raise ValueError("the qa task needs passages (GSM8K text in --data-dir)")
    order = rng.permutation(len(passages))
    question, solution, answer = passages[int(order[0])]
    gold = Needle(f"{question}\n{solution}", depth)
    others = tuple(f"{q}\n{s}" for q, s, _ in (passages[int(i)] for i in order[1:]))
    ask = f"Question: {question}"
    prefix = "Answer:"
    return Spec(
        "qa", length, depth, (gold,), ask, prefix, (answer,), _INSTRUCTION["qa"], others, source, "\n\n"
    )


def _needle(key: str, value: str) -> str:
    return f"One of the special magic numbers for {key} is: {value}."


def _keys(rng: np.random.Generator, n: int) -> list[str]:
    pairs = rng.choice(len(_ADJ) * len(_NOUN), size=n, replace=False)
    return [f"{_ADJ[int(p) // len(_NOUN)]}-{_NOUN[int(p) % len(_NOUN)]}" for p in pairs]


def _values(rng: np.random.Generator, n: int, *, digits: int = 7) -> list[str]:
    low = 10 ** (digits - 1)
    return [str(int(v)) for v in rng.choice(9 * low, size=n, replace=False) + low]


def _names(rng: np.random.Generator, n: int) -> list[str]:
    out: list[str] = []
    while len(out) < n:
        name = "".join(chr(65 + int(c)) for c in rng.integers(0, 26, size=5))
        if name not in out:
            out.append(name)
    return out


def _shuffled(units: Sequence[str], rng: np.random.Generator) -> list[str]:
    return [units[int(i)] for i in rng.permutation(len(units))]


def digest(units: Sequence[str]) -> str:
    """A short digest of a list of texts (names a filler source in prompt hashes)."""
    h = hashlib.sha256()
    for u in units:
        h.update(u.encode())
        h.update(b"\x00")
    return h.hexdigest()[:16]


@dataclass(frozen=True)
class Assembled:
    """A prompt's body (instruction, haystack with needles, question; the answer prefix is the
    caller's, after the chat template's assistant turn or a newline) and where each needle went."""

    text: str
    offsets: tuple[int, ...]
    """Character offset of each needle in ``text``, in ``spec.needles`` order."""
    haystack: tuple[int, int]
    """Character span of the haystack in ``text``."""


def assemble(spec: Spec, k: int) -> Assembled:
    """The prompt body with the first ``k`` filler words (units repeated as needed, the last one
    cut at a word); each needle goes in at the unit boundary nearest ``depth * k``."""
    units: list[list[str]] = []
    total = 0
    i = 0
    while total < k:
        words = spec.filler[i % len(spec.filler)].split(" ")
        take = words[: k - total]
        units.append(take)
        total += len(take)
        i += 1
    bounds = np.cumsum([0] + [len(u) for u in units])  # word index of each boundary
    slots: dict[int, list[int]] = {}
    for n, needle in enumerate(spec.needles):
        b = int(np.argmin(np.abs(bounds - needle.depth * k)))
        slots.setdefault(b, []).append(n)
    pieces: list[tuple[str, int | None]] = []  # (text, needle index or None)
    for b in range(len(units) + 1):
        pieces += [
            (spec.needles[n].text, n) for n in sorted(slots.get(b, []), key=lambda n: spec.needles[n].depth)
        ]
        if b < len(units):
            pieces.append((" ".join(units[b]), None))
    head = spec.instruction + "\n\n"
    text, offsets = head, [0] * len(spec.needles)
    for j, (piece, n) in enumerate(pieces):
        if j:
            text += spec.separator
        if spec.task == "qa":  # documents numbered in the order they appear
            text += f"Document {j + 1}:\n"
        if n is not None:
            offsets[n] = len(text)
        text += piece
    end = len(text)
    text += f"\n\n{spec.question}"  # the answer prefix follows, where the prompt's form puts it
    return Assembled(text, tuple(offsets), (len(head), end))


def string_match_all(response: str, answers: Sequence[str]) -> float:
    """RULER's string_match_all for one item: 1.0 when every answer occurs in the response
    (case-insensitive), else 0.0."""
    low = response.lower()
    return float(all(a.lower() in low for a in answers))


_CALC = re.compile(r"<<[^>]*>>")


def gsm8k_passage(question: str, answer: str) -> tuple[str, str, str]:
    """(question, worked solution in prose, final number) from one GSM8K row."""
    steps, _, final = answer.rpartition("####")
    final = final.strip().replace(",", "")
    solution = " ".join(_CALC.sub("", steps).split())
    return " ".join(question.split()), f"{solution} The answer is {final}.", final
