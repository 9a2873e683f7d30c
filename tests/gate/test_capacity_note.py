"""#44: compare says what the candidate buys beside the verdict: the KV capacity each server
reported at launch, as bench reads it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from evalgate.gate import load_run, verdict_for
from tests.helpers.runs import SynthSuite, build_run


def _run(tmp_path: Path, servers: dict[str, dict[str, Any]]) -> Path:
    run = build_run(tmp_path / "run", [SynthSuite("gsm8k", (30, 0, 0, 10))])
    path = run / "manifest.json"
    manifest = json.loads(path.read_text())
    for arm, server in servers.items():
        manifest["arms"][arm]["server"] = server
    path.write_text(json.dumps(manifest, indent=2))
    return run


def _pool(tokens: int, mib: float) -> dict[str, Any]:
    return {"kv_tokens": tokens, "kv_mib": mib, "pool_sized_by_memory": True, "source": "vLLM log"}


def test_both_arms_capacity_is_a_note_beside_the_verdict(tmp_path: Path) -> None:
    run = _run(
        tmp_path,
        {
            "baseline": {"kv_capacity": _pool(100_000, 4000.0)},
            "candidate": {"kv_capacity": _pool(200_000, 4000.0)},
        },
    )
    verdict = verdict_for(load_run(run))
    assert verdict.verdict == "PASS"
    note = [n for n in verdict.notes if n.startswith("KV capacity:")]
    assert note == [
        "KV capacity: candidate x2.00 the baseline's tokens (basis: KV pool tokens (the pool sized from free "
        "memory, the same on both arms); baseline 100,000, candidate 200,000 tokens)"
    ]


def test_sglang_capacity_block_is_read_too(tmp_path: Path) -> None:
    run = _run(
        tmp_path,
        {"baseline": {"capacity": _pool(50_000, 2000.0)}, "candidate": {"capacity": _pool(90_000, 2000.0)}},
    )
    assert any(
        n.startswith("KV capacity: candidate x1.80 the baseline's tokens")
        for n in verdict_for(load_run(run)).notes
    )


def test_no_note_unless_both_arms_report_capacity(tmp_path: Path) -> None:
    run = _run(tmp_path, {"baseline": {"kv_capacity": _pool(100_000, 4000.0)}})
    assert not [n for n in verdict_for(load_run(run)).notes if n.startswith("KV capacity")]
