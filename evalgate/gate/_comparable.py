"""Is the pair comparable at all? A verdict on the numerics needs two arms that differ in nothing
else the run folder can see (#44). Read before any quality verdict, from the run folder alone:

- the tokenizer: each arm's preflight fingerprint (token ids of fixed texts), or the tokenizer an
  imported lm-eval run's ``model_args`` names (two names can be one tokenizer, e.g. an FP8
  checkpoint's own repository: different names are "inconclusive", not "not comparable");
- the chat template: what each arm's preflight rendered around one fixed message (the same template
  renders the same text), and the template a server reports (SGLang's ``chat_template``);
- the limits a server reports on what it reads (``context_length``, ``max_model_len``,
  ``max_req_input_len``);
- the generation cap, per item: an item cut at its token cap (``finish_reason`` length) after k
  tokens on one arm and cut after another length, or answered at more than k tokens, on the other
  got the same prompt under two different caps;
- the sample counts: records per suite on each arm;
- an imported pair: lm-eval's version and the few-shot counts per task.

A fact both arms record alike is ``checked``; one they record differently makes the pair
"not comparable" (``verdict_for`` then never says PASS: ERROR, exit 3, naming it); one only an
arm records makes it "inconclusive", said in a note. A fact neither arm records is not counted.
Prompts are not here: ``pair_records`` already refuses a pair whose prompt hashes differ.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import field
from typing import Any, Literal

from pydantic import ConfigDict
from pydantic import dataclasses as pyd

from evalgate.arms import original
from evalgate.store.records import Pair

__all__ = ["Comparability", "comparability"]

ARMS = ("baseline", "candidate")
NAMED_ONLY = ("tokenizer named in model_args",)
"""Facts known by name only: a difference is inconclusive (two names may hold the same thing)."""
SERVER_LIMITS = ("context_length", "max_model_len", "max_req_input_len")
"""What a server reports of the most it reads: a prompt truncated on one arm only differs."""


@pyd.dataclass(frozen=True, config=ConfigDict(use_attribute_docstrings=True))
class Comparability:
    """Whether the two arms ran the same comparison, read from the run folder before any verdict."""

    status: Literal["comparable", "not comparable", "inconclusive"]
    """not comparable: a fact differs between the arms (never PASS); inconclusive: one arm does not
    record a fact the other does (a note)."""
    reasons: list[str] = field(default_factory=list)
    """What differs, or what one arm does not record, one sentence each."""
    checked: list[str] = field(default_factory=list)
    """The facts both arms record alike."""

    def summary(self) -> str:
        """One line for the terminal and the report."""
        same = f"same {', '.join(self.checked)}" if self.checked else "no fact recorded by both arms"
        if self.status == "comparable":
            return f"comparable: {same}"
        return f"{self.status}: {'; '.join(self.reasons)}" + (f" ({same})" if self.checked else "")


def comparability(
    manifest: Any,
    records: Mapping[str, Mapping[str, Mapping[Any, Any]]],
    pairs: Mapping[str, list[Pair]],
    *,
    repeats: Mapping[str, Mapping[str, list[Pair]]] | None = None,
) -> Comparability:
    """The comparability of a run folder's baseline and candidate (``RunData``'s parts); with
    ``repeats`` (repeat arm -> suite -> its original's records paired with its own: ``--aa``),
    also of each repeat arm that ran with the arm it repeats."""
    differ: list[str] = []
    one_sided: list[str] = []
    checked: list[str] = []
    for name, b, c in _facts(manifest, records):
        if b is None and c is None:
            continue
        if b is None or c is None:
            arm = "baseline" if b is None else "candidate"
            one_sided.append(f"the {arm} records no {name} (the other does: {_show(c if b is None else b)})")
        elif b != c and name in NAMED_ONLY:
            one_sided.append(
                f"different {name} (baseline {_show(b)}, candidate {_show(c)}): maybe one tokenizer"
            )
        elif b != c:
            differ.append(f"different {name}: baseline {_show(b)}, candidate {_show(c)}")
        else:
            checked.append(name)
    caps = _cap_differences(pairs)
    if caps:
        differ += caps
    elif any(_cut(p.baseline) or _cut(p.candidate) for ps in pairs.values() for p in ps):
        checked.append("generation cap")
    for arm, by_suite in (repeats or {}).items():  # after the pair's own facts, in the same lists
        if manifest.arms.get(arm) is not None:
            _compare_repeat(manifest, arm, by_suite, differ, one_sided, checked)
    status = "not comparable" if differ else "inconclusive" if one_sided or not checked else "comparable"
    if status == "inconclusive" and not one_sided:
        one_sided = ["the run folder records none of the facts compared"]
    return Comparability(status=status, reasons=differ + one_sided, checked=checked)


def _facts(
    manifest: Any, records: Mapping[str, Mapping[str, Mapping[Any, Any]]]
) -> list[tuple[str, Any, Any]]:
    """(fact, baseline's, candidate's) for every fact compared; None where an arm records none."""
    imported = manifest.imported or {}
    tokenizer, *served = _served(manifest, ARMS)
    out: list[tuple[str, Any, Any]] = [tokenizer]

    def per_arm(name: str, read: Any) -> None:
        out.append((name, *(read(arm) for arm in ARMS)))

    per_arm(NAMED_ONLY[0], lambda arm: _named_tokenizer(imported.get(arm)))
    out += served
    per_arm("lm-eval version", lambda arm: _imported(imported.get(arm), "lm_eval_version"))
    per_arm("few-shot counts", lambda arm: _imported(imported.get(arm), "n_shot"))
    per_arm("sample counts", lambda arm: _counts(records, arm))
    return out


def _served(manifest: Any, arms: tuple[str, str]) -> list[tuple[str, Any, Any]]:
    """(fact, first arm's, second arm's) of what the arms' servers tokenize, render and read."""
    a, b = (manifest.arms.get(arm) for arm in arms)
    out: list[tuple[str, Any, Any]] = [
        ("tokenizer", _fingerprint(a), _fingerprint(b)),
        ("chat template", _rendered(a), _rendered(b)),
        ("server chat template", _server(a, "chat_template"), _server(b, "chat_template")),
    ]
    return out + [(f"server {key}", _server(a, key), _server(b, key)) for key in SERVER_LIMITS]


REPEAT_LABELS = {"aa": "the baseline's repeat", "aa_candidate": "the candidate's repeat"}


def _compare_repeat(
    manifest: Any,
    arm: str,
    pairs: Mapping[str, list[Pair]],
    differ: list[str],
    one_sided: list[str],
    checked: list[str],
) -> None:
    """A repeat arm (``--aa``) against the arm it repeats: the same tokenizer, templates, limits and
    generation cap, or the A/A pair measures a launch difference, not noise. Its sample counts are
    not compared: the candidate's repeat runs a subset by design (``RunData`` counts what is missing)."""
    first = original(arm)
    label = REPEAT_LABELS.get(arm, f"the {arm} arm")
    same = []
    for name, a, b in _served(manifest, (first, arm)):
        if a is None and b is None:
            continue
        if a is None or b is None:
            who, other = (first, b) if a is None else (label, a)
            one_sided.append(f"{who} records no {name} (the other does: {_show(other)})")
        elif a != b:
            differ.append(f"different {name} on {label}: {first} {_show(a)}, repeat {_show(b)}")
        else:
            same.append(name)
    caps = _cap_differences(pairs, names=(first, "repeat"))
    differ += [f"{label}: {c}" for c in caps]
    if not caps and any(_cut(p.baseline) or _cut(p.candidate) for ps in pairs.values() for p in ps):
        same.append("generation cap")
    if same:
        checked.append(f"{label}'s {'/'.join(same)}")


def _fingerprint(info: Any) -> str | None:
    return str(info.tokenizer_fingerprint) if info is not None and info.tokenizer_fingerprint else None


def _named_tokenizer(imported: Any) -> str | None:
    args = imported.get("model_args") if isinstance(imported, Mapping) else None
    m = re.search(r"(?:^|,)\s*tokenizer=([^,]+)", args) if isinstance(args, str) else None
    return m.group(1).strip() if m else None


def _rendered(info: Any) -> tuple[str, ...] | None:
    """What the preflight rendered around its fixed message, per server of the arm."""
    if info is None:
        return None
    found = {c.detail for c in info.preflight if c.check == "chat template applied"}
    return tuple(sorted(found)) or None


def _server(info: Any, key: str) -> Any:
    return None if info is None else getattr(info.server, key)  # a ServerFacts field: a typo raises


def _imported(info: Any, key: str) -> Any:
    return info.get(key) if isinstance(info, Mapping) else None


def _counts(records: Mapping[str, Mapping[str, Mapping[Any, Any]]], arm: str) -> dict[str, int] | None:
    counts = {suite: len(arms[arm]) for suite, arms in records.items() if arm in arms}
    return counts or None


def _cut(record: Any) -> int | None:
    """Tokens of an answer cut at its cap; None when it was not cut (or does not say)."""
    if record.extra.finish_reason != "length":
        return None
    n = (record.tokens or {}).get("completion")
    return int(n) if isinstance(n, (int, float)) else None


def _cap_differences(pairs: Mapping[str, list[Pair]], *, names: tuple[str, str] = ARMS) -> list[str]:
    """Per suite, the first item that shows the arms' caps differ: same prompt, cut at different
    lengths, or cut after k tokens on one arm and longer than k on the other (``names``: the
    pairs' two sides, as the message calls them)."""
    out = []
    for suite, ps in pairs.items():
        for p in ps:
            b, c = _cut(p.baseline), _cut(p.candidate)
            nb, nc = _completion(p.baseline), _completion(p.candidate)
            if (
                (b is not None and nc is not None and nc > b)
                or (c is not None and nb is not None and nb > c)
                or (b is not None and c is not None and b != c)
            ):
                out.append(
                    f"different generation cap on {suite} (item {p.item_id!r}: {names[0]} {_cap_text(b, nb)}, "
                    f"{names[1]} {_cap_text(c, nc)})"
                )
                break
    return out


def _completion(record: Any) -> int | None:
    n = (record.tokens or {}).get("completion")
    return int(n) if isinstance(n, (int, float)) else None


def _cap_text(cut: int | None, n: int | None) -> str:
    return f"cut at {cut} tokens" if cut is not None else f"{n} tokens, not cut"


def _show(value: Any) -> str:
    if isinstance(value, tuple):
        return " / ".join(map(str, value))
    if isinstance(value, Mapping):
        return ", ".join(f"{k} {v}" for k, v in value.items())
    return str(value)
