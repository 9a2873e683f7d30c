"""JSON Schemas of a run folder's documents, generated from the models that write them.

=====================  ===========================================  ============================
document               model                                        schema file
=====================  ===========================================  ============================
manifest.json          ``evalgate.store.manifest.Manifest`` (schema 2)    manifest.schema.json
items/*.jsonl lines    ``evalgate.store.records.Record`` (schema 1)       record.schema.json
verdict.json           ``evalgate.gate.Verdict`` (schema 1)         verdict.schema.json
throughput.json        ``evalgate.throughput.ThroughputDoc`` (1)    throughput.schema.json
probe.json             ``evalgate.store.probe_report.ProbeReport`` (2)  probe.schema.json
=====================  ===========================================  ============================

A record's ``extra`` and an arm's ``server`` are open sections typed in ``evalgate.store.facts``
(``RecordExtra``, ``ServerFacts``): every key evalgate writes is a documented field (an unknown
key is refused when written), and keys a file holds that are not fields are kept when read.

The files live in docs/schemas/. After changing a model, regenerate them::

    python -m evalgate.schemas            # rewrite docs/schemas/*.schema.json
    python -m evalgate.schemas --check    # exit 1, naming the stale files, if any differs

tests/test_schemas.py runs the check, so a model and its schema cannot drift apart.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pydantic import TypeAdapter

from evalgate.gate import Verdict
from evalgate.store.manifest import Manifest
from evalgate.store.probe_report import ProbeReport
from evalgate.store.records import Record
from evalgate.throughput import ThroughputDoc

__all__ = ["DOCUMENTS", "FOLDER", "json_schema", "main", "stale", "write"]

DOCUMENTS: dict[str, Any] = {
    "manifest": Manifest,
    "record": Record,
    "verdict": Verdict,
    "throughput": ThroughputDoc,
    "probe": ProbeReport,
}
FOLDER = Path(__file__).resolve().parent.parent / "docs" / "schemas"
DIALECT = "https://json-schema.org/draft/2020-12/schema"


def json_schema(name: str) -> dict[str, Any]:
    """The JSON Schema (draft 2020-12) of document ``name``, as a reader validates it."""
    schema = TypeAdapter(DOCUMENTS[name]).json_schema(mode="validation")
    if name == "manifest":
        _embed_throughput(schema)
    return {"$schema": DIALECT, "$id": f"{name}.schema.json", **schema}


def _embed_throughput(schema: dict[str, Any]) -> None:
    """The manifest keeps its throughput section as the plain document (``Manifest`` checks it
    against ``ThroughputDoc`` on load); its schema says so with ThroughputDoc's own definition."""
    inner = TypeAdapter(ThroughputDoc).json_schema(mode="validation")
    defs = schema.setdefault("$defs", {})
    defs.update(inner.pop("$defs", {}))
    defs["ThroughputDoc"] = inner
    field = schema["properties"]["throughput"]
    schema["properties"]["throughput"] = {
        "anyOf": [{"$ref": "#/$defs/ThroughputDoc"}, {"type": "null"}],
        "default": None,
        "description": field.get("description", ""),
    }


def _text(name: str) -> str:
    return json.dumps(json_schema(name), indent=2, ensure_ascii=False) + "\n"


def _path(folder: Path, name: str) -> Path:
    return folder / f"{name}.schema.json"


def write(folder: Path = FOLDER) -> list[Path]:
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for name in DOCUMENTS:
        path = _path(folder, name)
        path.write_text(_text(name), encoding="utf-8")
        paths.append(path)
    return paths


def stale(folder: Path = FOLDER) -> list[Path]:
    """Schema files that are missing or differ from what their model generates."""
    return [
        path
        for name in DOCUMENTS
        if not (path := _path(folder, name)).is_file() or path.read_text(encoding="utf-8") != _text(name)
    ]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m evalgate.schemas", description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, default=FOLDER, help=f"folder (default: {FOLDER})")
    parser.add_argument("--check", action="store_true", help="only check; exit 1 if a file is stale")
    args = parser.parse_args(argv)
    if args.check:
        old = stale(args.out)
        for path in old:
            print(f"stale: {path} (regenerate with: python -m evalgate.schemas)", file=sys.stderr)
        return 1 if old else 0
    for path in write(args.out):
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
