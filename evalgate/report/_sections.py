"""The report's generic tables: a server's facts flattened to key/value rows, and the optional
sections (A/A noise, agreement, answers, kernel checks, throughput) rendered from whatever the
manifest or verdict.json carries, skipped when absent. Adding a section is one line in
``OPTIONAL_SECTIONS``.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, fields
from typing import Any

from evalgate.gate import Tested, Verdict
from evalgate.report import _format as fmt
from evalgate.report import throughput_svg as tp
from evalgate.report._repeatability import REPEAT_NOTE, REPEAT_TITLE, repeatability_table
from evalgate.report.answers import NOTE, OUTPUT_NOTE, answers_table, output_length_table
from evalgate.store.manifest import Manifest

__all__ = ["OPTIONAL_SECTIONS", "Section", "flatten", "optional_sections"]

TEST_COLUMNS = tuple(f.name for f in fields(Tested))
"""A gate row's test (p, adjusted p, significant, status, reason): its table's last columns, after
what the row measured, though verdict.json lists them first."""

# (key in the manifest or verdict.json, title). Adding a report section is one line here.
OPTIONAL_SECTIONS: tuple[tuple[str, str], ...] = (
    ("aa", "A/A noise floor"),
    ("agreement", "Agreement between the arms"),
    ("answers", "Answers per arm"),
    ("output_lengths", "Accuracy by output length"),
    ("repeatability", REPEAT_TITLE),
    ("kernel_check", "Kernel numerics check"),
    ("throughput", "Throughput"),
)


@dataclass(frozen=True)
class Section:
    """A generic table: ``headers`` and string ``rows``, or key/value pairs when headers is empty."""

    key: str
    title: str
    headers: list[str]
    rows: list[list[str]]
    note: str = ""
    svg: str = ""
    """An inline chart (markupsafe.Markup, built by the report package itself, never from input)."""


def flatten(value: Any, prefix: str = "") -> list[list[str]]:
    if isinstance(value, dict):
        rows: list[list[str]] = []
        for k, v in value.items():
            rows += flatten(v, f"{prefix}{k}." if isinstance(v, dict) else f"{prefix}{k}")
        return rows
    return [[fmt.clean(prefix.rstrip(".")), fmt.compact(value)]]


def optional_sections(m: Manifest, verdict: Verdict) -> list[Section]:
    data = verdict.to_dict()
    out = []
    for key, title in OPTIONAL_SECTIONS:
        value = getattr(m, key, None)  # a field, or a section a newer evalgate added
        if value is None:
            value = data.get(key)
        if value in (None, {}, []):
            continue
        if key == "answers":  # generation suites per arm (report/answers.py)
            out.append(Section(key, title, *answers_table(value), note=NOTE))
            continue
        if key == "output_lengths":  # generation suites by their answers' length (report/answers.py)
            out.append(Section(key, title, *output_length_table(value), note=OUTPUT_NOTE))
            continue
        if key == "repeatability":  # --aa both: each arm's repeat against its first run
            out.append(Section(key, title, *repeatability_table(value), note=REPEAT_NOTE))
            continue
        if key == "throughput" and isinstance(value, dict) and "levels" in value:
            out += _throughput(value, title)
            continue
        out.append(_section(key, title, _kernel_rows(value) if key == "kernel_check" else value))
    return out


def _throughput(doc: dict[str, Any], title: str) -> list[Section]:
    """throughput.json as two tables and a chart (evalgate bench, compare --with-throughput)."""
    headers, rows = tp.level_table(doc)
    cap_headers, cap_rows = tp.capacity_table(doc)
    return [
        Section("throughput", title, headers, rows, note=tp.settings_note(doc), svg=tp.throughput_chart(doc)),
        Section("kv-capacity", "KV capacity", cap_headers, cap_rows),
    ]


def _kernel_rows(value: Any) -> Any:
    """``evalgate.kernels.check`` reports nest metrics per row; flatten them into one table row each."""
    if not isinstance(value, dict):
        return value
    if value.get("skipped"):
        return {"kernels": ", ".join(value.get("kernels", [])), "skipped": value["skipped"]}
    rows = []
    for r in value.get("rows", []):
        m, t = r.get("metrics", {}), r.get("threshold", {})
        rows.append({
            "kernel": r.get("name"), "impl": r.get("impl"), "shape": r.get("shape"),
            "SQNR dB": m.get("sqnr_db"), "min SQNR dB": t.get("sqnr_db"), "cosine": m.get("cosine"),
            "max abs": m.get("max_abs"), "rel Frobenius": m.get("rel_fro"), "passed": r.get("passed"),
        })  # fmt: skip
    return rows or value


def _measured_first(keys: Iterable[str]) -> list[str]:
    keys = list(keys)
    return [k for k in keys if k not in TEST_COLUMNS] + [k for k in keys if k in TEST_COLUMNS]


def _section(key: str, title: str, value: Any) -> Section:
    """A list of dicts becomes a table; a dict of dicts a table keyed by its first column; else pairs."""
    if isinstance(value, list) and value and all(isinstance(v, dict) for v in value):
        headers = _measured_first(dict.fromkeys(k for row in value for k in row))
        rows = [[fmt.compact(row.get(h)) for h in headers] for row in value]
        return Section(key, title, [fmt.clean(h) for h in headers], rows)
    if isinstance(value, dict) and value and all(isinstance(v, dict) for v in value.values()):
        headers = _measured_first(dict.fromkeys(k for row in value.values() for k in row))
        rows = [
            [fmt.clean(str(name)), *(fmt.compact(row.get(h)) for h in headers)] for name, row in value.items()
        ]
        return Section(key, title, ["", *(fmt.clean(h) for h in headers)], rows)
    if isinstance(value, dict):
        return Section(key, title, [], flatten(value))
    return Section(key, title, [], [["", fmt.compact(value)]])
