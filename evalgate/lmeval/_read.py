"""Finding one lm-eval run in what a user points at: a folder, a results JSON or samples files.

lm-eval's layouts (lm_eval/loggers/evaluation_tracker.py and, before 0.4.3, lm_eval/__main__.py):

- ``--output_path DIR``: ``DIR/<model>/results_<date>.json`` and one
  ``samples_<task>_<date>.jsonl`` per task (0.4.3 and later).
- ``--output_path NAME.json`` (0.4.9 and later): ``NAME_<date>.json`` and the samples beside it,
  with no model folder. Results files are therefore found by their content (a JSON object with
  ``results`` and ``configs``), whatever their name, and matched to samples by ``<date>``.
- lm-eval main of May-June 2024: ``samples_<task>_<date>.json`` (see ``_rows``).
- 0.4.0-0.4.2: ``results.json`` (or the ``--output_path`` file) and
  ``<model_args with / and = as __>_<task>.jsonl`` beside it: the results' ``model_args`` and
  ``configs`` name those files.

A folder can hold several runs (a shared results folder, a rerun). None is chosen silently: they
are listed and the import is refused (exit 2) unless ``--baseline-run``/``--candidate-run`` (a
run's date or its results file name) or a results file given as the path picks one. What was
chosen and how is said in the arm's notes.
"""

from __future__ import annotations

import errno
import json
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from evalgate.errors import ConfigError
from evalgate.lmeval._rows import MAX_RESULTS_BYTES, SampleFile, read_bounded, regular_size
from evalgate.redact import env_secrets, redact

__all__ = ["LmEvalOutput", "read_lmeval"]

_DATE = r"\d{4}-\d{2}-\d{2}T[\d\-.]+"
_SAMPLES = re.compile(rf"^samples_(?P<task>.+)_(?P<date>{_DATE})\.(?P<ext>jsonl|json)(?:\.gz)?$")
_READ = (".json", ".jsonl", ".json.gz", ".jsonl.gz")
_DATED = re.compile(rf"^(?P<stem>.+)_(?P<date>{_DATE})\.json$")
_MAX_FOLDERS = 10_000
LAYOUTS = {
    "jsonl": "lm-eval >= 0.4.3 (samples_<task>_<date>.jsonl)",
    "json": "lm-eval main of May-June 2024 (samples_<task>_<date>.json)",
    "old": "lm-eval 0.4.0-0.4.2 (<model_args>_<task>.jsonl holding one JSON array, beside results.json)",
}


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


@dataclass
class LmEvalOutput:
    """One lm-eval run: per task, its logged samples (one dict per document and filter)."""

    where: str
    samples: dict[str, list[dict[str, Any]]]
    files: dict[str, Path]
    results: dict[str, Any] | None = None
    results_path: Path | None = None
    notes: list[str] = field(default_factory=list)
    digests: dict[str, str] = field(default_factory=dict)
    """task -> sha256 of its samples by document (two arms' identical samples are one run twice)."""
    run: str | None = None
    """lm-eval's date of the run (None: the 0.4.0-0.4.2 layout, which has none)."""
    layout: str = LAYOUTS["jsonl"]
    positions: dict[str, list[str]] = field(default_factory=dict)
    """task -> per sample row, where its file holds it (``line n``): errors name the file and row."""

    def at(self, task: str, index: int) -> str:
        """The file and row of ``task``'s ``index``-th sample, as an error names it."""
        rows = self.positions.get(task) or []
        pos = rows[index] if index < len(rows) else f"row {index + 1}"
        return f"{self.files.get(task, task)} {pos}"

    def task_config(self, task: str) -> dict[str, Any]:
        return _dict(_dict(_dict(self.results).get("configs")).get(task))

    def version(self, task: str) -> int:
        """lm-eval's task version, as evalgate's integer suite version (1 when absent)."""
        raw = _dict(_dict(self.results).get("versions")).get(task)
        try:
            return max(1, int(float(raw)))
        except (TypeError, ValueError, OverflowError):
            return 1


@dataclass
class _Run:
    folder: Path
    date: str | None
    kind: str
    samples: dict[str, Path]
    results_path: Path | None = None
    results: dict[str, Any] | None = None

    @property
    def key(self) -> str:
        if self.date:
            return self.date
        return self.results_path.name if self.results_path else str(self.folder)

    def describe(self) -> str:
        r = _dict(self.results)
        cfg = _dict(r.get("config"))
        args = cfg.get("model_args")
        if isinstance(args, dict):
            named = args.get("pretrained") or args.get("model")
        else:
            m = re.search(r"(?:^|,)\s*(?:pretrained|model)=([^,]+)", args) if isinstance(args, str) else None
            named = m.group(1) if m else None
        model = ", ".join(str(v) for v in dict.fromkeys([cfg.get("model"), named, r.get("model_name")]) if v)
        where = self.results_path or self.folder
        return (
            f"{self.key}: model {redact(model, secrets=env_secrets()) or 'unknown (no results JSON)'}, "
            f"tasks {', '.join(sorted(self.samples))} ({where})"
        )


def _results_doc(path: Path, *, must: bool) -> dict[str, Any] | None:
    """``path`` as an lm-eval results JSON (an object with ``results`` and ``configs``), None when
    it is some other file; ``must``: refuse instead (a file named results*, or given as one)."""
    try:
        doc = json.loads(read_bounded(path, MAX_RESULTS_BYTES).decode("utf-8"))
    except ConfigError:
        if must:
            raise
        return None
    except (ValueError, RecursionError) as e:  # not UTF-8, not JSON, nested past the parser's depth
        if must:
            raise ConfigError(
                f"{path} is not JSON ({getattr(e, 'msg', None) or type(e).__name__})",
                fix="give the file lm-eval wrote",
            ) from None
        return None
    if (
        isinstance(doc, dict)
        and isinstance(doc.get("results"), dict)
        and isinstance(doc.get("configs"), dict)
    ):
        return doc
    if must:
        kinds = {list: "a list", str: "a string", bool: "true/false", type(None): "null"}
        what = (
            "an object without results and configs"
            if isinstance(doc, dict)
            else kinds.get(type(doc), "a number")
        )
        raise ConfigError(
            f"{path} is not an lm-eval results file: it is {what}, where lm-eval writes a JSON object "
            "with results and configs",
            fix="give the results JSON lm-eval wrote (or the samples alone), unedited",
        )
    return None


def _walk(root: Path) -> list[Path]:
    """Every .json/.jsonl file under ``root``; links to folders are followed, a loop is refused."""
    files: list[Path] = []
    seen: set[tuple[int, int]] = set()
    stack = [root]
    while stack:
        folder = stack.pop()
        try:
            st = folder.stat()
            entries = sorted(os.scandir(folder), key=lambda e: e.name, reverse=True)
        except OSError as exc:
            loop = exc.errno == errno.ELOOP
            raise ConfigError(
                f"{folder} is a symlink loop" if loop else f"cannot read {folder}: {exc.strerror or exc}",
                fix="remove the link, or give the run's own folder",
            ) from None
        if (st.st_dev, st.st_ino) in seen:
            raise ConfigError(
                f"{folder} is a symlink loop: it leads back to a folder already searched",
                fix="remove the link, or give the run's own folder",
            )
        seen.add((st.st_dev, st.st_ino))
        if len(seen) > _MAX_FOLDERS:
            raise ConfigError(
                f"{root} holds more than {_MAX_FOLDERS} folders", fix="give the run's own folder"
            )
        for e in entries:
            path = Path(e.path)
            if e.is_symlink():
                try:
                    os.stat(path)
                except OSError as exc:
                    if exc.errno == errno.ELOOP:
                        raise ConfigError(f"{path} is a symlink loop", fix="remove the link") from None
            if e.is_dir():
                stack.append(path)
            elif e.name.endswith(_READ):
                files.append(path)
    return files


def _siblings(folder: Path) -> list[Path]:
    try:
        return sorted(p for p in folder.iterdir() if p.name.endswith(_READ))
    except OSError as exc:
        raise ConfigError(
            f"cannot read {folder}: {exc.strerror or exc}", fix="check its permissions"
        ) from None


def _old_run(folder: Path, path: Path, doc: dict[str, Any], jsonl: list[Path]) -> _Run | None:
    """lm-eval 0.4.0-0.4.2: the samples of the run whose results are ``doc``, by their names."""
    args = _dict(doc.get("config")).get("model_args")
    if not isinstance(args, str):
        return None
    prefix = re.sub("/|=", "__", args) + "_"
    names = {f.name: f for f in jsonl}
    samples = {t: names[f"{prefix}{t}.jsonl"] for t in doc["configs"] if f"{prefix}{t}.jsonl" in names}
    return _Run(folder, None, "old", samples, path, doc) if samples else None


def _runs_in(folder: Path, files: list[Path]) -> list[_Run]:
    """The runs whose samples lie in ``folder``, each with its results JSON when there is one."""
    dated: dict[str, _Run] = {}
    for f in files:
        if m := _SAMPLES.match(f.name):
            run = dated.setdefault(m["date"], _Run(folder, m["date"], m["ext"], {}))
            run.kind = "json" if m["ext"] == "json" else run.kind
            run.samples[m["task"]] = f
    others = [f for f in files if not _SAMPLES.match(f.name)]
    jsonl = [f for f in others if f.suffix == ".jsonl"]
    if not dated and not jsonl:
        return []
    runs = list(dated.values())
    for f in sorted(
        (f for f in others if f.suffix == ".json"), key=lambda f: (not f.name.startswith("results_"), f.name)
    ):
        doc = _results_doc(f, must=f.name.startswith("results"))
        if doc is None:
            continue
        m = _DATED.match(f.name)
        if m is None:
            old = _old_run(folder, f, doc, jsonl)
            runs += [old] if old else []
        elif (run := dated.get(m["date"])) is not None and run.results_path is None:
            run.results_path, run.results = f, doc
    return runs


def _found(paths: Sequence[Path], label: str) -> list[_Run]:
    """Every run among ``paths``: a folder's runs, or the run a results or samples file belongs to
    (only the samples files given, then)."""
    found: dict[tuple[Path, str], _Run] = {}
    for p in paths:
        if p.is_dir():
            by_folder: dict[Path, list[Path]] = {}
            for f in _walk(p):
                by_folder.setdefault(f.parent, []).append(f)
            for folder, files in by_folder.items():
                for run in _runs_in(folder, files):
                    found.setdefault((run.folder, run.key), run)
            continue
        regular_size(p)
        runs = _runs_in(p.parent, _siblings(p.parent))
        if _SAMPLES.match(p.name) or p.suffix in (".jsonl", ".gz"):  # a .gz is samples or nothing
            hit = next((r for r in runs if p.name in {f.name for f in r.samples.values()}), None)
            if hit is None:
                raise ConfigError(
                    f"--{label}-samples {p}: not an lm-eval samples file (lm-eval >= 0.4.3 names them "
                    "samples_<task>_<date>.jsonl, read gzipped as .jsonl.gz too; 0.4.0-0.4.2 wrote "
                    "<model_args>_<task>.jsonl, read only uncompressed, with the results.json beside it "
                    "that names its model_args and task)",
                    fix="give the files lm-eval wrote, with their results JSON beside them, unrenamed",
                )
            mine = found.setdefault((hit.folder, hit.key), replace(hit, samples={}))
            mine.samples.update({t: f for t, f in hit.samples.items() if f.name == p.name})
        else:
            _results_doc(p, must=True)
            hit = next((r for r in runs if r.results_path and r.results_path.name == p.name), None)
            if hit is None:
                raise ConfigError(
                    f"--{label}-samples {p}: an lm-eval results file, but no samples of its run lie beside it",
                    fix="run lm-eval with --log_samples, and keep its samples files beside the results",
                )
            found[hit.folder, hit.key] = hit
    return sorted(found.values(), key=lambda r: (r.date or "", str(r.results_path or r.folder)))


def _choose(runs: list[_Run], wanted: str | None, *, label: str, where: str) -> tuple[_Run, str | None]:
    listing = "runs found:\n" + "\n".join(f"  {r.describe()}" for r in runs)
    if wanted is not None:
        hits = [
            r
            for r in runs
            if wanted in (r.date, r.key)
            or (r.results_path is not None and wanted in (r.results_path.name, str(r.results_path)))
        ]
        if len(hits) != 1:
            raise ConfigError(
                f"--{label}-run {wanted}: "
                + ("no such run" if not hits else f"{len(hits)} runs match")
                + f" in {where}",
                fix=f"give one of the dates (or results file names) listed to --{label}-run",
                detail=listing,
            )
        others = [r.key for r in runs if r is not hits[0]]
        return hits[0], (
            f"{label}: run {hits[0].key} picked by --{label}-run from {len(runs)} runs "
            f"(not {', '.join(others)})"
            if others
            else None
        )
    if len(runs) > 1:
        raise ConfigError(
            f"--{label}-samples {where} holds {len(runs)} lm-eval runs; evalgate will not guess which "
            f"is the {label}",
            fix=f"pick one with --{label}-run DATE (e.g. --{label}-run {runs[-1].key}), or give its "
            f"results file as --{label}-samples",
            detail=listing,
        )
    return runs[0], None


def _filters(results: dict[str, Any] | None, task: str) -> list[str] | None:
    """The task's filter names in lm-eval's order (None: no results JSON says)."""
    if results is None or task not in _dict(results.get("configs")):
        return None
    listed = _dict(results["configs"][task]).get("filter_list")
    if not isinstance(listed, list) or not listed:
        return ["none"]
    names = [str(f.get("name")) for f in listed if isinstance(f, dict) and f.get("name")]
    return names if len(names) == len(listed) else None


def read_lmeval(paths: Sequence[Path], *, label: str, run: str | None = None) -> LmEvalOutput:
    """The one lm-eval run among ``paths`` (``run``: its date or results file name, when several
    are there); ``label`` names the arm in errors and notes."""
    where = ", ".join(map(str, paths))
    runs = _found(paths, label)
    if not runs:
        raise ConfigError(
            f"--{label}-samples {where}: no lm-eval samples found (samples_<task>_<date>.jsonl, or "
            "0.4.0-0.4.2's <model_args>_<task>.jsonl beside its results.json)",
            fix="run lm-eval with --log_samples --output_path DIR and give DIR (or its files)",
        )
    chosen, note = _choose(runs, run, label=label, where=where)
    out = LmEvalOutput(
        where=where,
        samples={},
        files={},
        results=chosen.results,
        results_path=chosen.results_path,
        run=chosen.date,
        layout=LAYOUTS[chosen.kind],
    )
    out.notes += [note] if note else []
    if chosen.results_path is None:
        out.notes.append(f"{label}: no lm-eval results JSON beside the samples; model and config unknown")
    elif not chosen.results_path.name.startswith("results_"):
        out.notes.append(f"{label}: results file {chosen.results_path} (found by its content)")
    if chosen.kind != "jsonl":
        out.notes.append(f"{label}: read as {LAYOUTS[chosen.kind]}")
    for task, path in sorted(chosen.samples.items()):
        filters = _filters(chosen.results, task)
        sf = SampleFile(path, task, filters, label=label)
        out.samples[task], out.files[task], out.digests[task] = sf.rows, path, sf.digest
        out.positions[task] = sf.positions
        if sf.filters_by_order:
            out.notes.append(
                f"{label}: {task}'s samples name no filter (lm-eval < 0.4.7): each document's rows "
                f"taken as {', '.join(filters or [])}, in the order lm-eval writes them"
            )
        if sf.computed_hashes:
            out.notes.append(
                f"{label}: {task}'s samples log no doc_hash (lm-eval < 0.4.3): documents and prompts "
                "hashed here as lm-eval does, to pair them"
            )
    return out
