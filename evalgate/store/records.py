"""Per-item records: the versioned schema, the append-only JSONL store, and pairing.

``Record`` (a pydantic dataclass; docs/schemas/record.schema.json is generated from it) is
schema 1: one JSON object per line, one line per item per arm, written and flushed as each
item finishes. Keys (in this order): schema, run_id, arm, variant, suite, suite_version,
item_id, repeat, prompt_hash, target, response, extracted, metrics, tokens, latency_s, error,
extra (typed as ``RecordExtra``, evalgate.store.facts). A later line for the same (suite, item_id,
repeat) supersedes an earlier one, which is how a resumed run retries an item that errored. A
line cut short by a crash is dropped. A line of another run (its ``run_id``) is refused, never
reused; a line without one (written before every record carried it) belongs to the run of the
folder's manifest.

Each line is strict JSON and valid UTF-8 whatever a server sent (``evalgate.store.record_json``:
a NaN or infinity is written as null with ``extra.nonfinite`` saying what it was, a lone
surrogate makes the line ASCII-only with ``extra.surrogates``); the file is read and written
only as a regular file in the run folder, bounded (``evalgate.store.files``).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, Literal, TypeVar

from pydantic import ConfigDict, TypeAdapter, ValidationError
from pydantic import dataclasses as pyd

from evalgate.errors import ConfigError
from evalgate.store.facts import READ, RecordExtra
from evalgate.store.files import append_bytes, entry_exists, iter_lines, make_folder, truncate_torn_tail
from evalgate.store.record_json import NONFINITE, dumps_record, restore_nonfinite

__all__ = [
    "SCHEMA",
    "Pair",
    "Record",
    "RecordStore",
    "errors_as_wrong",
    "pair_records",
    "parse_record",
    "read_records",
    "safe_name",
]

SCHEMA = 1
K = TypeVar("K")


@pyd.dataclass(frozen=True, config=ConfigDict(extra="forbid", use_attribute_docstrings=True))
class Record:
    """One item on one arm: what was sent (by hash), what came back, and its metrics."""

    run_id: str
    arm: str
    """baseline, candidate or aa (the baseline launched again)."""
    variant: str
    suite: str
    suite_version: int
    item_id: str
    repeat: int
    prompt_hash: str
    """Hash of exactly what was sent; both arms' records of an item must have the same."""
    target: Any
    """The reference answer (None for a private suite)."""
    response: Any
    """Text, per-choice [loglik, greedy] pairs, or a chat message (None for a private suite)."""
    extracted: Any
    """The answer the scorer read from the response."""
    metrics: dict[str, float]
    """Per metric 0 or 1 (the suite's primary metric first); empty when the item failed."""
    tokens: dict[str, int] = field(default_factory=dict)
    latency_s: float = 0.0
    error: str | None = None
    """Why the item failed after retries; a later record for the item supersedes this one."""
    extra: RecordExtra = field(default_factory=RecordExtra)
    """What the item was and facts about its answer (``RecordExtra``; a dict is validated into it)."""
    schema: Literal[1] = SCHEMA

    def to_json(self) -> str:
        data = asdict(self)
        data["extra"] = self.extra.to_dict()
        ordered = {"schema": data.pop("schema"), **data}
        return dumps_record(ordered, _jsonable)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Record:
        _check_schema(data)
        return _PARSE.validate_python(data, context=READ)  # a file's: keys not known are kept

    @property
    def key(self) -> tuple[str, str, int]:
        return (self.suite, self.item_id, self.repeat)


def _check_schema(data: Any) -> None:
    found = data.get("schema") if isinstance(data, dict) else None
    if found != SCHEMA:
        raise ConfigError(
            f"record schema {found!r} is not {SCHEMA}",
            fix="re-render with the evalgate version that wrote this run",
        )


_PARSE = TypeAdapter(Record)
_NONFINITE_KEY = f'"{NONFINITE}":'


def parse_record(line: str) -> Record:
    """One JSONL line as a validated Record (straight from JSON: the fast path for big runs)."""
    if _NONFINITE_KEY in line:  # values written as null go back to NaN or inf first
        data = json.loads(line)
        _check_schema(data)
        return Record.from_dict(restore_nonfinite({"run_id": "", **data}))
    try:
        return _PARSE.validate_json(line, context=READ)
    except ValidationError as exc:
        errors = exc.errors()
        if any(e["type"] == "json_invalid" for e in errors):  # Python's json also takes lone surrogates
            return Record.from_dict(json.loads(line))
        if any(e["type"] == "missing" and e["loc"][:1] == ("run_id",) for e in errors):
            data = json.loads(line)  # an old record: the run is the folder's
            if isinstance(data, dict):
                return Record.from_dict({**data, "run_id": ""})
        if any(e["loc"][:1] == ("schema",) for e in errors):
            _check_schema(json.loads(line))
        raise


def _jsonable(obj: object) -> object:
    if hasattr(obj, "item"):
        return obj.item()  # numpy scalars
    if isinstance(obj, (set, tuple)):
        return list(obj)
    return str(obj)


def safe_name(name: str) -> str:
    """A suite or arm name as a file name (``private:/path/exam`` -> ``private__path_exam``)."""
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", name)


class RecordStore:
    """The ``items/`` folder of a run: one append-only JSONL file per (suite, arm). With ``run_id``,
    a record of any other run is refused (exit 2) instead of being reused."""

    def __init__(self, run_dir: Path, run_id: str | None = None) -> None:
        self.dir = Path(run_dir) / "items"
        self.run_id = run_id

    def path(self, suite: str, arm: str) -> Path:
        return self.dir / f"{safe_name(suite)}.{safe_name(arm)}.jsonl"

    def load(
        self, suite: str, arm: str, *, check: Callable[[Record], str | None] | None = None
    ) -> dict[tuple[str, str, int], Record]:
        """The latest record per item; repairs a torn last line so appends stay valid JSONL.
        ``check``: why a record cannot be used (refused naming the file and line), or None."""
        path = self.path(suite, arm)
        if not entry_exists(path):
            return {}
        truncate_torn_tail(path)
        out = {}
        for r in read_records(path, check=check):
            if self.run_id is not None and r.run_id and r.run_id != self.run_id:
                raise ConfigError(
                    f"{path} holds records of run {r.run_id}, not of this run ({self.run_id})",
                    fix="records are never reused across runs: move that file out of the run folder, "
                    "or start the run in a fresh --out folder",
                )
            out[r.key] = r
        return out

    def append(self, record: Record) -> None:
        path = self.path(record.suite, record.arm)
        make_folder(path.parent)
        append_bytes(path, (record.to_json() + "\n").encode("utf-8"))

    def all_paths(self) -> list[Path]:
        return sorted(self.dir.glob("*.jsonl")) if self.dir.exists() else []


def read_records(path: Path, *, check: Callable[[Record], str | None] | None = None) -> Iterator[Record]:
    """Every complete line of an items file as a Record (a regular file, bounded: store.files);
    a record ``check`` refuses is an error naming the file and line, never skipped."""
    for lineno, raw in enumerate(iter_lines(path), 1):
        if not raw.endswith(b"\n"):
            return  # torn by a crash mid-write; the item reruns on resume
        try:
            record = parse_record(raw.decode("utf-8"))
        except UnicodeDecodeError as exc:
            raise ConfigError(
                f"{path}:{lineno} is not UTF-8 text",
                fix="remove that line; its item will rerun with --resume",
            ) from exc
        except (json.JSONDecodeError, ValidationError) as exc:
            raise ConfigError(
                f"{path}:{lineno} is not a valid record: {exc}",
                fix="remove that line; its item will rerun with --resume",
            ) from exc
        why = check(record) if check is not None else None
        if why is not None:
            raise ConfigError(
                f"{path}:{lineno} ({record.item_id}) cannot be compared: {why}",
                fix="remove that line; its item will rerun with --resume",
            )
        yield record


def errors_as_wrong(records: Mapping[K, Record], metrics: Iterable[str]) -> dict[K, Record]:
    """``--errors-as-wrong``: an item that failed after retries scores 0 on every metric (its error
    moves to ``extra``), so it pairs and counts as wrong on that arm instead of leaving a gap."""
    zero = dict.fromkeys(metrics, 0.0)
    return {
        key: replace(r, metrics=zero, error=None, extra=r.extra.updated(error=r.error)) if r.error else r
        for key, r in records.items()
    }


@dataclass(frozen=True)
class Pair:
    item_id: str
    repeat: int
    baseline: Record
    candidate: Record


def pair_records(baseline: Iterable[Record], candidate: Iterable[Record], *, suite: str) -> list[Pair]:
    """Pair by (item_id, repeat); refuse when a pair's prompts differ (never compare different prompts)."""
    base = {(r.item_id, r.repeat): r for r in baseline if r.error is None}
    cand = {(r.item_id, r.repeat): r for r in candidate if r.error is None}
    pairs = []
    mismatched = []
    for key in sorted(base.keys() & cand.keys()):
        b, c = base[key], cand[key]
        if b.prompt_hash != c.prompt_hash:
            mismatched.append(key[0])
            continue
        pairs.append(Pair(key[0], key[1], b, c))
    if mismatched:
        raise ConfigError(
            f"{suite}: {len(mismatched)} item(s) were sent with different prompts to the two arms "
            f"(first: {mismatched[0]})",
            fix="both arms must use the same items, few-shot seed and suite version; rerun both arms",
        )
    return pairs
